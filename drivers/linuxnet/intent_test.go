package linuxnet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Intents lists a topology's intent records; a record it cannot read or decode is an error
// naming it (it used to be skipped, so an audit read "clean").
func TestIntentsRefuseUnreadableRecords(t *testing.T) {
	owner := substrate.Owner{Topology: "topo-a", Address: "sysbox_node.web", Type: "sysbox_node", Generation: 1}
	for _, tc := range []struct {
		name string
		bad  func(t *testing.T, path string)
	}{
		{"truncated record", func(t *testing.T, path string) {
			b, err := durable.EncodeRecord(intentKind, 1, intent{Name: "sbx-x", Marker: owner.Marker()})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"not a marker", func(t *testing.T, path string) {
			b, err := durable.EncodeRecord(intentKind, 1, intent{Name: "sbx-x", Marker: "garbage"})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory (EISDIR)", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := writeIntent(dir, "sbx-good", owner); err != nil {
				t.Fatal(err)
			}
			bad := filepath.Join(dir, "sbx-x.intent")
			tc.bad(t, bad)
			got, err := Intents(dir, owner.Topology)
			if err == nil || !strings.Contains(err.Error(), bad) {
				t.Fatalf("Intents: got %v, %v; want an error naming %s", got, err, bad)
			}
		})
	}
	t.Run("dangling symlink", func(t *testing.T) {
		dir := t.TempDir()
		if err := writeIntent(dir, "sbx-good", owner); err != nil {
			t.Fatal(err)
		}
		// A link to a missing record opens with ENOENT but is not absent: refused, unlike a
		// record whose entry is gone (removed by a parallel clean-up after the listing).
		if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "sbx-y.intent")); err != nil {
			t.Fatal(err)
		}
		if _, err := Intents(dir, owner.Topology); !errors.Is(err, durable.ErrDanglingSymlink) {
			t.Fatalf("Intents with a dangling symlink: got %v, want ErrDanglingSymlink", err)
		}
		if err := os.Remove(filepath.Join(dir, "sbx-y.intent")); err != nil {
			t.Fatal(err)
		}
		got, err := Intents(dir, owner.Topology)
		if err != nil || len(got) != 1 || !got[0].Owner.Equal(owner) {
			t.Fatalf("Intents: got %+v, %v; want the one good record", got, err)
		}
	})
}
