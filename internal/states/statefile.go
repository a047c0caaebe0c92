package states

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/durable"
)

// FormatVersion is the on-disk state format this build writes and the newest it reads.
const FormatVersion = 1

// header is the top level of a state document. Resources and Outputs stay raw so that the
// checksum covers their exact bytes.
type header struct {
	FormatVersion *int            `json:"format_version"`
	ToolVersion   string          `json:"tool_version"`
	Lineage       string          `json:"lineage"`
	Serial        uint64          `json:"serial"`
	SHA256        string          `json:"sha256"`
	Resources     json.RawMessage `json:"resources"`
	Outputs       json.RawMessage `json:"outputs"`
}

// Encode renders st in the current format. The output is deterministic: resources in canonical
// address order, one per line; outputs sorted by name; timestamps in UTC; a SHA-256 over
// lineage, serial, resources and outputs.
func Encode(st *State) ([]byte, error) {
	var buf bytes.Buffer
	if err := EncodeTo(&buf, st); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeTo writes Encode's output to w.
func EncodeTo(w io.Writer, st *State) error {
	if st.Lineage == "" {
		return errors.New("encode state: no lineage")
	}
	rs := slices.Clone(st.Resources)
	slices.SortFunc(rs, func(a, b *Resource) int { return a.Addr.Compare(b.Addr) })
	var res bytes.Buffer
	res.Grow(len(rs) * 512)
	res.WriteByte('[')
	for i, r := range rs {
		if i > 0 && r.Addr.Equal(rs[i-1].Addr) {
			return fmt.Errorf("encode state: resource %s appears twice", r.Addr)
		}
		c := *r
		c.CreatedAt, c.UpdatedAt, c.Observation.At = c.CreatedAt.UTC(), c.UpdatedAt.UTC(), c.Observation.At.UTC()
		b, err := json.Marshal(&c)
		if err != nil {
			return fmt.Errorf("encode state: resource %s: %w", r.Addr, err)
		}
		if i > 0 {
			res.WriteByte(',')
		}
		res.WriteString("\n    ")
		res.Write(b)
	}
	if len(rs) > 0 {
		res.WriteString("\n  ")
	}
	res.WriteByte(']')

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
	sum := checksum(st.Lineage, st.Serial, res.Bytes(), ob)
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "{\n  \"format_version\": %d,\n  \"tool_version\": %s,\n  \"lineage\": %s,\n  \"serial\": %d,\n  \"sha256\": %q,\n  \"resources\": ",
		FormatVersion, tv, lin, st.Serial, sum)
	bw.Write(res.Bytes())
	bw.Write([]byte(",\n  \"outputs\": "))
	bw.Write(ob)
	bw.Write([]byte("\n}\n"))
	if bw.err != nil {
		return fmt.Errorf("encode state: %w", bw.err)
	}
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
	var probe struct {
		FormatVersion *int   `json:"format_version"`
		ToolVersion   string `json:"tool_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, &CorruptError{Reason: "not a complete JSON document (torn or truncated?): " + err.Error()}
	}
	if probe.FormatVersion == nil {
		return nil, &UnsupportedVersionError{Version: 0, ToolVersion: probe.ToolVersion}
	}
	if v := *probe.FormatVersion; v < 1 || v > FormatVersion {
		return nil, &UnsupportedVersionError{Version: v, ToolVersion: probe.ToolVersion}
	}
	var h header
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, &CorruptError{Reason: err.Error()}
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
	dec := json.NewDecoder(bytes.NewReader(h.Resources))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st.Resources); err != nil {
		return nil, &CorruptError{Reason: "resources: " + err.Error()}
	}
	dec = json.NewDecoder(bytes.NewReader(h.Outputs))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st.Outputs); err != nil {
		return nil, &CorruptError{Reason: "outputs: " + err.Error()}
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
