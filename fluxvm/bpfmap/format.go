package bpfmap

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
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

// hashingWriter writes through to w and into a running SHA-256.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
}

func (hw *hashingWriter) Write(p []byte) (int, error) {
	hw.h.Write(p)
	return hw.w.Write(p)
}

// writeSnapshot streams a version-1 snapshot to w and returns the sha256 of the whole file.
func writeSnapshot(w io.Writer, h *Header, entries *entryChunks) (string, error) {
	h.Format, h.Version = SnapshotFormat, SnapshotVersion
	if entries == nil {
		entries = &entryChunks{}
	}
	h.Entries = entries.n
	hdr, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encode snapshot header: %w", err)
	}
	hw := &hashingWriter{w: w, h: sha256.New()}
	var pre [preambleLen]byte
	copy(pre[:8], snapMagic)
	binary.LittleEndian.PutUint32(pre[8:12], SnapshotVersion)
	binary.LittleEndian.PutUint32(pre[12:16], uint32(len(hdr)))
	if _, err := hw.Write(pre[:]); err != nil {
		return "", err
	}
	if _, err := hw.Write(hdr); err != nil {
		return "", err
	}
	for _, blocks := range [][][]byte{entries.keys, entries.vals} {
		for _, b := range blocks {
			if _, err := hw.Write(b); err != nil {
				return "", err
			}
		}
	}
	var tr [16]byte
	copy(tr[:8], trailerMagic)
	binary.LittleEndian.PutUint64(tr[8:], uint64(entries.n))
	if _, err := hw.Write(tr[:]); err != nil {
		return "", err
	}
	// The inner checksum covers everything before it; the file's own sha256 continues from the
	// same state over the checksum bytes, so the file is hashed once.
	state, err := hw.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return "", err
	}
	sum := hw.h.Sum(nil)
	full := sha256.New()
	if err := full.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return "", err
	}
	full.Write(sum)
	if _, err := w.Write(sum); err != nil {
		return "", err
	}
	return hex.EncodeToString(full.Sum(nil)), nil
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
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	inner = h.Sum(nil)
	f := sha256.New()
	if err := f.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, nil, err
	}
	f.Write(data[len(data)-sha256.Size:])
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
