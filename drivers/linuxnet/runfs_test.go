package linuxnet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/testenv"
)

// diskRoot returns a fresh directory on a disk file system, unmounting whatever a test stacks
// on it at cleanup (also when the test fails).
func diskRoot(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	root := filepath.Join(t.TempDir(), "run-sysbox")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mem, err := onMemoryFS(root)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, !mem, "the test directory is on a memory file system: no disk file system to test on")
	t.Cleanup(func() {
		for range 4 {
			if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
				if !errors.Is(err, unix.EINVAL) {
					t.Errorf("unmount %s: %v", root, err)
				}
				return
			}
		}
	})
	return root
}

// mountsAt counts the mounts whose mount point is path.
func mountsAt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			n++
		}
	}
	return n
}

func TestEnsureMemoryFSMountsOverAnEmptyDiskDirectory(t *testing.T) {
	root := diskRoot(t)
	// Empty directories of an earlier run hold nothing to lose.
	if err := os.MkdirAll(filepath.Join(root, "netns", "intents"), 0o700); err != nil {
		t.Fatal(err)
	}
	mounted, err := EnsureMemoryFS(root)
	if err != nil || !mounted {
		t.Fatalf("EnsureMemoryFS on an empty disk directory: mounted %v, %v; want a tmpfs", mounted, err)
	}
	if mem, err := onMemoryFS(root); err != nil || !mem {
		t.Fatalf("after the mount: memory file system %v, %v", mem, err)
	}
	if again, err := EnsureMemoryFS(root); err != nil || again {
		t.Fatalf("second EnsureMemoryFS: mounted %v, %v; want nothing more", again, err)
	}
	if again, err := ensureMemoryFS(root); err != nil || again {
		t.Fatalf("a second process's decision: mounted %v, %v; want nothing more (already a tmpfs)", again, err)
	}
	if n := mountsAt(t, root); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, root)
	}
}

func TestEnsureMemoryFSKeepsRecordsOnDisk(t *testing.T) {
	root := diskRoot(t)
	rec := filepath.Join(root, "netns", "sb-x-g1.json")
	if err := os.MkdirAll(filepath.Dir(rec), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	mounted, err := ensureMemoryFS(root)
	if err != nil || mounted {
		t.Fatalf("EnsureMemoryFS over a record: mounted %v, %v; want the disk kept", mounted, err)
	}
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("the record after EnsureMemoryFS: %v; it must stay visible", err)
	}
	// The first decider now writes on the disk (and holds its shared lock): even with the record
	// gone, another process must not mount over what it may write next.
	if err := os.Remove(rec); err != nil {
		t.Fatal(err)
	}
	if mounted, err := ensureMemoryFS(root); err != nil || mounted {
		t.Fatalf("EnsureMemoryFS while another process uses the disk: mounted %v, %v; want the disk kept", mounted, err)
	}
	if mem, _ := onMemoryFS(root); mem || mountsAt(t, root) != 0 {
		t.Fatalf("a tmpfs was mounted at %s while a process used its disk copy", root)
	}
}

func TestEnsureMemoryFSLeavesAMountPointAlone(t *testing.T) {
	root := diskRoot(t)
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if mounted, err := ensureMemoryFS(root); err != nil || mounted {
		t.Fatalf("EnsureMemoryFS on a mount point: mounted %v, %v; want it left alone", mounted, err)
	}
	if n := mountsAt(t, root); n != 1 {
		t.Fatalf("%d mounts at %s, want only the bind mount", n, root)
	}
}

func TestEnsureMemoryFSMountsOnceAmongConcurrentDeciders(t *testing.T) {
	root := diskRoot(t)
	var wg sync.WaitGroup
	results := make([]bool, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() { // each its own descriptor: its own flock, like another process
			defer wg.Done()
			results[i], errs[i] = ensureMemoryFS(root)
		}()
	}
	wg.Wait()
	n := 0
	for i, m := range results {
		if errs[i] != nil {
			t.Errorf("decider %d: %v", i, errs[i])
		}
		if m {
			n++
		}
	}
	if n != 1 || mountsAt(t, root) != 1 {
		t.Fatalf("%d deciders mounted, %d mounts at %s; want exactly one", n, mountsAt(t, root), root)
	}
}

func TestPrepareStateDirIgnoresDirectoriesOutsideTheRuntimeRoot(t *testing.T) {
	root := diskRoot(t)
	PrepareStateDir(filepath.Join(root, "netns")) // not below RuntimeRoot: a test's or an administrator's
	if mem, _ := onMemoryFS(root); mem || mountsAt(t, root) != 0 {
		t.Fatalf("PrepareStateDir mounted over %s, which is not below %s", root, RuntimeRoot)
	}
}
