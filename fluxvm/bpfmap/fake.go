package bpfmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"zyvor.dev/sysbox/internal/durable"
)

// Fake is an in-memory Store keyed by pin, for unit and crash tests. It can recreate a map (new
// id, no entries), change its ABI, refuse writes over max_entries, and fail chosen operations.
// With a state file (NewFakeFile) every mutation is persisted durably, so separate processes (the
// binary under test and its hooks) share the maps.
type Fake struct {
	mu     sync.Mutex
	file   string
	nextID uint32
	maps   map[string]*FakeMap
	fail   map[string]error // "op pin" -> error, op in probe|snapshot|restore
}

// FakeMap is one simulated pinned map. Keys and values are hex strings.
type FakeMap struct {
	ABI     ABI               `json:"abi"`
	ID      uint32            `json:"id"`
	Generic bool              `json:"generic"`
	Entries map[string]string `json:"entries"`
}

var _ Store = (*Fake)(nil)

// NewFake returns an empty in-memory store.
func NewFake() *Fake {
	return &Fake{nextID: 1, maps: map[string]*FakeMap{}, fail: map[string]error{}}
}

type fakeFile struct {
	NextID uint32              `json:"next_id"`
	Maps   map[string]*FakeMap `json:"maps"`
}

// NewFakeFile returns a store persisted in path (created when missing). Each call re-reads the
// file, so concurrent processes see each other's mutations as long as they do not overlap.
func NewFakeFile(path string) (*Fake, error) {
	f := NewFake()
	f.file = path
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

const fakeKind = "fluxvm-fake-bpf"

func (f *Fake) load() error {
	if f.file == "" {
		return nil
	}
	data, err := os.ReadFile(f.file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fake bpf state %s: %w", f.file, err)
	}
	var st fakeFile
	if _, err := durable.DecodeRecord(data, fakeKind, 1, &st); err != nil {
		return fmt.Errorf("fake bpf state %s: %w", f.file, err)
	}
	f.nextID, f.maps = st.NextID, st.Maps
	if f.maps == nil {
		f.maps = map[string]*FakeMap{}
	}
	if f.nextID == 0 {
		f.nextID = 1
	}
	return nil
}

func (f *Fake) save() error {
	if f.file == "" {
		return nil
	}
	b, err := durable.EncodeRecord(fakeKind, 1, fakeFile{NextID: f.nextID, Maps: f.maps})
	if err != nil {
		return err
	}
	return durable.WriteFile(f.file, b, 0o600)
}

// mutate re-reads the backing file, applies fn and persists the result.
func (f *Fake) mutate(fn func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	return f.save()
}

func (f *Fake) view(fn func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		return err
	}
	return fn()
}

// Create (re)creates the map pinned at pin with abi and no entries, as an apply hook recreating
// a map would. Generic is derived from the type.
func (f *Fake) Create(pin string, abi ABI) error {
	return f.mutate(func() error {
		f.maps[pin] = &FakeMap{ABI: abi, ID: f.nextID, Generic: GenericType(abi.Type), Entries: map[string]string{}}
		f.nextID++
		return nil
	})
}

// Remove unpins the map.
func (f *Fake) Remove(pin string) error {
	return f.mutate(func() error {
		delete(f.maps, pin)
		return nil
	})
}

// Put writes one entry, refusing a new key beyond max_entries as the kernel does (E2BIG).
func (f *Fake) Put(pin string, key, value []byte) error {
	return f.mutate(func() error { return f.put(pin, key, value) })
}

func (f *Fake) put(pin string, key, value []byte) error {
	m, ok := f.maps[pin]
	if !ok {
		return fmt.Errorf("map %s: %w", pin, os.ErrNotExist)
	}
	if uint32(len(key)) != m.ABI.KeySize || uint32(len(value)) != m.ABI.ValueSize {
		return fmt.Errorf("map %s: key/value of %d/%d bytes, map takes %d/%d", pin, len(key), len(value), m.ABI.KeySize, m.ABI.ValueSize)
	}
	k := hex.EncodeToString(key)
	if _, exists := m.Entries[k]; !exists && m.ABI.MaxEntries > 0 && uint32(len(m.Entries)) >= m.ABI.MaxEntries {
		return fmt.Errorf("map %s: %w: map is full (%d entries)", pin, ErrOverCapacity, m.ABI.MaxEntries)
	}
	m.Entries[k] = hex.EncodeToString(value)
	return nil
}

// Entries returns a copy of the map's entries (hex key -> hex value).
func (f *Fake) Entries(pin string) (map[string]string, error) {
	var out map[string]string
	err := f.view(func() error {
		m, ok := f.maps[pin]
		if !ok {
			return fmt.Errorf("map %s: %w", pin, os.ErrNotExist)
		}
		out = make(map[string]string, len(m.Entries))
		for k, v := range m.Entries {
			out[k] = v
		}
		return nil
	})
	return out, err
}

// Map returns a copy of the map's metadata and entries.
func (f *Fake) Map(pin string) (FakeMap, bool) {
	var out FakeMap
	var ok bool
	_ = f.view(func() error {
		m, found := f.maps[pin]
		if found {
			ok = true
			out = *m
			out.Entries = map[string]string{}
			for k, v := range m.Entries {
				out.Entries[k] = v
			}
		}
		return nil
	})
	return out, ok
}

// FailOn makes the next op ("probe", "snapshot", "restore") on pin return err (nil clears it).
// Failures are in-memory only.
func (f *Fake) FailOn(op, pin string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, op+" "+pin)
		return
	}
	f.fail[op+" "+pin] = err
}

func (f *Fake) failure(op, pin string) error {
	if err, ok := f.fail[op+" "+pin]; ok {
		delete(f.fail, op+" "+pin)
		return fmt.Errorf("map %s: %s: %w", pin, op, err)
	}
	return nil
}

func (f *Fake) lookup(spec Spec) (*FakeMap, error) {
	rel, err := filepath.Rel(spec.BPFFSRoot, spec.Pin)
	if spec.BPFFSRoot == "" || err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%s: pin %s: %w", where(spec), spec.Pin, ErrPinEscape)
	}
	m, ok := f.maps[spec.Pin]
	if !ok {
		return nil, fmt.Errorf("%s: pin %s: %w", where(spec), spec.Pin, ErrMapMissing)
	}
	return m, nil
}

func (m *FakeMap) info() Info {
	return Info{ABI: m.ABI, ID: m.ID, Entries: int64(len(m.Entries)), Generic: m.Generic}
}

// Probe returns the live info and checks the declared ABI and F11.
func (f *Fake) Probe(ctx context.Context, spec Spec) (Info, error) {
	var info Info
	err := f.view(func() error {
		if err := f.failure("probe", spec.Pin); err != nil {
			return err
		}
		m, err := f.lookup(spec)
		if err != nil {
			return err
		}
		info = m.info()
		if spec.NoCount {
			info.Entries = -1
		}
		if err := checkDeclaredABI(spec.Declared, info, true); err != nil {
			return fmt.Errorf("%s: pin %s: %w", where(spec), spec.Pin, err)
		}
		if err := CheckPolicy(m.ABI.Type, spec.Policy); err != nil {
			return fmt.Errorf("%s: %w", where(spec), err)
		}
		return nil
	})
	return info, err
}

type fakeSnapshot struct {
	Pin      string            `json:"pin"`
	Policy   Policy            `json:"policy"`
	Info     Info              `json:"info"`
	Entries  map[string]string `json:"entries,omitempty"`
	Recorded bool              `json:"recorded"`
}

const fakeSnapKind = "fluxvm-fake-map-snapshot"

// Snapshot records metadata and, unless metadata-only, the entries, durably.
func (f *Fake) Snapshot(ctx context.Context, spec Spec, path string, progress Progress) (SnapshotInfo, error) {
	var si SnapshotInfo
	err := f.view(func() error {
		if err := f.failure("snapshot", spec.Pin); err != nil {
			return err
		}
		m, err := f.lookup(spec)
		if err != nil {
			return err
		}
		if err := checkDeclaredABI(spec.Declared, m.info(), true); err != nil {
			return fmt.Errorf("%s: snapshot: pin %s: %w", where(spec), spec.Pin, err)
		}
		if err := CheckPolicy(m.ABI.Type, spec.Policy); err != nil {
			return fmt.Errorf("%s: snapshot: %w", where(spec), err)
		}
		s := fakeSnapshot{Pin: spec.Pin, Policy: spec.Policy, Info: m.info()}
		if spec.Policy != MetadataOnly {
			s.Entries = m.Entries
			s.Recorded = true
		}
		b, err := durable.EncodeRecord(fakeSnapKind, 1, s)
		if err != nil {
			return err
		}
		if err := durable.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("%s: snapshot: %w", where(spec), err)
		}
		if progress != nil {
			progress(int64(len(s.Entries)), int64(len(s.Entries)))
		}
		sum := sha256.Sum256(b)
		si = SnapshotInfo{Path: path, Info: s.Info, Entries: int64(len(s.Entries)), SHA256: hex.EncodeToString(sum[:])}
		return nil
	})
	return si, err
}

// Restore replays a snapshot into the map now at spec.Pin under spec.Policy.
func (f *Fake) Restore(ctx context.Context, spec Spec, path string, progress Progress) (RestoreReport, error) {
	rep := RestoreReport{Policy: spec.Policy}
	// As KernelStore: never through a symlink, and only the expected file when a digest is given.
	data, err := durable.ReadRegular(path, 0)
	if err != nil {
		return rep, fmt.Errorf("%s: restore: snapshot %s: %w", where(spec), path, err)
	}
	if sum := sha256.Sum256(data); spec.SnapshotSHA256 != "" && hex.EncodeToString(sum[:]) != spec.SnapshotSHA256 {
		return rep, fmt.Errorf("%s: restore: snapshot %s has sha256 %x, expected %s: %w", where(spec), path, sum, spec.SnapshotSHA256, ErrCorruptSnapshot)
	}
	var s fakeSnapshot
	if _, err := durable.DecodeRecord(data, fakeSnapKind, 1, &s); err != nil {
		return rep, fmt.Errorf("%s: restore: snapshot %s: %w: %w", where(spec), path, ErrCorruptSnapshot, err)
	}
	err = f.mutate(func() error {
		if err := f.failure("restore", spec.Pin); err != nil {
			return err
		}
		m, err := f.lookup(spec)
		if err != nil {
			return err
		}
		rep.Target = m.info()
		if spec.Policy == MetadataOnly {
			rep.Skipped = true
			return nil
		}
		if err := checkRestorable(s.Info, m.info()); err != nil {
			return fmt.Errorf("%s: restore %s: snapshot %s into pin %s: %w", where(spec), spec.Policy, path, spec.Pin, err)
		}
		if err := checkDeclaredABI(spec.Declared, m.info(), false); err != nil {
			return fmt.Errorf("%s: restore %s: pin %s: %w", where(spec), spec.Policy, spec.Pin, err)
		}
		if err := CheckPolicy(m.ABI.Type, spec.Policy); err != nil {
			return fmt.Errorf("%s: restore %s: %w", where(spec), spec.Policy, err)
		}
		if !s.Recorded {
			return fmt.Errorf("%s: restore %s: snapshot %s (taken under %s): %w", where(spec), spec.Policy, path, s.Policy, ErrNoEntries)
		}
		need := len(s.Entries)
		if spec.Policy == Merge {
			need = len(m.Entries)
			for k := range s.Entries {
				if _, ok := m.Entries[k]; !ok {
					need++
				}
			}
		}
		if m.ABI.MaxEntries > 0 && need > int(m.ABI.MaxEntries) {
			return fmt.Errorf("%s: restore %s: %d entries needed in %s, max_entries %d: %w", where(spec), spec.Policy, need, spec.Pin, m.ABI.MaxEntries, ErrOverCapacity)
		}
		if spec.Policy == Replace {
			for k := range m.Entries {
				if _, keep := s.Entries[k]; !keep {
					delete(m.Entries, k)
					rep.Deleted++
				}
			}
		}
		keys := make([]string, 0, len(s.Entries))
		for k := range s.Entries {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			m.Entries[k] = s.Entries[k]
			rep.Written++
			if progress != nil {
				progress(int64(i+1), int64(len(keys)))
			}
		}
		rep.Target = m.info()
		return nil
	})
	return rep, err
}

// MarshalJSON is for debugging output of the whole fake.
func (f *Fake) MarshalJSON() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return json.Marshal(f.maps)
}
