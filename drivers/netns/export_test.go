package netns

import (
	"os"
	"path/filepath"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// writeIntentForTest writes what linuxnet writes before creating a link (same record format).
func writeIntentForTest(d *Driver, name string, owner substrate.Owner) error {
	if err := os.MkdirAll(d.intentDir(), 0o700); err != nil {
		return err
	}
	b, err := durable.EncodeRecord("sysbox.linuxnet.intent", 1, struct {
		Name   string `json:"name"`
		Marker string `json:"marker"`
	}{name, owner.Marker()})
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(d.intentDir(), name+".intent"), b, 0o600)
}
