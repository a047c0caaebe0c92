package firecracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Artifact kinds this driver resolves: a root filesystem image (ext4) and an uncompressed ELF
// guest kernel (vmlinux).
const (
	KindRootfs = "rootfs"
	KindKernel = "kernel"
)

var _ driver.Artifacts = (*Driver)(nil)

// ResolveArtifact identifies a local rootfs image or kernel by its content: the absolute source
// path, size and sha256. The file stays where it is (the immutable baseline); nodes copy a
// rootfs and only read a kernel.
func (d *Driver) ResolveArtifact(_ context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error) {
	if spec.Kind != KindRootfs && spec.Kind != KindKernel {
		return substrate.ArtifactIdentity{}, fmt.Errorf("firecracker artifact %s: kind %q: want %q or %q: %w", spec.Source, spec.Kind, KindRootfs, KindKernel, driver.ErrInvalid)
	}
	src := spec.Source
	if !filepath.IsAbs(src) {
		src = filepath.Join(spec.BaseDir, src)
	}
	src, err := filepath.Abs(src)
	if err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("firecracker artifact %s: %w", spec.Source, err)
	}
	digest, size, err := fileSHA256(src)
	if err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("firecracker artifact %s: %w", spec.Source, err)
	}
	if spec.Digest != "" && spec.Digest != digest {
		return substrate.ArtifactIdentity{}, fmt.Errorf("firecracker artifact %s: content %s, pinned %s: %w", src, digest, spec.Digest, driver.ErrDigestMismatch)
	}
	return substrate.ArtifactIdentity{Kind: spec.Kind, Source: src, Architecture: spec.Architecture, GuestFamily: spec.GuestFamily,
		Size: size, Digest: digest, Ref: src}, nil
}

// VerifyArtifact re-hashes the source and compares it with the recorded digest.
func (d *Driver) VerifyArtifact(_ context.Context, id substrate.ArtifactIdentity) error {
	digest, _, err := fileSHA256(id.Source)
	if err != nil {
		return fmt.Errorf("firecracker artifact %s: %w", id.Source, err)
	}
	if digest != id.Digest {
		return fmt.Errorf("firecracker artifact %s: content %s, recorded %s: %w", id.Source, digest, id.Digest, driver.ErrDigestMismatch)
	}
	return nil
}

func fileSHA256(p string) (string, int64, error) {
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
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}
