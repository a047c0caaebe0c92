package crash

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestDiskFullMidRun puts the state directory and checkpoint log (.sysbox/) on a small tmpfs
// that is nearly full, for a range of free space, so that apply runs out of space at a
// different write each time. The failing command must name the file and ENOSPC; the state on
// disk must still read as valid (nothing durable damaged, no half-written file trusted); after
// the space is freed, `sysbox recover` and the next apply must converge with state and world in
// agreement.
func TestDiskFullMidRun(t *testing.T) {
	testenv.RequireRoot(t)
	failed := 0
	for _, free := range []int{4, 8, 12, 16, 24, 32, 48, 64} { // KiB left for .sysbox/
		t.Run(strconv.Itoa(free)+"KiB", func(t *testing.T) {
			dir := newLab(t)
			mnt := filepath.Join(dir, ".sysbox")
			if err := os.Mkdir(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=256k,mode=0700"); err != nil {
				t.Fatalf("mount tmpfs: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			filler := filepath.Join(mnt, "filler")
			if err := os.WriteFile(filler, make([]byte, (256-free)<<10), 0o600); err != nil {
				t.Fatal(err)
			}
			r := run(t, dir, nil, "apply", "-auto-approve")
			if r.Killed {
				t.Fatalf("apply killed: %s", r.Out)
			}
			if r.Code != 0 {
				failed++
				// The web view's last-run file only warns when it cannot be written: the run's
				// failure must come from another line.
				named := false
				for _, line := range strings.Split(r.Out, "\n") {
					if !strings.HasPrefix(line, "Warning:") && strings.Contains(line, "no space left on device") && strings.Contains(line, ".sysbox/") {
						named = true
					}
				}
				if !named {
					t.Fatalf("apply on a full disk: the error must name the file under .sysbox/ and ENOSPC:\n%s", r.Out)
				}
				for _, line := range strings.Split(r.Out, "\n") {
					if strings.Contains(line, "no space left") {
						t.Logf("apply failed: %s", strings.TrimSpace(line))
					}
				}
			}
			_ = readState(t, dir) // fails the test if the durable state does not read as valid
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			recoverAndApply(t, dir, "after freeing space")
		})
	}
	t.Logf("%d of 8 runs ran out of space", failed)
	if failed < 3 {
		t.Fatalf("only %d runs ran out of space: the sizes do not hit the run", failed)
	}
}

// recoverAndApply runs `sysbox recover` and then apply after a fault was removed, and checks
// that state and world agree after each and that the lab converged (all six resources).
func recoverAndApply(t *testing.T, dir, what string) {
	t.Helper()
	must(t, run(t, dir, nil, "recover"), "recover "+what)
	agree(t, dir, "after recover "+what)
	must(t, run(t, dir, nil, "apply", "-auto-approve"), "apply "+what)
	agree(t, dir, "after apply "+what)
	if st := readState(t, dir); st == nil || len(st.Resources) != 6 {
		t.Fatalf("converged state %s: %v", what, st)
	}
}
