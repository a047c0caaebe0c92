package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"zyvor.dev/sysbox/internal/durable"
)

// A bundle is a topology directory as one content-addressable document: {"files": {relative
// slash path: content}} for UTF-8 files and {"binary": {path: base64}} for the others (a rootfs
// archive, say: a JSON string would replace its invalid UTF-8). encoding/json sorts map keys,
// so the same files give the same bytes (and the same revision digest).
type bundle struct {
	Files  map[string]string `json:"files"`
	Binary map[string][]byte `json:"binary,omitempty"`
}

// MaxBundle bounds a bundle's size.
const MaxBundle = 32 << 20

// PackDir bundles the topology files of dir: every regular file except hidden ones (the
// .sysbox directory holds state and checkpoints, which are not topology).
func PackDir(dir string) ([]byte, error) {
	b := bundle{Files: map[string]string{}}
	size := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		c, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if size += len(c); size > MaxBundle {
			return fmt.Errorf("more than %d bytes of files", MaxBundle)
		}
		if utf8.Valid(c) {
			b.Files[filepath.ToSlash(rel)] = string(c)
		} else {
			if b.Binary == nil {
				b.Binary = map[string][]byte{}
			}
			b.Binary[filepath.ToSlash(rel)] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	return json.Marshal(b)
}

// Unpack writes a bundle's files into dir (durably). A name that is absolute, climbs out of
// dir or is hidden is refused before anything is written.
func Unpack(data []byte, dir string) error {
	var b bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	all := map[string][]byte{}
	for name, c := range b.Files {
		all[name] = []byte(c)
	}
	for name, c := range b.Binary {
		if _, dup := all[name]; dup {
			return fmt.Errorf("bundle: file name %q twice", name)
		}
		all[name] = c
	}
	for name := range all {
		clean := path.Clean(name)
		if clean != name || path.IsAbs(name) || clean == "." || strings.HasPrefix(clean, "../") || clean == ".." {
			return fmt.Errorf("bundle: file name %q leaves the workspace", name)
		}
		for _, part := range strings.Split(clean, "/") {
			if strings.HasPrefix(part, ".") {
				return fmt.Errorf("bundle: file name %q is hidden", name)
			}
		}
	}
	for name, content := range all {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, content) {
			continue // a workspace's next run mostly brings the same files: no rewrite, no fsync
		}
		if err := durable.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("bundle: %s: %w", name, err)
		}
		if err := durable.WriteFile(p, content, 0o644); err != nil {
			return fmt.Errorf("bundle: %s: %w", name, err)
		}
	}
	return nil
}
