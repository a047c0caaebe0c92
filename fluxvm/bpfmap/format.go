package bpfmap

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"zyvor.dev/sysbox/internal/durable"
)

// Snapshot file format, version 1. Everything is little-endian; keys and values are the raw
// bytes the kernel returned (host byte order), so a snapshot is only meaningful on a host of the
// same byte order, which the header records.
//
//	offset 0         magic "FLXBPFMS" (8 bytes)
//	offset 8         format version, uint32 (1)
//	offset 12        header length H, uint32
//	offset 16        header, H bytes of JSON (Header)
//	16+H             keys:   N × key_size bytes
//	16+H+N×K         values: N × value_size bytes
//	end-48           trailer magic "FLXBPFME" (8 bytes)
//	end-40           N, uint64 (must equal Header.Entries)
//	end-32           SHA-256 of every byte before it
//
// Keys and values are stored as two contiguous blocks so that restore hands them to
// BPF_MAP_UPDATE_BATCH without copying. A file that is truncated anywhere (a torn write), has a
// flipped bit or a mismatched length is rejected as ErrCorruptSnapshot before any of it is used.
const (
	SnapshotFormat  = "fluxvm-bpfmap-snapshot"
	SnapshotVersion = 1

	snapMagic    = "FLXBPFMS"
	trailerMagic = "FLXBPFME"
	preambleLen  = 16
	trailerLen   = 8 + 8 + sha256.Size
	maxHeaderLen = 1 << 20
)

// Header is the JSON header of a snapshot file.
type Header struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Tool      string    `json:"tool,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Component string    `json:"component,omitempty"`
	Map       string    `json:"map"`
	Pin       string    `json:"pin"`
	Policy    Policy    `json:"policy"`
	// Info is the live map as it was when the snapshot was taken. Info.Entries is the number
	// of entries the map held (counted even when they are not recorded).
	Info       Info   `json:"info"`
	KernelName string `json:"kernel_name,omitempty"`
	BootID     string `json:"boot_id"`
	MapID      uint32 `json:"map_id"`
	ByteOrder  string `json:"byte_order"`
	// Method is how entries were read: "batch" (BPF_MAP_LOOKUP_BATCH), "batch-parallel"
	// (the same, several threads over disjoint bucket ranges), "iterate"
	// (get_next_key + lookup, where batch is unsupported) or "none" (metadata only).
	Method string `json:"method"`
	// Recorded says whether the entries are in the file (false for metadata-only and for maps
	// that are never restored generically).
	Recorded bool `json:"recorded"`
	// Entries is N, the number of key/value records in the file.
	Entries int64 `json:"entries"`
}

// Snapshot is a parsed, verified snapshot file: the header plus the packed keys and values.
// Component-specific migration hooks may read snapshots with ReadSnapshot (the hooks see the
// snapshot directory in FLUXVM_SNAPSHOT_DIR).
type Snapshot struct {
	Header Header
	Keys   []byte // Header.Entries × Info.KeySize bytes
	Values []byte // Header.Entries × Info.ValueSize bytes
	SHA256 string // sha256 of the whole file, as sha256sum prints it
}

// Len is the number of entries.
func (s *Snapshot) Len() int { return int(s.Header.Entries) }

// Entry returns the i-th key and value (views into the snapshot, not copies).
func (s *Snapshot) Entry(i int) (key, value []byte) {
	ks, vs := int(s.Header.Info.KeySize), int(s.Header.Info.ValueSize)
	return s.Keys[i*ks : (i+1)*ks], s.Values[i*vs : (i+1)*vs]
}

// entryChunks holds entries as they were read, batch by batch.
type entryChunks struct {
	keys, vals [][]byte
	n          int64
}

func (c *entryChunks) add(k, v []byte, n int) {
	c.keys = append(c.keys, k)
	c.vals = append(c.vals, v)
	c.n += int64(n)
}

// writeSnapshot streams a version-1 snapshot to w and returns the sha256 of the whole file.
func writeSnapshot(w io.Writer, h *Header, entries *entryChunks) (string, error) {
	return writeSnapshotBlocks(w, h, entries, nil)
}

// writeSnapshotBlocks is writeSnapshot calling written(offset, length) after each block w took
// (Snapshot starts the block's writeback there). The checksum is computed by another goroutine
// while w takes the blocks: only the last 32 bytes wait for it.
func writeSnapshotBlocks(w io.Writer, h *Header, entries *entryChunks, written func(off, n int64)) (string, error) {
	h.Format, h.Version = SnapshotFormat, SnapshotVersion
	if entries == nil {
		entries = &entryChunks{}
	}
	h.Entries = entries.n
	hdr, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encode snapshot header: %w", err)
	}
	head := make([]byte, preambleLen, preambleLen+len(hdr))
	copy(head[:8], snapMagic)
	binary.LittleEndian.PutUint32(head[8:12], SnapshotVersion)
	binary.LittleEndian.PutUint32(head[12:16], uint32(len(hdr)))
	head = append(head, hdr...)
	var tr [16]byte
	copy(tr[:8], trailerMagic)
	binary.LittleEndian.PutUint64(tr[8:], uint64(entries.n))
	blocks := make([][]byte, 0, 2+len(entries.keys)+len(entries.vals))
	blocks = append(blocks, head)
	blocks = append(blocks, entries.keys...)
	blocks = append(blocks, entries.vals...)
	blocks = append(blocks, tr[:])

	type sums struct {
		inner, full []byte
		err         error
	}
	done := make(chan sums, 1) // buffered: the hasher never blocks if a write fails first
	go func() {
		var s sums
		s.inner, s.full, s.err = innerAndFullSumBlocks(blocks)
		done <- s
	}()
	var off int64
	for _, b := range blocks {
		if _, err := w.Write(b); err != nil {
			return "", err
		}
		if written != nil {
			written(off, int64(len(b)))
		}
		off += int64(len(b))
	}
	s := <-done
	if s.err != nil {
		return "", s.err
	}
	if _, err := w.Write(s.inner); err != nil {
		return "", err
	}
	return hex.EncodeToString(s.full), nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}

// parseSnapshot checks and splits a whole snapshot file. It verifies, in this order, the magic,
// the format version, the trailer, the checksum, then the header and the exact length, and only
// then returns views into data.
func parseSnapshot(data []byte) (*Snapshot, error) {
	if len(data) < preambleLen {
		return nil, corrupt("%d bytes, shorter than the preamble (torn write?)", len(data))
	}
	if string(data[:8]) != snapMagic {
		return nil, corrupt("bad magic %q: not a map snapshot", data[:8])
	}
	if v := binary.LittleEndian.Uint32(data[8:12]); v != SnapshotVersion {
		if v == 0 {
			return nil, corrupt("format version 0")
		}
		return nil, fmt.Errorf("format version %d, this build reads %d: %w", v, SnapshotVersion, ErrSnapshotVersion)
	}
	if len(data) < preambleLen+trailerLen {
		return nil, corrupt("%d bytes, too short for header and trailer (torn write?)", len(data))
	}
	tr := data[len(data)-trailerLen:]
	if string(tr[:8]) != trailerMagic {
		return nil, corrupt("no trailer at end of file (torn write?)")
	}
	want := tr[16:]
	got, full, err := innerAndFullSum(data)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got, want) {
		return nil, corrupt("checksum mismatch: stored %x, computed %x", want, got)
	}
	hlen := int(binary.LittleEndian.Uint32(data[12:16]))
	if hlen > maxHeaderLen || preambleLen+hlen > len(data)-trailerLen {
		return nil, corrupt("header length %d out of range", hlen)
	}
	var sd Snapshot
	dec := json.NewDecoder(bytes.NewReader(data[preambleLen : preambleLen+hlen]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sd.Header); err != nil {
		return nil, corrupt("header: %v", err)
	}
	h := &sd.Header
	if h.Format != SnapshotFormat || h.Version != SnapshotVersion {
		return nil, corrupt("header names format %q version %d", h.Format, h.Version)
	}
	n := binary.LittleEndian.Uint64(tr[8:16])
	if h.Entries < 0 || uint64(h.Entries) != n {
		return nil, corrupt("header says %d entries, trailer %d", h.Entries, n)
	}
	ks, vs := uint64(h.Info.KeySize), uint64(h.Info.ValueSize)
	body := uint64(len(data) - preambleLen - hlen - trailerLen)
	if n > 0 && (ks == 0 || vs == 0) || n*(ks+vs) != body || (n > 0 && body/n != ks+vs) {
		return nil, corrupt("%d entries of %d+%d bytes do not fill %d bytes", n, ks, vs, body)
	}
	if !h.Recorded && n != 0 {
		return nil, corrupt("metadata-only snapshot carries %d entries", n)
	}
	start := uint64(preambleLen + hlen)
	sd.Keys = data[start : start+n*ks]
	sd.Values = data[start+n*ks : start+n*(ks+vs)]
	sd.SHA256 = hex.EncodeToString(full)
	return &sd, nil
}

// innerAndFullSum returns the sha256 of everything but the last 32 bytes (the stored checksum)
// and the sha256 of the whole file, hashing the data once.
func innerAndFullSum(data []byte) (inner, full []byte, err error) {
	h := sha256.New()
	h.Write(data[:len(data)-sha256.Size])
	return innerAndContinued(h, data[len(data)-sha256.Size:])
}

// innerAndFullSumBlocks is innerAndFullSum for a file being written: the blocks are everything
// before the checksum, and the file ends with the checksum computed here.
func innerAndFullSumBlocks(blocks [][]byte) (inner, full []byte, err error) {
	h := sha256.New()
	for _, b := range blocks {
		h.Write(b)
	}
	return innerAndContinued(h, nil)
}

// innerAndContinued returns h's sum and the sum of h's input followed by tail (nil: by that
// sum), continuing from h's state rather than hashing the input again.
func innerAndContinued(h hash.Hash, tail []byte) (inner, full []byte, err error) {
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	inner = h.Sum(nil)
	if tail == nil {
		tail = inner
	}
	f := sha256.New()
	if err := f.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, nil, err
	}
	f.Write(tail)
	return inner, f.Sum(nil), nil
}

// ReadSnapshot reads and verifies a whole snapshot file (version, trailer, checksum, length)
// before returning any of it.
func ReadSnapshot(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	sd, err := parseSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return sd, nil
}

// readSnapshotFile is what Restore reads: like ReadSnapshot, but never through a symlink, and,
// when want is set, only the file whose sha256 is want. The digest comes from the same pass as
// the checksum, so the file is read and hashed once.
func readSnapshotFile(path, want string) (*Snapshot, error) {
	f, err := durable.OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	// One read into a buffer of the file's size; a file that grows meanwhile is cut short and
	// then fails its checksum.
	data := make([]byte, fi.Size())
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	sd, err := parseSnapshot(data[:n])
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if want != "" && sd.SHA256 != want {
		return nil, fmt.Errorf("snapshot %s has sha256 %s, expected %s (the snapshot recorded when it was taken): %w",
			path, sd.SHA256, want, ErrCorruptSnapshot)
	}
	return sd, nil
}

// VerifySnapshot reads a whole snapshot file, checks its version, checksum and length, and
// returns what it describes. The engine uses it on resume to decide whether a snapshot taken
// before a crash can be trusted, and Header.BootID to tell whether the host rebooted since.
func VerifySnapshot(path string) (SnapshotInfo, Header, error) {
	sd, err := ReadSnapshot(path)
	if err != nil {
		return SnapshotInfo{}, Header{}, err
	}
	return SnapshotInfo{Path: path, Info: sd.Header.Info, Entries: sd.Header.Entries, SHA256: sd.SHA256}, sd.Header, nil
}
