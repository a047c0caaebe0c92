package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"zyvor.dev/sysbox/internal/durable"
)

// FileSnapshot records one declared file as it was before apply: whether it existed, its kind,
// content digest, mode and ownership. Content lives beside it in <index>.data.
type FileSnapshot struct {
	Path    string      `json:"path"`
	Existed bool        `json:"existed"`
	Kind    string      `json:"kind,omitempty"` // "file" or "symlink"
	Mode    fs.FileMode `json:"mode,omitempty"`
	UID     int         `json:"uid"`
	GID     int         `json:"gid"`
	Size    int64       `json:"size"`
	SHA256  string      `json:"sha256,omitempty"`
	Target  string      `json:"target,omitempty"` // symlink target
}

const fileSnapKind = "fluxvm-file-snapshot"

func fileSnapPaths(dir string, i int) (meta, data string) {
	return filepath.Join(dir, fmt.Sprintf("%03d.json", i)), filepath.Join(dir, fmt.Sprintf("%03d.data", i))
}

// snapshotFiles captures each declared path (content first, then its checksummed metadata).
func snapshotFiles(dir string, paths []string) ([]FileSnapshot, error) {
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var out []FileSnapshot
	for i, p := range paths {
		metaPath, dataPath := fileSnapPaths(dir, i)
		s := FileSnapshot{Path: p}
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// recorded as absent: rollback removes whatever apply created
			_ = os.Remove(dataPath)
		case err != nil:
			return out, fmt.Errorf("file %s: %w", p, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return out, fmt.Errorf("file %s: %w", p, err)
			}
			s.Existed, s.Kind, s.Target = true, "symlink", target
			_ = os.Remove(dataPath)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return out, fmt.Errorf("file %s: %w", p, err)
			}
			sum := sha256.Sum256(data)
			s.Existed, s.Kind, s.Size, s.SHA256 = true, "file", int64(len(data)), hex.EncodeToString(sum[:])
			s.Mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
			if err := durable.WriteFile(dataPath, data, 0o600); err != nil {
				return out, fmt.Errorf("file %s: snapshot: %w", p, err)
			}
		default:
			return out, fmt.Errorf("file %s: is a %s; only regular files and symlinks are snapshotted", p, fi.Mode().Type())
		}
		if st, ok := statOwner(fi); ok && err == nil {
			s.UID, s.GID = st.uid, st.gid
		}
		b, err := durable.EncodeRecord(fileSnapKind, 1, s)
		if err != nil {
			return out, err
		}
		if err := durable.WriteFile(metaPath, b, 0o600); err != nil {
			return out, fmt.Errorf("file %s: snapshot: %w", p, err)
		}
		out = append(out, s)
	}
	return out, nil
}

type owner struct{ uid, gid int }

func statOwner(fi fs.FileInfo) (owner, bool) {
	if fi == nil {
		return owner{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, false
	}
	return owner{int(st.Uid), int(st.Gid)}, true
}

// restoreFiles puts every declared file back as snapshotted. Each restore is idempotent, so a
// crash part-way is repaired by running it again. All files are attempted; errors are joined.
func restoreFiles(dir string, paths []string, journaled []FileSnapshot) ([]FileSnapshot, error) {
	var out []FileSnapshot
	var errs []error
	for i, p := range paths {
		if i >= len(journaled) {
			errs = append(errs, fmt.Errorf("file %s: the journal records no snapshot of it; not restoring", p))
			continue
		}
		s, err := restoreFile(dir, i, p, journaled[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// maxFileSnapMeta bounds a file snapshot's metadata record.
const maxFileSnapMeta = 1 << 20

// restoreFile puts path p back as snapshot i in dir recorded it, after checking the snapshot's
// metadata is the record the journal holds.
func restoreFile(dir string, i int, p string, journaled FileSnapshot) (FileSnapshot, error) {
	metaPath, dataPath := fileSnapPaths(dir, i)
	s, err := readFileSnapshot(metaPath, p, journaled)
	if err != nil {
		return s, err
	}
	parent := filepath.Dir(p)
	if !s.Existed {
		return s, removeCreatedFile(p)
	}
	if err := durable.MkdirAll(parent, 0o755); err != nil {
		return s, fmt.Errorf("file %s: %w", p, err)
	}
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return s, fmt.Errorf("file %s: is now a directory; not replacing it", p)
	}
	switch s.Kind {
	case "symlink":
		return s, restoreSymlink(p, s)
	case "file":
		return s, restoreRegularFile(p, dataPath, s)
	}
	return s, fmt.Errorf("file %s: snapshot kind %q unknown", p, s.Kind)
}

// readFileSnapshot reads the snapshot metadata of p at metaPath and checks it is for p and
// is what the journal recorded when the snapshot was taken: a record rewritten since (other
// mode, owner, content digest) is not trusted.
func readFileSnapshot(metaPath, p string, journaled FileSnapshot) (FileSnapshot, error) {
	var s FileSnapshot
	raw, err := durable.ReadRegular(metaPath, maxFileSnapMeta)
	if err != nil {
		return s, fmt.Errorf("file %s: snapshot metadata: %w", p, err)
	}
	if _, err := durable.DecodeRecord(raw, fileSnapKind, 1, &s); err != nil {
		return s, fmt.Errorf("file %s: snapshot metadata %s: %w", p, metaPath, err)
	}
	if s.Path != p {
		return s, fmt.Errorf("file %s: snapshot %s is for %s", p, metaPath, s.Path)
	}
	if s != journaled {
		return s, fmt.Errorf("file %s: snapshot metadata %s differs from the journal's record (%+v, journal %+v): %w", p, metaPath, s, journaled, durable.ErrCorrupt)
	}
	return s, nil
}

// removeCreatedFile removes p, which did not exist before apply; a directory there is left
// alone and reported.
func removeCreatedFile(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && fi.IsDir() {
		return fmt.Errorf("file %s: did not exist before; apply left a directory there, not removing it", p)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file %s: remove (did not exist before): %w", p, err)
	}
	return durable.SyncDir(filepath.Dir(p))
}

// restoreSymlink puts the symlink s back at p through a renamed temporary link.
func restoreSymlink(p string, s FileSnapshot) error {
	parent := filepath.Dir(p)
	tmp := filepath.Join(parent, "."+filepath.Base(p)+".fluxvm-restore")
	_ = os.Remove(tmp)
	if err := os.Symlink(s.Target, tmp); err != nil {
		return fmt.Errorf("file %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("file %s: %w", p, err)
	}
	_ = os.Lchown(p, s.UID, s.GID)
	return durable.SyncDir(parent)
}

// restoreRegularFile puts the content at dataPath back at p, after checking it against the
// snapshot's digest. Write, set owner and mode on the temp file, then rename: the path never
// shows a half-written or wrongly-owned file.
func restoreRegularFile(p, dataPath string, s FileSnapshot) error {
	parent := filepath.Dir(p)
	data, err := durable.ReadRegular(dataPath, 0)
	if err != nil {
		return fmt.Errorf("file %s: snapshot content: %w", p, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != s.SHA256 {
		return fmt.Errorf("file %s: snapshot content %s: %w: sha256 mismatch", p, dataPath, durable.ErrCorrupt)
	}
	tmp, err := os.CreateTemp(parent, "."+filepath.Base(p)+".fluxvm-restore-*")
	if err != nil {
		return fmt.Errorf("file %s: %w", p, err)
	}
	tmpName := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmpName)
		return fmt.Errorf("file %s: restore: %w", p, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Chown(s.UID, s.GID); err != nil && os.Geteuid() == 0 {
		return fail(err)
	}
	if err := tmp.Chmod(s.Mode); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmpName, p); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("file %s: restore: %w", p, err)
	}
	return durable.SyncDir(parent)
}

// checkNoStateWithoutJournal refuses a transaction directory whose journal is missing or has no
// begin record while it holds more than what a crash before the begin record leaves (the plan
// copy and temp files): an emptied or removed journal beside snapshots, logs or evidence is
// corruption, and starting over would overwrite the only snapshot of the pre-upgrade state.
func checkNoStateWithoutJournal(txDir string) error {
	ents, err := os.ReadDir(txDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", txDir, err)
	}
	for _, de := range ents {
		n := de.Name()
		if _, temp := durable.TempTarget(n); n == PlanFile || n == JournalFile || temp {
			continue
		}
		return fmt.Errorf("%w: %s has no begin record but the directory holds %s; not starting over", ErrJournalCorrupt, filepath.Join(txDir, JournalFile), n)
	}
	return nil
}
