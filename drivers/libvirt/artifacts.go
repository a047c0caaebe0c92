package libvirt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Artifact kinds this driver resolves.
const (
	KindQCOW2  = "qcow2"  // a qcow2 disk image without a backing file
	KindRootfs = "rootfs" // a raw disk or filesystem image (an ext4 root filesystem)
	KindKernel = "kernel" // a kernel file, or a directory holding vmlinux and optionally initrd.img
)

// Files inside a stored artifact directory.
const (
	fileDisk   = "disk"
	fileKernel = "vmlinux"
	fileInitrd = "initrd.img"
)

// storeDir is where resolved artifacts live, one read-only directory per digest.
func (d *Driver) storeDir() string { return filepath.Join(d.stateDir, "store") }

// artifactFiles lists the files an artifact of kind consists of, relative names → source paths.
// A kernel given as a directory is its vmlinux and, when present, its initrd.img (the layout
// scripts/guest-image writes); a kernel given as a file is that file alone.
func artifactFiles(kind, src string) ([][2]string, error) {
	switch kind {
	case KindQCOW2, KindRootfs:
		return [][2]string{{fileDisk, src}}, nil
	case KindKernel:
		fi, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return [][2]string{{fileKernel, src}}, nil
		}
		out := [][2]string{{fileKernel, filepath.Join(src, fileKernel)}}
		if _, err := os.Stat(filepath.Join(src, fileInitrd)); err == nil {
			out = append(out, [2]string{fileInitrd, filepath.Join(src, fileInitrd)})
		}
		return out, nil
	}
	return nil, fmt.Errorf("kind %q: the libvirt driver resolves %s, %s and %s: %w", kind, KindQCOW2, KindRootfs, KindKernel, driver.ErrInvalid)
}

// manifestName lists the stored files with their sha256 ("name sha256hex" lines): what
// VerifyArtifact re-checks the store against.
const manifestName = "MANIFEST"

func manifest(files [][2]string) ([]byte, error) {
	var b bytes.Buffer
	for _, f := range files {
		sum, _, err := substrate.FileSHA256(f[1])
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s %s\n", f[0], sum)
	}
	return b.Bytes(), nil
}

// checkQCOW2 refuses a file that is not qcow2 or that has a backing file of its own: a baseline
// must be self-contained, or "immutable" would depend on a file sysbox does not hold.
func checkQCOW2(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr [16]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return fmt.Errorf("%s: not a qcow2 image (short header): %w", path, driver.ErrInvalid)
	}
	if string(hdr[:4]) != "QFI\xfb" {
		return fmt.Errorf("%s: not a qcow2 image (magic %q): %w", path, hdr[:4], driver.ErrInvalid)
	}
	if off := binary.BigEndian.Uint64(hdr[8:16]); off != 0 {
		return fmt.Errorf("%s: qcow2 image has a backing file; flatten it (qemu-img convert) into a self-contained baseline: %w", path, driver.ErrInvalid)
	}
	return nil
}

// ResolveArtifact hashes spec's source, checks a pinned digest, and stores a read-only copy in
// StateDir/store/<hex digest> (once; a stored copy is re-verified instead). Ref is that
// directory: overlays and kernels are always taken from it, never from the source, which may
// change after the plan.
func (d *Driver) ResolveArtifact(ctx context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error) {
	src := spec.Source
	if !filepath.IsAbs(src) && spec.BaseDir != "" {
		src = filepath.Join(spec.BaseDir, src)
	}
	what := fmt.Sprintf("artifact %s (%s)", spec.Source, spec.Kind)
	files, err := artifactFiles(spec.Kind, src)
	if err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: %w", what, err)
	}
	if spec.Kind == KindQCOW2 {
		if err := checkQCOW2(src); err != nil {
			return substrate.ArtifactIdentity{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	digest, size, err := substrate.DigestSource(src)
	if err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: %w", what, err)
	}
	if spec.Digest != "" && spec.Digest != digest {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: content is %s, pinned %s: %w", what, digest, spec.Digest, driver.ErrDigestMismatch)
	}
	id := substrate.ArtifactIdentity{Kind: spec.Kind, Source: spec.Source, Architecture: spec.Architecture,
		GuestFamily: spec.GuestFamily, Size: size, Digest: digest,
		Ref: filepath.Join(d.storeDir(), strings.TrimPrefix(digest, "sha256:"))}
	if _, err := os.Stat(id.Ref); err == nil {
		if d.VerifyArtifact(ctx, id) == nil {
			return id, nil
		}
		// The store is a cache keyed by content: an entry that no longer verifies (changed, or
		// left incomplete by an older sysbox) is replaced from the source, whose digest was just
		// checked.
		if err := os.RemoveAll(id.Ref); err != nil {
			return substrate.ArtifactIdentity{}, fmt.Errorf("%s: replace stored copy %s: %w", what, id.Ref, err)
		}
	}
	if err := storeFiles(id.Ref, files); err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: store: %w", what, err)
	}
	// The copy, not the source, is what nodes use: verify what landed.
	if err := d.VerifyArtifact(ctx, id); err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: stored copy: %w", what, err)
	}
	return id, nil
}

// storeFiles copies files into a fresh directory next to dir, syncs them, makes them read-only
// and renames the directory into place (then syncs the parent): a crash leaves either no
// directory or a complete one. A concurrent resolve of the same content may win the rename.
func storeFiles(dir string, files [][2]string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := copyFileSync(f[1], filepath.Join(tmp, f[0])); err != nil {
			return err
		}
	}
	m, err := manifest(files)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestName), m, 0o444); err != nil {
		return err
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return nil // stored meanwhile by another resolve; the caller verifies it
		}
		return err
	}
	return durable.SyncDir(parent)
}

func copyFileSync(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// VerifyArtifact re-checks the stored copy id.Ref: it must be the store entry of id.Digest, and
// its files must still hash to what its manifest recorded at resolve (written from content
// that had that digest). A wrong digest or changed content is ErrDigestMismatch; a stored copy that is
// gone is ErrNotFound (resolve again).
func (d *Driver) VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error {
	what := fmt.Sprintf("artifact %s (%s)", id.Source, id.Kind)
	if id.Ref == "" {
		return fmt.Errorf("%s: no stored copy recorded (Ref); resolve it again: %w", what, driver.ErrNotFound)
	}
	if want := strings.TrimPrefix(id.Digest, "sha256:"); filepath.Base(id.Ref) != want {
		return fmt.Errorf("%s: stored copy %s is not the store entry of %s: %w", what, id.Ref, id.Digest, driver.ErrDigestMismatch)
	}
	m, err := os.ReadFile(filepath.Join(id.Ref, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: stored copy %s: %w: %w", what, id.Ref, driver.ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	lines := strings.Split(strings.TrimSpace(string(m)), "\n")
	for _, l := range lines {
		name, sum, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(name, "/") {
			return fmt.Errorf("%s: stored copy %s: malformed manifest line %q: %w", what, id.Ref, l, driver.ErrDigestMismatch)
		}
		got, _, err := substrate.FileSHA256(filepath.Join(id.Ref, name))
		if err != nil {
			return fmt.Errorf("%s: stored copy %s: %w", what, id.Ref, err)
		}
		if got != sum {
			return fmt.Errorf("%s: stored copy %s: %s is sha256:%s, want sha256:%s (digest %s): %w", what, id.Ref, name, got, sum, id.Digest, driver.ErrDigestMismatch)
		}
	}
	return nil
}
