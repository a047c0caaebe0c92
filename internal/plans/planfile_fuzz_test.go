package plans_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/plans"
)

// storedPlans returns the golden plans of testdata/ as stored plan files (checksummed records).
func storedPlans(f *testing.F) [][]byte {
	paths, _ := filepath.Glob("testdata/*.plan.json")
	if len(paths) == 0 {
		f.Fatal("no testdata/*.plan.json")
	}
	dir := f.TempDir()
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var pl plans.Plan
		if err := json.Unmarshal(b, &pl); err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		stored := filepath.Join(dir, filepath.Base(p))
		if err := plans.WriteFile(stored, &pl); err != nil {
			f.Fatal(err)
		}
		if b, err = os.ReadFile(stored); err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// readPlanBytes stores data in a fresh file and reads it as a plan.
func readPlanBytes(t *testing.T, data []byte) (*plans.Plan, error) {
	path := filepath.Join(t.TempDir(), "fuzz.plan")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return plans.ReadFile(path)
}

func planJSON(t *testing.T, p *plans.Plan) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("accepted plan does not encode: %v", err)
	}
	return b
}

// FuzzReadFile: no input panics or hangs the stored-plan reader, and whatever it accepts is
// written and read back unchanged.
func FuzzReadFile(f *testing.F) {
	for _, b := range storedPlans(f) {
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := readPlanBytes(t, data)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "again.plan")
		if err := plans.WriteFile(path, p); err != nil {
			t.Fatalf("accepted plan does not write: %v", err)
		}
		p2, err := plans.ReadFile(path)
		if err != nil {
			t.Fatalf("re-written plan does not read: %v", err)
		}
		if a, b := planJSON(t, p), planJSON(t, p2); !bytes.Equal(a, b) {
			t.Fatalf("plan changed by a write and read:\n%s\n---\n%s", a, b)
		}
	})
}

// FuzzReadFileMutated changes one byte of a valid stored plan: the reader must refuse it or
// read exactly the original plan (a mutation the checksum cannot see, such as trailing space).
func FuzzReadFileMutated(f *testing.F) {
	files := storedPlans(f)
	for i := range files {
		f.Add(uint8(i), uint32(0), byte('x'))
		f.Add(uint8(i), uint32(len(files[i])/2), byte('0'))
		f.Add(uint8(i), uint32(len(files[i])-2), byte('}'))
	}
	f.Fuzz(func(t *testing.T, which uint8, pos uint32, b byte) {
		orig := files[int(which)%len(files)]
		data := bytes.Clone(orig)
		i := int(pos % uint32(len(data)))
		if data[i] == b {
			return
		}
		data[i] = b
		p, err := readPlanBytes(t, data)
		if err != nil {
			return
		}
		want, err := readPlanBytes(t, orig)
		if err != nil {
			t.Fatal(err)
		}
		if a, w := planJSON(t, p), planJSON(t, want); !bytes.Equal(a, w) {
			t.Fatalf("byte %d set to %q: a changed plan was accepted as valid:\n%s", i, b, a)
		}
	})
}
