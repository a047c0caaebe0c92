package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
)

func open(settings map[string]string) (backend.Backend, error) { return Open(settings) }

func TestMain(m *testing.M) { backendtest.Main(m, open) }

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		Settings: func(t *testing.T) map[string]string {
			return map[string]string{"path": filepath.Join(t.TempDir(), "lab", "sysbox.sbxstate")}
		},
		Open: open,
		WriteRaw: func(t *testing.T, settings map[string]string, data []byte) {
			if err := os.MkdirAll(filepath.Dir(settings["path"]), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(settings["path"], data, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func saved(t *testing.T) (*Backend, []byte) {
	t.Helper()
	b, err := New(filepath.Join(t.TempDir(), "s.sbxstate"))
	if err != nil {
		t.Fatal(err)
	}
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Serial = 1
	if err := b.Save(context.Background(), st, 0); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(b.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b, data
}

// A damaged state file is refused on read, and refused before any mutation through the Manager.
func TestDamagedStateFileRefused(t *testing.T) {
	tests := []struct {
		name   string
		damage func([]byte) []byte
		is     error
	}{
		{"torn write (first half only)", func(b []byte) []byte { return b[:len(b)/2] }, durable.ErrCorrupt},
		{"torn tail (last bytes missing)", func(b []byte) []byte { return b[:len(b)-3] }, durable.ErrCorrupt},
		{"zero-length file", func([]byte) []byte { return nil }, durable.ErrCorrupt},
		{"bit flip in a resource", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), "198.51.100.0/24", "198.51.100.1/24", 1))
		}, durable.ErrCorrupt},
		{"unknown format version", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"format_version": 1`, `"format_version": 3`, 1))
		}, durable.ErrUnknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, data := saved(t)
			bad := tt.damage(data)
			if err := os.WriteFile(b.Path(), bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if st, err := b.Read(context.Background()); st != nil || !errors.Is(err, tt.is) {
				t.Fatalf("Read: got %v, %v; want nil and %v", st, err, tt.is)
			}
			m := backend.NewManager(b, backend.Options{})
			_, err := m.Mutate(context.Background(), "state rm", true, func(*states.State) error {
				t.Fatalf("mutation reached a damaged state")
				return nil
			})
			if !errors.Is(err, tt.is) {
				t.Fatalf("Mutate: got %v, want %v", err, tt.is)
			}
			after, _ := os.ReadFile(b.Path())
			if string(after) != string(bad) {
				t.Fatalf("the damaged file was changed by a refused mutation")
			}
			if snaps, _ := b.Snapshots(context.Background()); len(snaps) != 0 {
				t.Fatalf("got %d snapshots, want none from a refused mutation", len(snaps))
			}
		})
	}
}

func TestLockFilesStayAndRecordHolder(t *testing.T) {
	b, _ := saved(t)
	ctx := context.Background()
	id, err := b.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatal(err)
	}
	holder := durable.HolderOf(b.Path() + ".lock")
	if !strings.HasPrefix(holder, "pid ") {
		t.Fatalf("lock file holder: got %q, want pid …", holder)
	}
	if err := b.Unlock(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".lock", ".lock.json", ".cas.lock"} {
		if _, err := os.Stat(b.Path() + p); err != nil {
			t.Fatalf("%s must stay after unlock: %v", p, err)
		}
	}
}

func TestOpenRejectsUnknownSetting(t *testing.T) {
	if _, err := Open(map[string]string{"pth": "x"}); err == nil || !strings.Contains(err.Error(), `"pth"`) {
		t.Fatalf("got %v, want an error naming the unknown setting", err)
	}
}

// A state path that is a dangling symlink, or a directory, is not "no state": reading, saving
// at serial 0 (which would pass the CAS and replace the link) and snapshotting all refuse, and
// nothing is written at the link or its target.
func TestStatePathNotAFileRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		is   error
	}{
		{"dangling symlink", func(t *testing.T, path string) {
			if err := os.Symlink(filepath.Join(filepath.Dir(path), "moved-away.sbxstate"), path); err != nil {
				t.Fatal(err)
			}
		}, durable.ErrDanglingSymlink},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "s.sbxstate")
			b, err := New(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.make(t, path)
			check := func(what string, err error) {
				t.Helper()
				if err == nil || errors.Is(err, backend.ErrNoState) || (tc.is != nil && !errors.Is(err, tc.is)) {
					t.Fatalf("%s: got %v, want a refusal (%v)", what, err, tc.is)
				}
				if !strings.Contains(err.Error(), path) {
					t.Fatalf("%s: error does not name the path %s: %v", what, path, err)
				}
			}
			st, err := b.Read(ctx)
			if st != nil {
				t.Fatalf("Read returned a state %+v", st)
			}
			check("Read", err)
			_, _, _, err = b.StoredSerial(ctx)
			check("StoredSerial", err)
			ns := states.New()
			ns.Set(backendtest.Resource(ns.Lineage, "sysbox_node.web"))
			ns.Serial = 1
			check("Save at serial 0", b.Save(ctx, ns, 0))
			_, err = b.Snapshot(ctx, "pre-destroy")
			check("Snapshot", err)
			if _, err := os.Stat(filepath.Join(dir, "moved-away.sbxstate")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the link target was created: %v", err)
			}
			if fi, err := os.Lstat(path); err != nil || fi.Mode().IsRegular() {
				t.Fatalf("the state path was replaced by a file: %v %v", fi, err)
			}
		})
	}
}

// Reading a topology that was never applied (validate, plan, state list) leaves no directory
// behind; the first lock creates it.
func TestReadCreatesNothing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), ".sysbox")
	b, err := New(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if st, err := b.Read(ctx); err != nil || st != nil {
		t.Fatalf("Read of no state: %v, %v; want nil, nil", st, err)
	}
	if _, _, _, err := b.StoredSerial(ctx); err != nil {
		t.Fatalf("StoredSerial of no state: %v", err)
	}
	if snaps, err := b.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("Snapshots of no state: %v, %v", snaps, err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading created %s (%v)", dir, err)
	}
	id, err := b.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatalf("first lock in a missing directory: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("the first lock did not create %s: %v", dir, err)
	}
	if err := b.Unlock(ctx, id); err != nil {
		t.Fatal(err)
	}
}
