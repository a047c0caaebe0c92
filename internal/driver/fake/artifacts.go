package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func (d *Driver) digestOf(source string) (string, int64) {
	content, ok := d.world.Artifacts[source]
	if !ok {
		content = source
	}
	sum := sha256.Sum256([]byte(content))
	return "sha256:" + hex.EncodeToString(sum[:]), int64(len(content))
}

// ResolveArtifact digests the artifact's content.
func (d *Driver) ResolveArtifact(ctx context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ResolveArtifact"); err != nil {
		return substrate.ArtifactIdentity{}, err
	}
	dg, size := d.digestOf(spec.Source)
	if spec.Digest != "" && spec.Digest != dg {
		return substrate.ArtifactIdentity{}, fmt.Errorf("fake artifact %s: %w: pinned %s, content %s", spec.Source, driver.ErrDigestMismatch, spec.Digest, dg)
	}
	return substrate.ArtifactIdentity{Kind: spec.Kind, Source: spec.Source, Architecture: spec.Architecture,
		GuestFamily: spec.GuestFamily, Size: size, Digest: dg, Ref: "fake-artifact-" + dg[7:19]}, nil
}

// VerifyArtifact re-digests the content.
func (d *Driver) VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "VerifyArtifact"); err != nil {
		return err
	}
	if dg, _ := d.digestOf(id.Source); dg != id.Digest {
		return fmt.Errorf("fake artifact %s: %w: recorded %s, content now %s", id.Source, driver.ErrDigestMismatch, id.Digest, dg)
	}
	return nil
}
