package wire

import (
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"zyvor.dev/sysbox/internal/durable"
)

// LoadOrCreateKey returns the Ed25519 key stored at path, creating it (0600, durably: temp
// file, fsync, rename, directory fsync) when the file does not exist.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, key, err := ed25519.GenerateKey(nil)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", path, err)
		}
		out := pem.EncodeToMemory(&pem.Block{Type: "SYSBOX ED25519 SEED", Bytes: key.Seed()})
		if err := durable.WriteFile(path, out, 0o600); err != nil {
			return nil, fmt.Errorf("key %s: %w", path, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "SYSBOX ED25519 SEED" || len(blk.Bytes) != ed25519.SeedSize {
		return nil, fmt.Errorf("key %s: not a sysbox Ed25519 key file", path)
	}
	return ed25519.NewKeyFromSeed(blk.Bytes), nil
}
