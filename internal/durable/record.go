package durable

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Errors a reader branches on.
var (
	// ErrCorrupt marks a record whose checksum, framing or JSON is wrong: torn or tampered.
	ErrCorrupt = errors.New("corrupt record")
	// ErrUnknownVersion marks a record written by a newer (or unknown) format version.
	ErrUnknownVersion = errors.New("unknown record format version")
	// ErrWrongKind marks a record of another kind than the reader expects.
	ErrWrongKind = errors.New("unexpected record kind")
)

// NewerFormatError says a record was written in a format newer than this build reads. It
// wraps ErrUnknownVersion.
type NewerFormatError struct {
	What    string // "plan", "checkpoint", … (the record kind without its "sysbox-" prefix)
	Version int    // the record's
	Newest  int    // the newest this build reads
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("%s format %d is newer than this sysbox (%d)", e.What, e.Version, e.Newest)
}

// Unwrap makes errors.Is(err, ErrUnknownVersion) true.
func (e *NewerFormatError) Unwrap() error { return ErrUnknownVersion }

// envelope is the on-disk form of a record.
type envelope struct {
	Kind    string          `json:"kind"`
	Version int             `json:"version"`
	Seq     uint64          `json:"seq,omitempty"` // position in a log, when the writer numbers records
	SHA256  string          `json:"sha256"`
	Payload json.RawMessage `json:"payload"`
}

// EncodeRecord wraps payload in a versioned, checksummed envelope (single-line JSON, no newline).
func EncodeRecord(kind string, version int, payload any) ([]byte, error) {
	return encodeEnvelope(kind, version, 0, payload)
}

func encodeEnvelope(kind string, version int, seq uint64, payload any) ([]byte, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", kind, err)
	}
	return appendEnvelope(make([]byte, 0, len(raw)+len(kind)+envelopeOverhead), kind, version, seq, raw), nil
}

// AppendRecordJSON appends to dst the record of a payload already encoded as JSON, for a
// caller that encodes a large payload itself. The payload is stored as it is: not scanned,
// validated or copied more than once (EncodeRecord of a json.RawMessage compacts it, and its
// envelope again). When payload is json.Marshal's encoding of a value (compact, HTML
// characters escaped), the record is the one EncodeRecord makes of that value; invalid JSON
// makes a record that DecodeRecord rejects as corrupt.
// dst grows once, to hold the record and a newline after it (as files of records end lines).
func AppendRecordJSON(dst []byte, kind string, version int, payload []byte) []byte {
	dst = slices.Grow(dst, len(payload)+len(kind)+envelopeOverhead+1)
	return appendEnvelope(dst, kind, version, 0, payload)
}

// envelopeOverhead bounds the envelope's bytes besides the kind and the payload.
const envelopeOverhead = 160

// appendEnvelope appends json.Marshal(envelope{…, Payload: raw}) for raw as json.Marshal
// encodes a value: field by field, with raw copied once (json.Marshal compacts a RawMessage,
// which is a scan and a copy of the whole payload, for nothing when it is compact already).
// TestAppendEnvelopeMatchesJSON holds the two equal.
func appendEnvelope(dst []byte, kind string, version int, seq uint64, raw []byte) []byte {
	if len(raw) == 0 {
		raw = []byte("null") // as json.Marshal encodes an empty json.RawMessage
	}
	sum := sha256.Sum256(raw)
	dst = append(dst, `{"kind":`...)
	k, _ := json.Marshal(kind) // a string always encodes
	dst = append(dst, k...)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, int64(version), 10)
	if seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, seq, 10)
	}
	dst = append(dst, `,"sha256":"`...)
	dst = hex.AppendEncode(dst, sum[:])
	dst = append(dst, `","payload":`...)
	dst = append(dst, raw...)
	return append(dst, '}')
}

// DecodeRecord checks kind, version (1..maxVersion) and checksum, then unmarshals the payload
// into payload (if non-nil). It returns the record's version.
func DecodeRecord(data []byte, kind string, maxVersion int, payload any) (int, error) {
	v, raw, err := openRecord(data, kind, maxVersion)
	if err != nil {
		return v, err
	}
	if payload != nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(payload); err != nil {
			return v, fmt.Errorf("%s record: payload: %w: %v", kind, ErrCorrupt, err)
		}
	}
	return v, nil
}

func openRecord(data []byte, kind string, maxVersion int) (int, json.RawMessage, error) {
	env, err := openEnvelope(data, kind, maxVersion)
	return env.Version, env.Payload, err
}

func openEnvelope(data []byte, kind string, maxVersion int) (envelope, error) {
	// Kind and version first: a newer format is reported as such, whatever else it changed.
	var head struct {
		Kind    string `json:"kind"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return envelope{}, fmt.Errorf("%s record: %w: %v", kind, ErrCorrupt, err)
	}
	if head.Kind != kind {
		return envelope{Version: head.Version}, fmt.Errorf("%w: got %q, want %q", ErrWrongKind, head.Kind, kind)
	}
	if head.Version > maxVersion {
		return envelope{Version: head.Version}, &NewerFormatError{What: strings.TrimPrefix(kind, "sysbox-"), Version: head.Version, Newest: maxVersion}
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return envelope{}, fmt.Errorf("%s record: %w: %v", kind, ErrCorrupt, err)
	}
	if env.Version < 1 || env.Version > maxVersion {
		return envelope{Version: env.Version}, fmt.Errorf("%s record: %w: version %d (this build reads 1..%d)", kind, ErrUnknownVersion, env.Version, maxVersion)
	}
	sum := sha256.Sum256(env.Payload)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return envelope{Version: env.Version}, fmt.Errorf("%s record: %w: checksum mismatch", kind, ErrCorrupt)
	}
	return env, nil
}
