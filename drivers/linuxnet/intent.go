package linuxnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The kernel ignores a link alias given at creation, so a link exists for a moment without its
// marker. A process killed in that moment would leave a link no one can prove is theirs, and
// every later attempt would refuse it. An intent record closes the gap: before creating a link
// the caller's marker is written durably to IntentDir/NAME.intent; it is removed once the alias
// is set. A later attempt that finds an unmarked link of that name together with an intent of
// exactly its own owner adopts the link (sets the marker). Without an intent, an unmarked link
// is never touched. The residue audit lists leftover intents, so nothing is lost from view.

const intentKind = "sysbox.linuxnet.intent"

type intent struct {
	Name   string `json:"name"`
	Marker string `json:"marker"`
}

func intentPath(dir, name string) string { return filepath.Join(dir, name+".intent") }

// writeIntent records that name is about to be created for owner (no-op when dir is "").
func writeIntent(dir, name string, owner substrate.Owner) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("intent %s: %w", name, err)
	}
	b, err := durable.EncodeRecord(intentKind, 1, intent{Name: name, Marker: owner.Marker()})
	if err != nil {
		return err
	}
	return durable.WriteFile(intentPath(dir, name), b, 0o600)
}

// clearIntent removes the record once the marker is in place.
func clearIntent(dir, name string) {
	if dir != "" {
		_ = os.Remove(intentPath(dir, name))
	}
}

// hasIntent reports whether an intent for name by exactly owner exists.
func hasIntent(dir, name string, owner substrate.Owner) bool {
	if dir == "" {
		return false
	}
	b, err := os.ReadFile(intentPath(dir, name))
	if err != nil {
		return false
	}
	var in intent
	if _, err := durable.DecodeRecord(b, intentKind, 1, &in); err != nil {
		return false
	}
	return in.Name == name && in.Marker == owner.Marker()
}

// Intents lists leftover intent records of topology in dir (for residue audits and the clean-up
// before a delete). A record that cannot be read or decoded is an error naming it, never
// "clean": it may be one of topology's. A record removed between the listing and the read (a
// parallel clean-up) is skipped.
func Intents(dir, topology string) ([]substrate.Object, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("intents %s: %w", dir, err)
	}
	var out []substrate.Object
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".intent") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, ok, err := durable.ReadFileIfExists(path)
		if err != nil {
			return nil, fmt.Errorf("intent %s: %w", path, err)
		}
		if !ok {
			continue
		}
		var in intent
		if _, err := durable.DecodeRecord(b, intentKind, 1, &in); err != nil {
			return nil, fmt.Errorf("intent %s: %w", path, err)
		}
		o, err := substrate.ParseMarker(in.Marker)
		if err != nil {
			return nil, fmt.Errorf("intent %s: %w", path, err)
		}
		if o.Topology == topology {
			out = append(out, substrate.Object{Kind: "intent", ExternalID: path, Owner: o})
		}
	}
	return out, nil
}

// adoptUnmarked decides about an existing link without a sysbox marker: adopt it only if an
// intent of exactly owner names it.
func adoptUnmarked(dir, kind, name, alias string, owner substrate.Owner) bool {
	if _, err := substrate.ParseMarker(alias); err == nil || alias != "" {
		return false
	}
	return hasIntent(dir, name, owner)
}
