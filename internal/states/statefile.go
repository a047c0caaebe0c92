package states

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/durable"
)

// FormatVersion is the on-disk state format this build writes and the newest it reads.
const FormatVersion = 1

// header is the top level of a state document. Resources and Outputs stay raw so that the
// checksum covers their exact bytes.
type header struct {
	Header
	SHA256     string          `json:"sha256"`
	Resources  json.RawMessage `json:"resources"`
	Outputs    json.RawMessage `json:"outputs"`
	hasVersion bool            // the document has a format_version key
}

// Encode renders st in the current format. The output is deterministic: resources in canonical
// address order, one per line; outputs sorted by name; timestamps in UTC; a SHA-256 over
// lineage, serial, resources and outputs, written last so that the document streams.
func Encode(st *State) ([]byte, error) { return EncodeContext(context.Background(), st) }

// EncodeContext is Encode using the EncodeCache ctx carries, if any.
func EncodeContext(ctx context.Context, st *State) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(512 + len(st.Resources)*1024)
	if err := encodeTo(&buf, st, encodeCacheFrom(ctx)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeTo streams Encode's output to w.
func EncodeTo(w io.Writer, st *State) error { return encodeTo(w, st, nil) }

// EncodeToContext is EncodeTo using the EncodeCache ctx carries, if any.
func EncodeToContext(ctx context.Context, w io.Writer, st *State) error {
	return encodeTo(w, st, encodeCacheFrom(ctx))
}

func encodeTo(w io.Writer, st *State, cache *EncodeCache) error {
	if st.Lineage == "" {
		return errors.New("encode state: no lineage")
	}
	rs := st.Resources
	if !slices.IsSortedFunc(rs, func(a, b *Resource) int { return a.Addr.Compare(b.Addr) }) {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b *Resource) int { return a.Addr.Compare(b.Addr) })
	}
	outs := st.Outputs
	if outs == nil {
		outs = map[string]Output{}
	}
	ob, err := json.Marshal(outs) // map keys are sorted by encoding/json
	if err != nil {
		return fmt.Errorf("encode state: outputs: %w", err)
	}
	tv, _ := json.Marshal(st.ToolVersion)
	lin, _ := json.Marshal(st.Lineage)

	h := sha256.New()
	io.WriteString(h, st.Lineage)
	h.Write([]byte{0})
	io.WriteString(h, strconv.FormatUint(st.Serial, 10))
	h.Write([]byte{0})
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "{\n  \"format_version\": %d,\n  \"tool_version\": %s,\n  \"lineage\": %s,\n  \"serial\": %d,\n  \"resources\": ",
		FormatVersion, tv, lin, st.Serial)
	// The resources section goes to w and to the hash in chunks.
	chunk := make([]byte, 0, 256<<10)
	flush := func() {
		bw.Write(chunk)
		h.Write(chunk)
		chunk = chunk[:0]
	}
	chunk = append(chunk, '[')
	ok := false
	if cache != nil {
		cache.begin()
		defer func() { cache.end(ok) }()
	}
	for i, r := range rs {
		if i > 0 {
			if r.Addr.Equal(rs[i-1].Addr) {
				return fmt.Errorf("encode state: resource %s appears twice", r.Addr)
			}
			chunk = append(chunk, ',')
		}
		chunk = append(chunk, "\n    "...)
		if chunk, err = appendCached(chunk, cache, r); err != nil {
			return fmt.Errorf("encode state: resource %s: %w", r.Addr, err)
		}
		if len(chunk) >= 192<<10 {
			flush()
		}
	}
	if len(rs) > 0 {
		chunk = append(chunk, "\n  "...)
	}
	chunk = append(chunk, ']')
	flush()
	h.Write([]byte{0})
	h.Write(ob)
	bw.Write([]byte(",\n  \"outputs\": "))
	bw.Write(ob)
	fmt.Fprintf(bw, ",\n  \"sha256\": %q\n}\n", hex.EncodeToString(h.Sum(nil)))
	if bw.err != nil {
		return fmt.Errorf("encode state: %w", bw.err)
	}
	ok = true
	return nil
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func checksum(lineage string, serial uint64, resources, outputs []byte) string {
	h := sha256.New()
	io.WriteString(h, lineage)
	h.Write([]byte{0})
	io.WriteString(h, strconv.FormatUint(serial, 10))
	h.Write([]byte{0})
	h.Write(resources)
	h.Write([]byte{0})
	h.Write(outputs)
	return hex.EncodeToString(h.Sum(nil))
}

// Decode parses a state document. It checks, in order: the format version (an unknown one is
// an *UnsupportedVersionError), the checksum and structure (a torn or edited document is a
// *CorruptError), and the identity and ownership every managed resource must carry (an
// *IncompatibleStateError). Nothing is returned unless all pass.
func Decode(data []byte) (*State, error) {
	if _, err := ReadHeader(bytes.NewReader(data)); err != nil {
		var uv *UnsupportedVersionError
		if errors.As(err, &uv) {
			return nil, err
		}
		return nil, &CorruptError{Reason: "not a complete JSON document (torn or truncated?): " + err.Error()}
	}
	h, err := readDocument(data)
	if err != nil {
		return nil, err
	}
	if !h.hasVersion || h.FormatVersion < 1 || h.FormatVersion > FormatVersion {
		return nil, &UnsupportedVersionError{Version: h.FormatVersion, ToolVersion: h.ToolVersion}
	}
	if h.Lineage == "" {
		return nil, &IncompatibleStateError{ToolVersion: h.ToolVersion, Problems: []string{"the state has no lineage"}}
	}
	if h.Resources == nil || h.Outputs == nil || h.SHA256 == "" {
		return nil, &CorruptError{Reason: "missing resources, outputs or sha256"}
	}
	if got := checksum(h.Lineage, h.Serial, h.Resources, h.Outputs); got != h.SHA256 {
		return nil, &CorruptError{Reason: fmt.Sprintf("checksum mismatch (recorded %s, computed %s): the file was truncated or edited", short(h.SHA256), short(got))}
	}
	st := &State{Lineage: h.Lineage, Serial: h.Serial, ToolVersion: h.ToolVersion}
	if st.Resources, err = decodeResources(h.Resources); err != nil {
		return nil, &CorruptError{Reason: "resources: " + err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(h.Outputs))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st.Outputs); err != nil {
		return nil, &CorruptError{Reason: "outputs: " + err.Error()}
	}
	if trailing(h.Outputs, dec) {
		return nil, &CorruptError{Reason: "outputs: data after the object"}
	}
	if st.Outputs == nil {
		st.Outputs = map[string]Output{}
	}
	for i, r := range st.Resources {
		if r == nil {
			return nil, &CorruptError{Reason: fmt.Sprintf("resources[%d]: null", i)}
		}
		if !ValidStatus(r.Observation.Status) {
			return nil, &CorruptError{Reason: fmt.Sprintf("resource %s: observation status %q is not one of present, absent, drifted, degraded, unknown", r.Addr, r.Observation.Status)}
		}
	}
	st.Sort()
	for i := 1; i < len(st.Resources); i++ {
		if st.Resources[i].Addr.Equal(st.Resources[i-1].Addr) {
			return nil, &CorruptError{Reason: fmt.Sprintf("resource %s appears twice", st.Resources[i].Addr)}
		}
	}
	if err := Check(st, nil); err != nil {
		return nil, err
	}
	return st, nil
}

// readDocument walks the document's top-level object by value extents, keeping resources and
// outputs as the exact bytes in the document (for the checksum) without copying them. Unknown
// top-level keys are corrupt. It does not run json.Valid over the whole document first (a tenth
// of a no-change plan's CPU at 1,000 nodes): every byte is checked by one strict reader instead —
// this walk for the object's punctuation, encoding/json for keys and header values,
// decodeResources for the resources and Decode for the outputs. Decode accepts only valid JSON
// (FuzzDecode and FuzzDecodeResources hold it to json.Valid).
func readDocument(data []byte) (header, error) {
	var h header
	torn := func(at int) (header, error) {
		return h, &CorruptError{Reason: fmt.Sprintf("not a complete JSON document (torn or truncated?): unexpected %s at offset %d", describeAt(data, at), at)}
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return h, &CorruptError{Reason: "not a JSON object"}
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return torn(i)
			}
			kEnd, ok := valueEnd(data, i)
			if !ok {
				return torn(len(data))
			}
			var key string
			if err := json.Unmarshal(data[i:kEnd], &key); err != nil {
				return h, &CorruptError{Reason: "top-level key: " + err.Error()}
			}
			if i = skipSpace(data, kEnd); i >= len(data) || data[i] != ':' {
				return torn(i)
			}
			i = skipSpace(data, i+1)
			vEnd, ok := valueEnd(data, i)
			if !ok || vEnd == i {
				return torn(vEnd)
			}
			val := data[i:vEnd]
			dst, isHeader := h.field(key)
			switch {
			case isHeader:
				h.hasVersion = h.hasVersion || key == "format_version"
			case key == "sha256":
				dst = &h.SHA256
			case key == "resources":
				h.Resources = val
			case key == "outputs":
				h.Outputs = val
			default:
				return h, &CorruptError{Reason: fmt.Sprintf("unknown top-level field %q", key)}
			}
			if dst != nil {
				if err := json.Unmarshal(val, dst); err != nil {
					return h, &CorruptError{Reason: fmt.Sprintf("%s: %v", key, err)}
				}
			}
			if i = skipSpace(data, vEnd); i >= len(data) {
				return torn(i)
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return torn(i)
			}
			i = skipSpace(data, i+1)
		}
	}
	if i = skipSpace(data, i); i != len(data) {
		return torn(i)
	}
	return h, nil
}

func describeAt(b []byte, i int) string {
	if i >= len(b) {
		return "end"
	}
	return strconv.Quote(string(b[i : i+1]))
}

// isSpace reports JSON whitespace (not Unicode's).
func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// valueEnd returns the end of the JSON value starting at b[i], by its extent only (strings,
// nesting): ok is false when the text ends first. The value's bytes are validated by whoever
// reads them. It skips bytes that cannot end a value by a table and strings by IndexByte: the
// resources array is nearly all of a state file.
func valueEnd(b []byte, i int) (end int, ok bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		for j < len(b) && !structural[b[j]] {
			j++
		}
		if j == len(b) {
			break
		}
		switch b[j] {
		case '"':
			q, ok := stringEnd(b, j)
			if !ok {
				return len(b), false
			}
			if j = q; depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j, true // the end of an enclosing container: a scalar ended here
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		default: // ',' or whitespace
			if depth == 0 {
				return j, true
			}
		}
	}
	return len(b), depth == 0
}

// stringEnd returns the index of the quote closing the string that opens at b[open].
func stringEnd(b []byte, open int) (int, bool) {
	for k := open + 1; ; {
		q := bytes.IndexByte(b[k:], '"')
		if q < 0 {
			return 0, false
		}
		q += k
		n := 0 // backslashes right before the quote: an odd number escapes it
		for p := q - 1; p > open && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q, true
		}
		k = q + 1
	}
}

// structural marks the bytes valueEnd stops at.
var structural = func() (t [256]bool) {
	for _, c := range []byte("\"{}[], \n\t\r") {
		t[c] = true
	}
	return t
}()

// decodeResources decodes the resources array. Encode writes one resource per line, and a raw
// newline cannot occur inside a JSON string, so each line is one element: lines are decoded in
// parallel. Any other layout (a hand-formatted file) takes the sequential path.
func decodeResources(raw json.RawMessage) ([]*Resource, error) {
	lines, ok := splitElements(raw)
	if ok {
		rs, err := decodeLines(lines)
		if err != errLayout {
			return rs, err
		}
	}
	{
		var rs []*Resource
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rs); err != nil {
			return nil, err
		}
		if trailing(raw, dec) {
			return nil, errors.New("data after the array")
		}
		return rs, nil
	}
}

// errLayout says a line held more than one element: decode the array the general way.
var errLayout = errors.New("not one element per line")

func decodeLines(lines [][]byte) ([]*Resource, error) {
	rs := make([]*Resource, len(lines))
	errs := make([]error, len(lines))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(lines)/256))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := depLists{}
			for i := w; i < len(lines); i += workers {
				if r, ok := fastResourceShared(lines[i], seen); ok {
					rs[i] = r
					continue
				}
				var r Resource
				dec := json.NewDecoder(bytes.NewReader(lines[i]))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&r); err != nil {
					errs[i] = fmt.Errorf("[%d]: %w", i, err)
					continue
				}
				if dec.InputOffset() != int64(len(lines[i])) {
					errs[i] = errLayout
					continue
				}
				rs[i] = &r
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err == errLayout {
			return nil, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// trailing reports whether raw holds more than dec's one value and JSON whitespace.
func trailing(raw []byte, dec *json.Decoder) bool {
	return skipSpace(raw, int(dec.InputOffset())) != len(raw)
}

// splitElements splits Encode's array layout ("[", one "{...}," per line, "]") into element
// byte slices; ok is false for any other layout. The document is not validated as a whole
// (readDocument), so the separators are checked here: a comma after every element but the last.
func splitElements(raw []byte) ([][]byte, bool) {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, false
	}
	inner := raw[1 : len(raw)-1]
	var out [][]byte
	for len(inner) > 0 {
		line := inner
		if i := bytes.IndexByte(inner, '\n'); i >= 0 {
			line, inner = inner[:i], inner[i+1:]
		} else {
			inner = nil
		}
		line = bytes.TrimFunc(line, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
		if len(line) == 0 {
			continue
		}
		out = append(out, line)
	}
	for k, line := range out {
		if k < len(out)-1 {
			if line[len(line)-1] != ',' {
				return nil, false
			}
			line = line[:len(line)-1]
		}
		if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
			return nil, false
		}
		out[k] = line
	}
	return out, true
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Requirement reports what a resource lacks that its current schema requires (e.g. "external_id"),
// or nothing. Handlers provide it; Check applies it on top of the built-in rules.
type Requirement func(r *Resource) []string

// Check verifies that every managed resource carries the identity and ownership sysbox needs
// before it may act on it: a schema version, complete owner anchors that name this state's
// lineage and the resource's type, plus whatever extra requires. It returns an
// *IncompatibleStateError listing every problem.
func Check(st *State, extra Requirement) error {
	var problems []string
	for _, r := range st.Resources {
		var missing []string
		if r.Addr.Resource.Mode == addrs.Managed {
			if r.SchemaVersion < 1 {
				missing = append(missing, "schema_version")
			}
			o := r.Owner
			if o.Topology == "" {
				missing = append(missing, "owner.topology")
			} else if o.Topology != st.Lineage {
				missing = append(missing, fmt.Sprintf("owner.topology matching lineage %s (has %s)", st.Lineage, o.Topology))
			}
			if o.Address == "" {
				missing = append(missing, "owner.address")
			}
			if o.Type == "" {
				missing = append(missing, "owner.type")
			} else if o.Type != r.Addr.Resource.Type {
				missing = append(missing, fmt.Sprintf("owner.type matching %s (has %s)", r.Addr.Resource.Type, o.Type))
			}
			if o.Generation == 0 {
				missing = append(missing, "owner.generation")
			}
		}
		if extra != nil {
			missing = append(missing, extra(r)...)
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s: missing %s", r.Addr, strings.Join(missing, ", ")))
		}
	}
	if len(problems) > 0 {
		return &IncompatibleStateError{ToolVersion: st.ToolVersion, Problems: problems}
	}
	return nil
}

// UnsupportedVersionError refuses a state document in a format this build does not read.
type UnsupportedVersionError struct {
	Version     int    // 0 when the document has no format_version
	ToolVersion string // the writer's tool version, if recorded
}

func (e *UnsupportedVersionError) Error() string {
	by := ""
	if e.ToolVersion != "" {
		by = " (written by sysbox " + e.ToolVersion + ")"
	}
	if e.Version > FormatVersion {
		return fmt.Sprintf("state format version %d%s is newer than this sysbox reads (1..%d): upgrade sysbox; nothing was changed", e.Version, by, FormatVersion)
	}
	return fmt.Sprintf("state format version %d%s is not a sysbox state format this build reads (1..%d): destroy the topology with the sysbox that created it, then recreate it; nothing was changed", e.Version, by, FormatVersion)
}

// Unwrap lets callers test errors.Is(err, durable.ErrUnknownVersion).
func (e *UnsupportedVersionError) Unwrap() error { return durable.ErrUnknownVersion }

// CorruptError refuses a torn, truncated, edited or structurally invalid state document.
type CorruptError struct{ Reason string }

func (e *CorruptError) Error() string {
	return "state is corrupt: " + e.Reason + " (restore it from a snapshot; nothing was changed)"
}

// Unwrap lets callers test errors.Is(err, durable.ErrCorrupt).
func (e *CorruptError) Unwrap() error { return durable.ErrCorrupt }

// IncompatibleStateError refuses a state whose resources lack identity or ownership the current
// schema requires (S12). sysbox cannot prove what it owns, so it changes nothing.
type IncompatibleStateError struct {
	ToolVersion string
	Problems    []string
}

func (e *IncompatibleStateError) Error() string {
	by := "an older sysbox"
	if e.ToolVersion != "" {
		by = "sysbox " + e.ToolVersion
	}
	return fmt.Sprintf("state lacks identity or ownership this sysbox requires: %s; refusing before any change: destroy the topology with %s (which wrote this state), then recreate it with this version",
		strings.Join(e.Problems, "; "), by)
}

// ErrIncompatible is matched by errors.Is on an *IncompatibleStateError.
var ErrIncompatible = errors.New("incompatible state")

// Is matches ErrIncompatible.
func (e *IncompatibleStateError) Is(target error) bool { return target == ErrIncompatible }
