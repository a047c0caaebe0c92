package sysbox

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver/fake"
)

// TestApplyAfterDriftSuggestsRefresh: web[1]'s node vanished behind sysbox's back. apply does
// not observe first, so an apply that must touch it (a third target changes the hosts of every
// node on the LAN) fails naming web[1] and ends with the refresh hint; after refresh (web[1]
// absent) the same apply converges and the plan has no changes.
func TestApplyAfterDriftSuggestsRefresh(t *testing.T) {
	dir, world, sb := fakeLabSmall(t)
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")
	web1 := readLocalState(t, filepath.Join(dir, ".sysbox", "state")).Resource(addrs.MustParseInstance("sysbox_node.web[1]"))
	d, err := fake.New(fake.Options{Path: world})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(web1.ExternalID); err != nil {
		t.Fatal(err)
	}

	r := sb("apply", "-auto-approve", "-var", "targets=3")
	expectResult(t, r, 1, "sysbox_node.web[1]", web1.ExternalID)
	if !strings.HasSuffix(strings.TrimSpace(r.stderr), driftHint) {
		t.Fatalf("apply after drift: the error does not end with the refresh hint\nstderr: %s", r.stderr)
	}
	expectResult(t, sb("refresh"), 0, "sysbox_node.web[1]: absent")
	expectResult(t, sb("apply", "-auto-approve", "-var", "targets=3"), 0, "Apply complete.")
	expectResult(t, sb("plan", "-detailed-exitcode", "-var", "targets=3"), 0, "No changes")

	// A failure of another kind gets no hint.
	other := errors.New("state lock held by someone")
	if got := withDriftHint(other); got != other {
		t.Errorf("withDriftHint(%v) = %v, want it unchanged", other, got)
	}
}
