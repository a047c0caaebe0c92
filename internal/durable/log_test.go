package durable

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const testKind = "test-log"

type step struct {
	N int `json:"n"`
}

// writeLog creates a log with n records and returns its path and contents.
func writeLog(t *testing.T, n int) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.log")
	l, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := l.Append(testKind, 1, step{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

func readSteps(t *testing.T, p string) ([]int, Replay, error) {
	t.Helper()
	var got []int
	rep, err := Read(p, testKind, 1, func(r Record) error {
		var s step
		if err := r.Decode(&s); err != nil {
			return err
		}
		if uint64(s.N) != r.Seq {
			return fmt.Errorf("record %d holds step %d", r.Seq, s.N)
		}
		got = append(got, s.N)
		return nil
	})
	return got, rep, err
}

// TestOpenOnTornWrite cuts the log at every byte of its last record (etcd's
// TestOpenOnTornWrite): Read reports the incomplete record and delivers the others, Open cuts
// it, and appending afterwards continues the sequence.
func TestOpenOnTornWrite(t *testing.T) {
	const n = 5
	_, full := writeLog(t, n)
	lastStart := bytes.LastIndexByte(full[:len(full)-1], '\n') + 1
	for size := lastStart; size < len(full); size++ {
		t.Run(fmt.Sprint(size-lastStart), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.log")
			if err := os.WriteFile(p, full[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			got, rep, err := readSteps(t, p)
			if err != nil || len(got) != n-1 || rep.Cut != int64(size-lastStart) || rep.Size != int64(lastStart) {
				t.Fatalf("read: got %v, %+v, %v; want %d records and a cut of %d bytes", got, rep, err, n-1, size-lastStart)
			}
			l, rep, err := Open(p, testKind, 1, nil)
			if err != nil || rep.Cut != int64(size-lastStart) || rep.LastSeq != n-1 {
				t.Fatalf("open: %+v, %v", rep, err)
			}
			if err := l.Append(testKind, 1, step{N: n}); err != nil {
				t.Fatal(err)
			}
			l.Close()
			got, rep, err = readSteps(t, p)
			if err != nil || len(got) != n || rep.Cut != 0 {
				t.Fatalf("after open+append: got %v, %+v, %v; want %d records", got, rep, err, n)
			}
		})
	}
}

// TestRepairRuleRefusesDamage: only an incomplete final record may be cut; anything else is
// corruption, named by record number.
func TestRepairRuleRefusesDamage(t *testing.T) {
	_, full := writeLog(t, 4)
	lines := bytes.SplitAfter(full, []byte("\n"))[:4]
	for _, tc := range []struct {
		name string
		edit func() []byte
		want string
	}{
		{"complete last record with a bad checksum", func() []byte {
			l := bytes.Replace(lines[3], []byte(`"n":4`), []byte(`"n":7`), 1)
			return bytes.Join(append(append([][]byte{}, lines[:3]...), l), nil)
		}, "record 4: test-log record: corrupt record: checksum mismatch"},
		{"complete last record of garbage", func() []byte {
			return bytes.Join(append(append([][]byte{}, lines[:3]...), []byte("\x00\x00\x00\n")), nil)
		}, "record 4"},
		{"record missing in the middle", func() []byte {
			return bytes.Join([][]byte{lines[0], lines[2], lines[3]}, nil)
		}, "record 2: corrupt record: numbered 3"},
		{"record repeated", func() []byte {
			return bytes.Join([][]byte{lines[0], lines[1], lines[1], lines[2]}, nil)
		}, "record 3: corrupt record: numbered 2"},
		{"unknown version", func() []byte {
			return bytes.Replace(full, []byte(`"version":1`), []byte(`"version":2`), 1)
		}, "record 1: test-log format 2 is newer than this sysbox (1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.log")
			if err := os.WriteFile(p, tc.edit(), 0o600); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(p)
			_, _, err := readSteps(t, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read: got %v, want %q", err, tc.want)
			}
			if _, _, err := Open(p, testKind, 1, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: got %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
				t.Fatal("a refused log was changed")
			}
		})
	}
}

func TestLogGroupCommitAndSequence(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	l, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(p); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second Create: got %v, want os.ErrExist", err)
	}
	var wg sync.WaitGroup
	const workers, each = 16, 25
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := l.AppendSeq(testKind, 1, func(seq uint64) any { return step{N: int(seq)} }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	s := l.Stats()
	l.Close()
	if s.Records != workers*each || s.Syncs > s.Records {
		t.Fatalf("stats %+v, want %d records", s, workers*each)
	}
	got, _, err := readSteps(t, p) // each record's payload names its own sequence number
	if err != nil || len(got) != workers*each {
		t.Fatalf("read back: %d records, %v", len(got), err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none"), testKind, 1, nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing log: got %v, want os.ErrNotExist", err)
	}
}

// TestAppendNoSync: a record appended without waiting is written at once (a killed process
// keeps it) but is not durable until the next fsync, which any waiting append makes; Durable
// reports the fsynced length, Stats the unsynced count.
func TestAppendNoSync(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	l, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	durableLen := func() int64 {
		var n int64
		l.Durable(func(size int64) { n = size })
		return n
	}
	fileLen := func() int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if err := l.AppendSeq(testKind, 1, func(seq uint64) any { return step{N: int(seq)} }); err != nil {
		t.Fatal(err)
	}
	first := fileLen()
	if d := durableLen(); d != first || first == 0 {
		t.Fatalf("after a synced append: durable %d, file %d", d, first)
	}
	for i := 0; i < 2; i++ {
		if err := l.AppendSeqNoSync(testKind, 1, func(seq uint64) any { return step{N: int(seq)} }); err != nil {
			t.Fatal(err)
		}
	}
	written := fileLen()
	if written <= first {
		t.Fatalf("unsynced records not written: file %d bytes, was %d", written, first)
	}
	if d := durableLen(); d != first {
		t.Fatalf("unsynced records counted durable: %d, want %d", d, first)
	}
	if s := l.Stats(); s.Records != 3 || s.Syncs != 1 || s.Unsynced != 2 {
		t.Fatalf("stats %+v, want 3 records, 1 fsync, 2 unsynced", s)
	}
	// What a power loss now may leave: the first record only; the log reads back as a prefix.
	got, _, err := readSteps(t, p)
	if err != nil || len(got) != 3 {
		t.Fatalf("read back %d records, %v", len(got), err)
	}
	if err := l.AppendSeq(testKind, 1, func(seq uint64) any { return step{N: int(seq)} }); err != nil {
		t.Fatal(err)
	}
	if d, f := durableLen(), fileLen(); d != f {
		t.Fatalf("after the next synced append: durable %d, file %d", d, f)
	}
	if s := l.Stats(); s.Records != 4 || s.Syncs != 2 {
		t.Fatalf("stats %+v, want 4 records in 2 fsyncs", s)
	}
}

// TestAppendNoSyncConcurrent mixes waiting and unsynced appends from many goroutines: every
// record is in the file, in sequence, once Close returns, and every waiting append's record
// was durable when it returned.
func TestAppendNoSyncConcurrent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	l, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const workers, each = 16, 30
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var mine uint64
				build := func(seq uint64) any { mine = seq; return step{N: int(seq)} }
				if (w+i)%3 != 0 {
					if err := l.AppendSeqNoSync(testKind, 1, build); err != nil {
						t.Error(err)
					}
					continue
				}
				if err := l.AppendSeq(testKind, 1, build); err != nil {
					t.Error(err)
				}
				// Acknowledged: the durable prefix holds this record.
				var d int64
				l.Durable(func(size int64) { d = size })
				b, err := os.ReadFile(p)
				if err != nil {
					t.Error(err)
					return
				}
				if n := uint64(bytes.Count(b[:d], []byte{'\n'})); n < mine {
					t.Errorf("record %d acknowledged but the durable prefix holds %d records", mine, n)
				}
			}
		}(w)
	}
	wg.Wait()
	s := l.Stats()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Records != workers*each || s.Unsynced == 0 || s.Syncs == 0 {
		t.Fatalf("stats %+v", s)
	}
	got, _, err := readSteps(t, p) // each record names its own sequence number
	if err != nil || len(got) != workers*each {
		t.Fatalf("read back: %d records, %v", len(got), err)
	}
}
