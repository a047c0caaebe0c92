package bpfmap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/internal/durable"
)

func sampleHeader() *Header {
	return &Header{
		Tool: "fluxvm-upgrade test", CreatedAt: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
		Component: "conntrack", Map: "ct4", Pin: "/sys/fs/bpf/fluxvm/ct4", Policy: Merge,
		Info: Info{ABI: ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 1024}, ID: 42, Entries: 3,
			Generic: true, BootID: "boot-a"},
		KernelName: "ct4", BootID: "boot-a", MapID: 42, ByteOrder: hostByteOrder(), Method: "batch", Recorded: true,
	}
}

// sampleEntries returns n entries of 8+16 bytes split over chunks of at most per entries.
func sampleEntries(n, per int) (*entryChunks, []byte, []byte) {
	c := &entryChunks{}
	var allK, allV []byte
	for i := 0; i < n; {
		m := min(per, n-i)
		var k, v []byte
		for j := 0; j < m; j++ {
			kk := make([]byte, 8)
			binary.LittleEndian.PutUint64(kk, uint64(i+j)*7919)
			vv := bytes.Repeat([]byte{byte(i + j), byte((i + j) >> 8)}, 8)
			k, v = append(k, kk...), append(v, vv...)
		}
		c.add(k, v, m)
		allK, allV = append(allK, k...), append(allV, v...)
		i += m
	}
	return c, allK, allV
}

func encode(t *testing.T, h *Header, c *entryChunks) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	sum, err := writeSnapshot(&buf, h, c)
	if err != nil {
		t.Fatalf("writeSnapshot: %v", err)
	}
	return buf.Bytes(), sum
}

func TestSnapshotFormatRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		entries int
		per     int
		meta    bool
	}{
		{"empty map", 0, 4, false},
		{"one entry", 1, 4, false},
		{"several chunks", 1000, 64, false},
		{"uneven last chunk", 1001, 64, false},
		{"metadata only", 0, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sampleHeader()
			h.Recorded = !tt.meta
			c, wantK, wantV := sampleEntries(tt.entries, tt.per)
			data, sum := encode(t, h, c)
			full := sha256.Sum256(data)
			if got, want := sum, hex.EncodeToString(full[:]); got != want {
				t.Errorf("writeSnapshot sum = %s, want sha256 of the file %s", got, want)
			}
			sd, err := parseSnapshot(data)
			if err != nil {
				t.Fatalf("parseSnapshot: %v", err)
			}
			if got, want := sd.Header.Entries, int64(tt.entries); got != want {
				t.Errorf("entries: got %d, want %d", got, want)
			}
			want := *h
			want.Format, want.Version = SnapshotFormat, SnapshotVersion
			if d := cmp.Diff(want, sd.Header); d != "" {
				t.Errorf("header (-want +got):\n%s", d)
			}
			if !bytes.Equal(sd.Keys, wantK) || !bytes.Equal(sd.Values, wantV) {
				t.Errorf("entries differ after round trip: got %d+%d bytes, want %d+%d", len(sd.Keys), len(sd.Values), len(wantK), len(wantV))
			}
			if got, want := sd.SHA256, sum; got != want {
				t.Errorf("parsed sha256 %s, want %s", got, want)
			}
		})
	}
}

// TestWriteSnapshotBlocks: the writeback callback sees every byte before the checksum once, in
// order, and a failing writer stops the write with its error.
func TestWriteSnapshotBlocks(t *testing.T) {
	c, _, _ := sampleEntries(1001, 64)
	want, wantSum := encode(t, sampleHeader(), c)
	var buf bytes.Buffer
	var next int64
	sum, err := writeSnapshotBlocks(&buf, sampleHeader(), c, func(off, n int64) {
		if off != next || n <= 0 || int64(buf.Len()) != off+n {
			t.Errorf("written(%d, %d) after %d bytes reported and %d in the writer", off, n, next, buf.Len())
		}
		next = off + n
	})
	if err != nil || sum != wantSum || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("writeSnapshotBlocks = %s, %v, %d bytes; want %s and the %d bytes of writeSnapshot", sum, err, buf.Len(), wantSum, len(want))
	}
	if next != int64(len(want)-sha256.Size) {
		t.Errorf("written reported %d bytes, want all %d before the checksum", next, len(want)-sha256.Size)
	}
	for _, failAt := range []int{1, 5, 2*len(c.keys) + 2, 2*len(c.keys) + 3} {
		w := &failingWriter{left: failAt}
		if _, err := writeSnapshot(w, sampleHeader(), c); !errors.Is(err, errDiskFull) {
			t.Errorf("writer failing at write %d: got %v, want its error", failAt, err)
		}
	}
}

var errDiskFull = errors.New("disk full")

// failingWriter accepts left-1 writes and fails the next.
type failingWriter struct{ left int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.left--; w.left == 0 {
		return 0, errDiskFull
	}
	return len(p), nil
}

func TestSnapshotTornAtEveryLength(t *testing.T) {
	c, _, _ := sampleEntries(20, 8)
	data, _ := encode(t, sampleHeader(), c)
	for n := 0; n < len(data); n++ {
		_, err := parseSnapshot(data[:n])
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("truncated to %d of %d bytes: got %v, want ErrCorruptSnapshot", n, len(data), err)
		}
	}
}

func TestSnapshotBitFlipAnywhere(t *testing.T) {
	c, _, _ := sampleEntries(10, 4)
	data, _ := encode(t, sampleHeader(), c)
	for i := 0; i < len(data); i++ {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		_, err := parseSnapshot(bad)
		if i >= 8 && i < 12 {
			// The version field: a flip gives an unknown version, a distinct typed error.
			if !errors.Is(err, ErrSnapshotVersion) && !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("flip at %d (version): got %v, want ErrSnapshotVersion or ErrCorruptSnapshot", i, err)
			}
			continue
		}
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("flip at byte %d of %d: got %v, want ErrCorruptSnapshot", i, len(data), err)
		}
	}
}

func TestSnapshotRejects(t *testing.T) {
	c, _, _ := sampleEntries(3, 3)
	good, _ := encode(t, sampleHeader(), c)

	// reseal recomputes the checksum after an edit so that only the edited property is wrong.
	reseal := func(d []byte) []byte {
		sum := sha256.Sum256(d[:len(d)-sha256.Size])
		copy(d[len(d)-sha256.Size:], sum[:])
		return d
	}
	tests := []struct {
		name string
		data func() []byte
		want error
	}{
		{"newer version", func() []byte {
			d := bytes.Clone(good)
			binary.LittleEndian.PutUint32(d[8:12], SnapshotVersion+1)
			return d
		}, ErrSnapshotVersion},
		{"not a snapshot", func() []byte { return []byte("{\"json\": true}\n and then some more bytes to pass lengths......") }, ErrCorruptSnapshot},
		{"extra byte appended", func() []byte { return append(bytes.Clone(good), 0) }, ErrCorruptSnapshot},
		{"trailer count disagrees", func() []byte {
			d := bytes.Clone(good)
			binary.LittleEndian.PutUint64(d[len(d)-40:], 4)
			return reseal(d)
		}, ErrCorruptSnapshot},
		{"header length past the end", func() []byte {
			d := bytes.Clone(good)
			binary.LittleEndian.PutUint32(d[12:16], uint32(len(d)))
			return reseal(d)
		}, ErrCorruptSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSnapshot(tt.data())
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifySnapshotFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ct4.snap")
	c, _, _ := sampleEntries(50, 16)
	var sum string
	err := durable.WriteFileFunc(path, 0o600, func(w io.Writer) error {
		var err error
		sum, err = writeSnapshot(w, sampleHeader(), c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	si, h, err := VerifySnapshot(path)
	if err != nil {
		t.Fatalf("VerifySnapshot: %v", err)
	}
	if si.Entries != 50 || si.SHA256 != sum || h.BootID != "boot-a" || si.Info.Type != "Hash" {
		t.Errorf("VerifySnapshot = %+v, boot %q; want 50 entries, sha %s, boot-a, Hash", si, h.BootID, sum)
	}
	// A torn file on disk (power loss mid-write without our rename discipline) is refused.
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, data[:len(data)-7], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := VerifySnapshot(path); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("torn file: got %v, want ErrCorruptSnapshot", err)
	}
	if _, _, err := VerifySnapshot(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want os.ErrNotExist", err)
	}
}

// TestReadSnapshotFileExpectedDigest: what Restore reads is the file whose digest it was given,
// as a regular file; another valid snapshot, a flipped bit, a symlink or a torn file is refused.
func TestReadSnapshotFileExpectedDigest(t *testing.T) {
	dir := t.TempDir()
	c, keys, vals := sampleEntries(50, 16)
	data, sum := encode(t, sampleHeader(), c)
	other := sampleHeader()
	other.CreatedAt = other.CreatedAt.Add(time.Second)
	otherData, otherSum := encode(t, other, c)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write("m.snap", data)
	for _, want := range []string{sum, ""} {
		sd, err := readSnapshotFile(path, want)
		if err != nil {
			t.Fatalf("readSnapshotFile(want %q): %v", want, err)
		}
		if sd.SHA256 != sum || !bytes.Equal(sd.Keys, keys) || !bytes.Equal(sd.Values, vals) {
			t.Errorf("readSnapshotFile(want %q): sha %s and %d/%d key/value bytes, want %s and the entries written", want, sd.SHA256, len(sd.Keys), len(sd.Values), sum)
		}
	}
	if otherSum == sum {
		t.Fatal("two headers gave one digest")
	}
	if _, err := readSnapshotFile(write("other.snap", otherData), sum); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("another valid snapshot: got %v, want ErrCorruptSnapshot", err)
	}
	if _, err := readSnapshotFile(path, otherSum); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("expected digest of another snapshot: got %v, want ErrCorruptSnapshot", err)
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 1
	if _, err := readSnapshotFile(write("flipped.snap", flipped), sum); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("flipped bit: got %v, want ErrCorruptSnapshot", err)
	}
	if _, err := readSnapshotFile(write("torn.snap", data[:len(data)-1]), sum); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("torn file: got %v, want ErrCorruptSnapshot", err)
	}
	link := filepath.Join(dir, "link.snap")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := readSnapshotFile(link, sum); !errors.Is(err, durable.ErrNotRegular) {
		t.Errorf("symlink to the expected snapshot: got %v, want durable.ErrNotRegular", err)
	}
}

// FuzzParseSnapshot: arbitrary bytes never panic the parser, whatever it accepts is internally
// consistent (the blocks have exactly entries × size bytes), and it accepts no file but the valid
// ones it was seeded with: the whole file is checksummed, so a mutation is never valid.
func FuzzParseSnapshot(f *testing.F) {
	c, _, _ := sampleEntries(5, 2)
	var buf bytes.Buffer
	if _, err := writeSnapshot(&buf, sampleHeader(), c); err != nil {
		f.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/snapshot-v1.snap")
	if err != nil {
		f.Fatal(err)
	}
	valid := [][]byte{buf.Bytes(), golden}
	f.Add(buf.Bytes())
	f.Add(golden)
	f.Add(buf.Bytes()[:40])
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		sd, err := parseSnapshot(data)
		if err != nil {
			return
		}
		if !bytes.Equal(data, valid[0]) && !bytes.Equal(data, valid[1]) {
			t.Fatalf("accepted a %d-byte snapshot that is not one of the valid seeds", len(data))
		}
		h := sd.Header
		if int64(len(sd.Keys)) != h.Entries*int64(h.Info.KeySize) || int64(len(sd.Values)) != h.Entries*int64(h.Info.ValueSize) {
			t.Fatalf("accepted snapshot with %d entries of %d+%d bytes but blocks of %d+%d",
				h.Entries, h.Info.KeySize, h.Info.ValueSize, len(sd.Keys), len(sd.Values))
		}
	})
}

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// TestSnapshotGoldenV1 pins the version-1 byte layout: a change to what writeSnapshot produces
// must be deliberate (bump SnapshotVersion and keep reading version 1, or run with -update when
// the change is compatible), and files written by earlier builds must keep parsing.
func TestSnapshotGoldenV1(t *testing.T) {
	h := sampleHeader()
	h.ByteOrder = "little"
	c, wantK, wantV := sampleEntries(4, 3)
	var buf bytes.Buffer
	if _, err := writeSnapshot(&buf, h, c); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "snapshot-v1.snap")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./fluxvm/bpfmap -run Golden -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), golden) {
		t.Errorf("writeSnapshot output differs from %s: bump SnapshotVersion for an incompatible change, or -update", path)
	}
	sd, err := parseSnapshot(golden)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if sd.Header.Entries != 4 || !bytes.Equal(sd.Keys, wantK) || !bytes.Equal(sd.Values, wantV) || sd.Header.Map != "ct4" {
		t.Errorf("golden snapshot parsed to %+v", sd.Header)
	}
}
