package executor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/pkg/substrate"
)

// validLog writes a real checkpoint log (header and one record per step of a few operations
// taken from the test topology) and returns its bytes.
func validLog(f *testing.F) []byte {
	dir := f.TempDir()
	l, err := CreateLog(dir, RunHeader{Run: "run-1", Command: "apply", Lineage: "lin", Serial: 3, Fingerprint: "fp", Started: time.Unix(0, 0).UTC()}, nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, a := range topology(1, 2, true) {
		op := &OpState{Addr: a.Addr.String(), Op: plans.Create, Fingerprint: "fp", Action: a}
		for _, s := range []Step{StepBegin, StepCreated, StepProvisioning, StepDone} {
			op.Step = s
			if s == StepCreated {
				op.Handle = &substrate.Handle{Driver: "fake", ExternalID: "x-" + op.Addr}
			}
			if err := l.Checkpoint(op); err != nil {
				f.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// readLogBytes reads data as a checkpoint log; the result rendered as JSON for comparison.
func readLogBytes(t *testing.T, data []byte) (*Interrupted, []byte, error) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	it, err := ReadLog(dir)
	if err != nil || it == nil {
		return it, nil, err
	}
	b, err := json.Marshal(struct {
		H RunHeader
		F bool
		O []*OpState
	}{it.Header, it.Finished, it.Ops})
	if err != nil {
		t.Fatal(err)
	}
	return it, b, nil
}

// FuzzReadLog: no input panics or hangs the checkpoint reader.
func FuzzReadLog(f *testing.F) {
	good := validLog(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = readLogBytes(t, data)
	})
}

// FuzzReadLogMutated changes one byte of a valid log. The reader must refuse it, read exactly
// the original, or — when the damage is in the tail — report a torn tail and return exactly
// the operations of a prefix of whole original records. A changed record is never trusted.
func FuzzReadLogMutated(f *testing.F) {
	good := validLog(f)
	lines := bytes.SplitAfter(good, []byte{'\n'})
	f.Add(uint32(0), byte('x'))
	f.Add(uint32(len(good)/2), byte('1'))
	f.Add(uint32(len(good)-1), byte(' '))
	f.Add(uint32(len(good)-len(lines[len(lines)-2])-1), byte('x')) // the last newline but one
	f.Fuzz(func(t *testing.T, pos uint32, b byte) {
		data := bytes.Clone(good)
		i := int(pos % uint32(len(data)))
		if data[i] == b {
			return
		}
		data[i] = b
		it, got, err := readLogBytes(t, data)
		if err != nil {
			return
		}
		_, want, err := readLogBytes(t, good)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			return
		}
		if it.TornTail {
			var prefix []byte
			for _, l := range lines {
				prefix = append(prefix, l...)
				if _, p, err := readLogBytes(t, prefix); err == nil && bytes.Equal(got, p) {
					return
				}
			}
		}
		t.Fatalf("byte %d set to %q: a changed log was accepted (torn tail %v):\n%s", i, b, it.TornTail, got)
	})
}
