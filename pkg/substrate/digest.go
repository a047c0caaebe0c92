package substrate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// DigestSource computes an artifact source's content digest. It lives here, beside
// ArtifactIdentity, because the planner and the drivers must compute the same digest (one pinned
// digest satisfies both) and drivers may import neither handlers nor each other.
//
// The digest: the SHA-256 of a file's bytes (the
// same digest the docker driver computes for an image archive), or for a directory the SHA-256
// of a canonical listing of every entry (relative path, type, mode bits, symlink target, and
// each regular file's SHA-256), walked in lexical order. Size is the file size or the sum of
// regular file sizes.
func DigestSource(path string) (digest string, size int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	if !fi.IsDir() {
		sum, n, err := FileSHA256(path)
		if err != nil {
			return "", 0, err
		}
		return "sha256:" + sum, n, nil
	}
	h := sha256.New()
	var paths []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(path, p)
		li, err := os.Lstat(p)
		if err != nil {
			return "", 0, err
		}
		switch {
		case li.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return "", 0, err
			}
			fmt.Fprintf(h, "L %s %o %s\n", filepath.ToSlash(rel), li.Mode().Perm(), t)
		case li.IsDir():
			fmt.Fprintf(h, "D %s %o\n", filepath.ToSlash(rel), li.Mode().Perm())
		case li.Mode().IsRegular():
			sum, n, err := FileSHA256(p)
			if err != nil {
				return "", 0, err
			}
			size += n
			fmt.Fprintf(h, "F %s %o %s\n", filepath.ToSlash(rel), li.Mode().Perm(), sum)
		default:
			fmt.Fprintf(h, "O %s %v\n", filepath.ToSlash(rel), li.Mode().Type())
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size, nil
}

// FileSHA256 is the hex SHA-256 of a file's bytes and its size.
func FileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
