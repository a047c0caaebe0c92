package states

import (
	"bytes"
	"os"
	"testing"
)

// FuzzDecodeMutated changes one byte of a valid state file (testdata/sample.sbxstate and a
// freshly encoded one): Decode must refuse it or return exactly the original state — a change
// the checksum cannot see (whitespace, the tool version) may pass, a changed resource never.
func FuzzDecodeMutated(f *testing.F) {
	golden, err := os.ReadFile("testdata/sample.sbxstate")
	if err != nil {
		f.Fatal(err)
	}
	fresh, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	files := [][]byte{golden, fresh}
	want := make([][]byte, len(files))
	for i, b := range files {
		st, err := Decode(b)
		if err != nil {
			f.Fatalf("seed %d: %v", i, err)
		}
		if want[i], err = Encode(st); err != nil {
			f.Fatal(err)
		}
	}
	for i := range files {
		f.Add(uint8(i), uint32(0), byte(' '))
		f.Add(uint8(i), uint32(len(files[i])/2), byte('1'))
		f.Add(uint8(i), uint32(len(files[i])-3), byte('a'))
	}
	f.Fuzz(func(t *testing.T, which uint8, pos uint32, b byte) {
		k := int(which) % len(files)
		data := bytes.Clone(files[k])
		i := int(pos % uint32(len(data)))
		if data[i] == b {
			return
		}
		data[i] = b
		st, err := Decode(data)
		if err != nil {
			return
		}
		got, err := Encode(st)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		// The tool version is not covered by the checksum (it says who wrote the file).
		st.ToolVersion = sample().ToolVersion
		norm, _ := Encode(st)
		if !bytes.Equal(norm, want[k]) {
			t.Fatalf("byte %d set to %q: a changed state was accepted as valid:\n%s", i, b, got)
		}
	})
}
