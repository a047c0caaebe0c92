package firecracker

import (
	"context"
	"fmt"
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
	digest, size, err := artifactDigest(src)
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
	digest, _, err := artifactDigest(id.Source)
	if err != nil {
		return fmt.Errorf("firecracker artifact %s: %w", id.Source, err)
	}
	if digest != id.Digest {
		return fmt.Errorf("firecracker artifact %s: content %s, recorded %s: %w", id.Source, digest, id.Digest, driver.ErrDigestMismatch)
	}
	return nil
}

// artifactDigest is a file's artifact digest ("sha256:HEX"), the planner's rule for a file.
func artifactDigest(p string) (string, int64, error) {
	sum, n, err := substrate.FileSHA256(p)
	return "sha256:" + sum, n, err
}
