package linuxnet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// HostsMarkerPrefix starts the line of a node's hosts file that names its owner, so that the
// residue audit can tell whose a left-over file is; everything before it is the base.
const HostsMarkerPrefix = "# sysbox owner "

// RenderHosts is a node's hosts file: base (the lines a resolver needs anyway, e.g. the host's
// /etc/hosts or localhost), then owner's marker line and one line per entry, sorted by address.
func RenderHosts(base []byte, owner substrate.Owner, entries []driver.HostEntry) []byte {
	var b bytes.Buffer
	b.Write(base)
	if len(base) > 0 && base[len(base)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(HostsMarkerPrefix + owner.Marker() + "\n")
	b.WriteString("# attachment aliases on this node's networks (written by sysbox; do not edit)\n")
	es := append([]driver.HostEntry(nil), entries...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Address < es[j].Address })
	for _, e := range es {
		if len(e.Names) > 0 {
			fmt.Fprintf(&b, "%s\t%s\n", e.Address, strings.Join(e.Names, " "))
		}
	}
	return b.Bytes()
}

// HostsOwner returns the owner named by a hosts file RenderHosts wrote.
func HostsOwner(path string) (substrate.Owner, error) {
	f, err := os.Open(path)
	if err != nil {
		return substrate.Owner{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), HostsMarkerPrefix); ok {
			return substrate.ParseMarker(m)
		}
	}
	if err := sc.Err(); err != nil {
		return substrate.Owner{}, err
	}
	return substrate.Owner{}, fmt.Errorf("%s: no sysbox owner line", path)
}

// WriteHostsInPlace makes path hold content, rewriting the same inode: a hosts file is
// bind-mounted into running processes, and a rename would leave them reading the old inode.
// The file is regenerated from state on every apply, so a torn write is repaired by the next
// one; it is synced before returning. Unchanged content is not rewritten.
func WriteHostsInPlace(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := RewriteInPlace(f, path, old, content); err != nil {
		return err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
			}
		}
	}
	return nil
}

// RewriteInPlace makes open file f, named name in errors, hold content instead of old (what it
// holds now): written over the same inode, truncated and synced; nothing is written when the two
// are equal.
func RewriteInPlace(f *os.File, name string, old, content []byte) error {
	if bytes.Equal(old, content) {
		return nil
	}
	if _, err := f.WriteAt(content, 0); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Truncate(int64(len(content))); err != nil {
		return fmt.Errorf("truncate %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	return nil
}
