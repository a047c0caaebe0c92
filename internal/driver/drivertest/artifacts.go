package drivertest

import (
	"errors"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
)

var artifactCases = []Case{
	{Name: "artifacts/digest-pinned-and-verified", Caps: []driver.Capability{driver.CapArtifact}, Run: artifactDigest},
}

const wrongDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// artifactDigest: resolving gives a stable sha256 identity that verifies; a wrong pin and a
// wrong recorded digest are ErrDigestMismatch.
func artifactDigest(t T, h *Harness) {
	ctx := ctxFor(t)
	a := capOf[driver.Artifacts](t, h.Driver, driver.CapArtifact)
	spec := h.Artifact(t)
	id, err := a.ResolveArtifact(ctx, spec)
	if err != nil {
		t.Fatalf("ResolveArtifact(%s): %v", spec.Source, err)
	}
	if !strings.HasPrefix(id.Digest, "sha256:") || len(id.Digest) != len(wrongDigest) {
		t.Fatalf("ResolveArtifact: digest %q, want sha256:<64 hex>", id.Digest)
	}
	again, err := a.ResolveArtifact(ctx, spec)
	if err != nil || again.Digest != id.Digest {
		t.Fatalf("ResolveArtifact again: got %q, %v; want %q", again.Digest, err, id.Digest)
	}
	if err := a.VerifyArtifact(ctx, id); err != nil {
		t.Fatalf("VerifyArtifact of what was resolved: %v", err)
	}
	pinned := spec
	pinned.Digest = id.Digest
	if _, err := a.ResolveArtifact(ctx, pinned); err != nil {
		t.Fatalf("ResolveArtifact pinned to its own digest: %v", err)
	}
	pinned.Digest = wrongDigest
	if _, err := a.ResolveArtifact(ctx, pinned); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Errorf("ResolveArtifact pinned to another digest: got %v, want driver.ErrDigestMismatch", err)
	}
	bad := id
	bad.Digest = wrongDigest
	if err := a.VerifyArtifact(ctx, bad); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Errorf("VerifyArtifact of a wrong recorded digest: got %v, want driver.ErrDigestMismatch", err)
	}
}
