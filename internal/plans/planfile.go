package plans

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/durable"
)

// RecordKind is the durable record kind of a stored plan.
const RecordKind = "sysbox-plan"

// recordVersion is the record (file format) version this build writes and the newest it reads.
const recordVersion = 1

// WriteFile stores p durably at path (temp file, fsync, rename, directory fsync). The file's
// one format version is its record's; the payload does not repeat it.
func WriteFile(path string, p *Plan) error {
	payload, err := storedJSON(p)
	if err != nil {
		return fmt.Errorf("write plan %s: encode %s record: %w", path, RecordKind, err)
	}
	b := durable.AppendRecordJSON(nil, RecordKind, recordVersion, payload)
	if err := durable.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write plan %s: %w", path, err)
	}
	return nil
}

// storedHead is the part of the plan file's payload before the actions, as json.Marshal lays
// out a Plan without its FormatVersion.
type storedHead struct {
	ToolVersion string   `json:"tool_version"`
	Mode        string   `json:"mode"`
	Targets     []string `json:"targets,omitempty"`
}

// storedJSON is what the plan file stores: json.Marshal of p without its FormatVersion. The
// actions (nearly all of a large plan) are written by the encoder the actions digest uses,
// without reflection, into the one buffer that is the payload (through json.Marshal of a
// struct holding them as a json.RawMessage, they were scanned and copied once more, into a
// buffer grown by doubling); the fields around them by json.Marshal. TestStoredJSON holds the
// two equal.
func storedJSON(p *Plan) ([]byte, error) {
	head, err := json.Marshal(storedHead{ToolVersion: p.ToolVersion, Mode: p.Mode, Targets: p.Targets})
	if err != nil {
		return nil, err
	}
	fp, err := json.Marshal(p.Fingerprint)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	// a netns node's action is about 380 bytes: one allocation, not a dozen doublings
	buf.Grow(len(head) + len(fp) + len(p.Actions)*400 + 64)
	buf.Write(head[:len(head)-1]) // without its closing brace
	buf.WriteString(`,"actions":`)
	if !writeActions(&buf, p.Actions) {
		stored := *p
		stored.FormatVersion = ""
		return json.Marshal(&stored)
	}
	buf.WriteString(`,"fingerprint":`)
	buf.Write(fp)
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// MaxPlanFile bounds a stored plan file (plans of thousands of resources stay far below it).
const MaxPlanFile = 256 << 20

// ReadFile loads a stored plan. The format version is read before anything else: a file of a
// newer format is a *durable.NewerFormatError ("plan format 2 is newer than this sysbox (1)",
// wrapping durable.ErrUnknownVersion); a damaged one wraps durable.ErrCorrupt.
func ReadFile(path string) (*Plan, error) {
	b, err := config.ReadInput(path, MaxPlanFile)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	p, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("read plan %s: %w", path, err)
	}
	return p, nil
}

// Decode checks and decodes the bytes of a stored plan file (as ReadFile does; the control
// plane receives plan files over HTTP).
func Decode(b []byte) (*Plan, error) {
	var p Plan
	if _, err := durable.DecodeRecord([]byte(strings.TrimSpace(string(b))), RecordKind, recordVersion, &p); err != nil {
		return nil, err
	}
	// Files written before the payload dropped its copy of the version say "1" there.
	if p.FormatVersion != "" && p.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%w: payload says plan format %q", durable.ErrCorrupt, p.FormatVersion)
	}
	p.FormatVersion = FormatVersion
	if err := checkFingerprint(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", durable.ErrCorrupt, err)
	}
	return &p, nil
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkFingerprint refuses a stored plan whose fingerprint is missing, empty or malformed, or
// whose action digest does not cover its actions: a plan is only as trustworthy as the digests
// that bind it to the inputs it was made from.
func checkFingerprint(p *Plan) error {
	fp := &p.Fingerprint
	for _, d := range []struct{ field, v string }{
		{FieldSourceDigest, fp.SourceDigest},
		{FieldInputDigest, fp.InputDigest},
		{FieldActions + "_digest", fp.ActionsDigest},
	} {
		if !digestRE.MatchString(d.v) {
			return fmt.Errorf("fingerprint %s %q: want sha256:<64 lowercase hex>", d.field, d.v)
		}
	}
	for addr, d := range fp.Artifacts {
		if !digestRE.MatchString(d) {
			return fmt.Errorf("fingerprint %s[%s] %q: want sha256:<64 lowercase hex>", FieldArtifacts, addr, d)
		}
	}
	if got := ActionsDigest(p.Actions); got != fp.ActionsDigest {
		return fmt.Errorf("fingerprint %s_digest %s does not match the stored actions (%s)", FieldActions, fp.ActionsDigest, got)
	}
	return nil
}

// ErrStale is wrapped by every *StaleError.
var ErrStale = errors.New("stale plan")

// Stale-plan fields (S11).
const (
	FieldToolVersion    = "tool_version"
	FieldMode           = "mode"
	FieldTargets        = "targets"
	FieldSourceDigest   = "source_digest"
	FieldInputDigest    = "input_digest"
	FieldLineage        = "lineage"
	FieldSerial         = "serial"
	FieldSchemaVersions = "schema_versions"
	FieldDrivers        = "drivers"
	FieldArtifacts      = "artifacts"
	FieldActions        = "actions"
)

// StaleError says which bound field of a stored plan no longer matches.
type StaleError struct {
	Field     string
	Planned   string
	Current   string
	Explained string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("stale plan: %s changed: planned %s, now %s (%s); run plan again", e.Field, e.Planned, e.Current, e.Explained)
}

// Unwrap makes errors.Is(err, ErrStale) true.
func (e *StaleError) Unwrap() error { return ErrStale }

// Verify compares a stored plan with a fresh plan computed now from the same inputs (current
// files, variables, state and drivers). It returns nil when they match, else one *StaleError
// per differing field, joined. Apply calls it before any provider call.
func Verify(stored, fresh *Plan) error {
	var errs []error
	add := func(field string, a, b any, why string) {
		if !reflect.DeepEqual(a, b) {
			errs = append(errs, &StaleError{Field: field, Planned: short(a), Current: short(b), Explained: why})
		}
	}
	s, f := stored.Fingerprint, fresh.Fingerprint
	add(FieldToolVersion, stored.ToolVersion, fresh.ToolVersion, "a different sysbox build")
	add(FieldMode, stored.Mode, fresh.Mode, "plan mode")
	add(FieldTargets, stored.Targets, fresh.Targets, "-target selection")
	add(FieldSourceDigest, s.SourceDigest, f.SourceDigest, "the topology files were edited")
	add(FieldInputDigest, s.InputDigest, f.InputDigest, "variables or environment inputs differ")
	add(FieldLineage, s.Lineage, f.Lineage, "the state belongs to another topology")
	add(FieldSerial, s.Serial, f.Serial, "the state was written since the plan")
	add(FieldSchemaVersions, s.SchemaVersions, f.SchemaVersions, "resource schema versions differ")
	add(FieldDrivers, normDrivers(s), normDrivers(f), "selected drivers or their capability contract differ")
	add(FieldArtifacts, s.Artifacts, f.Artifacts, "artifact content changed")
	if s.ActionsDigest != f.ActionsDigest || s.ActionsDigest != ActionsDigest(stored.Actions) {
		errs = append(errs, &StaleError{Field: FieldActions, Planned: s.ActionsDigest, Current: f.ActionsDigest, Explained: "the ordered action list differs"})
	}
	return errors.Join(errs...)
}

func normDrivers(fp Fingerprint) string {
	var parts []string
	for _, d := range fp.Drivers {
		caps := make([]string, len(d.Capabilities))
		for i, c := range d.Capabilities {
			caps[i] = string(c)
		}
		sort.Strings(caps)
		parts = append(parts, d.Name+"@"+d.Version+"("+strings.Join(caps, ",")+")")
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
