package executor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
)

// TestImportArtifact: an artifact is imported by what its source resolves to (digest or the
// driver's reference); any other EXTERNAL_ID is refused and nothing is recorded.
func TestImportArtifact(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	art := topology(1, 0, false)[0]
	if _, err := h.ex.Import(ctx, art, fakeDigest("./other.tar")); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Fatalf("import with another digest: got %v, want ErrDigestMismatch", err)
	}
	if st := h.state(); st != nil && st.Resource(art.Addr) != nil {
		t.Fatalf("a refused import recorded %s", art.Addr)
	}
	res, err := h.ex.Import(ctx, art, fakeDigest("./rootfs.tar"))
	if err != nil {
		t.Fatalf("import by digest: %v", err)
	}
	got := h.state().Resource(art.Addr)
	if got == nil || got.ExternalID != res.ExternalID || !strings.HasPrefix(got.ExternalID, "fake-artifact-") {
		t.Fatalf("state after import: got %+v, want the driver's reference as external id", got)
	}
	if !strings.Contains(string(got.Attributes), fakeDigest("./rootfs.tar")) {
		t.Errorf("imported artifact attributes lack its digest: %s", got.Attributes)
	}
}

// TestImportKindTheDriverCannotAdopt: a network whose driver implements no NetworkImporter is
// refused with the missing capability named, and nothing is recorded.
func TestImportKindTheDriverCannotAdopt(t *testing.T) {
	h := newHarness(t)
	nw := topology(1, 0, false)[1]
	_, err := h.ex.Import(context.Background(), nw, "br-x")
	var mc *driver.MissingCapabilityError
	if !errors.As(err, &mc) || !strings.Contains(err.Error(), nw.Addr.String()) {
		t.Fatalf("import of a network through the fake: got %v, want a missing import capability naming %s", err, nw.Addr)
	}
	if st := h.state(); st != nil && st.Resource(nw.Addr) != nil {
		t.Fatalf("a refused import recorded %s", nw.Addr)
	}
}
