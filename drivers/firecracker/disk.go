package firecracker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"zyvor.dev/sysbox/internal/driver"
)

const copyBlock = 64 << 10

var zeroBlock = make([]byte, copyBlock)

// copyRootfs makes dst a private, sparse copy of the immutable baseline src (opened read-only,
// never written) and checks the bytes it copied against want ("sha256:…", "" for no check), so
// a baseline changed since it was resolved is refused (driver.ErrDigestMismatch), not booted.
// The copy is owned by own before it gets its name (a jailed VMM opens it as that uid).
func copyRootfs(src, dst, want string, own fileOwner) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w", src, err)
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("rootfs copy %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	defer out.Close()
	h := sha256.New()
	buf := make([]byte, copyBlock)
	var size int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			h.Write(buf[:n])
			if bytes.Equal(buf[:n], zeroBlock[:n]) {
				// A hole: skip it; the final truncate sets the size.
				if _, err := out.Seek(int64(n), io.SeekCurrent); err != nil {
					return fmt.Errorf("rootfs copy %s: %w", tmp, err)
				}
			} else if _, err := out.Write(buf[:n]); err != nil {
				return fmt.Errorf("rootfs copy %s: %w", tmp, err)
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("rootfs %s: %w", src, rerr)
		}
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return fmt.Errorf("rootfs %s: content is %s, resolved as %s: %w", src, got, want, driver.ErrDigestMismatch)
	}
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("rootfs copy %s: %w", tmp, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("rootfs copy %s: %w", tmp, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("rootfs copy %s: %w", tmp, err)
	}
	if err := own.chown(tmp); err != nil {
		return fmt.Errorf("rootfs copy: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("rootfs copy %s: %w", dst, err)
	}
	return syncDir(filepath.Dir(dst))
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
