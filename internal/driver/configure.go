package driver

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Configurable is a driver that takes settings from the topology's substrate driver block
// (e.g. libvirt's socket). The CLI calls Configure once per declared block, before any other
// call; a block setting wins over the environment, which wins over the default. A driver that
// does not implement it accepts no settings (Registry.Configure rejects every key).
type Configurable interface {
	// Configure applies settings (secret references already resolved), or returns a
	// *SettingError and changes nothing.
	Configure(settings map[string]string) error
}

// SettingError is a driver block setting a driver rejects: an unknown key (Err nil) or a bad
// value. It matches ErrInvalid.
type SettingError struct {
	Driver string
	Key    string
	Known  []string // the keys the driver accepts, for an unknown key
	Err    error    // why the value is bad; nil for an unknown key
}

func (e *SettingError) Error() string {
	if e.Err == nil {
		known := "none"
		if len(e.Known) > 0 {
			known = strings.Join(e.Known, ", ")
		}
		return fmt.Sprintf("substrate driver %q: unknown setting %q (known: %s)", e.Driver, e.Key, known)
	}
	return fmt.Sprintf("substrate driver %q: setting %q: %v", e.Driver, e.Key, e.Err)
}

func (e *SettingError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// CheckSettingKeys returns a *SettingError for the first key (in sorted order) of settings
// that is not one of known.
func CheckSettingKeys(driverName string, settings map[string]string, known ...string) error {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return &SettingError{Driver: driverName, Key: k, Known: slices.Sorted(slices.Values(known))}
		}
	}
	return nil
}

// OneSetting is CheckSettingKeys for a driver with the one setting key: its value, and whether
// settings hold it.
func OneSetting(driverName string, settings map[string]string, key string) (string, bool, error) {
	if err := CheckSettingKeys(driverName, settings, key); err != nil {
		return "", false, err
	}
	v, ok := settings[key]
	return v, ok, nil
}

// Configure hands the named driver its driver block settings: through Configurable, or, for a
// driver without settings, an error for any key.
func (r *Registry) Configure(name string, settings map[string]string) error {
	d, err := r.Driver(name)
	if err != nil {
		return err
	}
	if c, ok := d.(Configurable); ok {
		return c.Configure(settings)
	}
	return CheckSettingKeys(name, settings)
}
