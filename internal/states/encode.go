package states

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"zyvor.dev/sysbox/pkg/substrate"
)

// appendResource appends r's JSON, byte-for-byte what encoding/json.Marshal(r) produces (a test
// holds it to that, and fails if a field is added to any type it encodes without being added
// here), without reflection or re-compacting every Marshaler's output: a 10,000-resource save
// is dominated by this.
func appendResource(b []byte, r *Resource) ([]byte, error) {
	var err error
	b = append(b, `{"address":`...)
	b = appendString(b, r.Addr.String())
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(r.SchemaVersion), 10)
	if r.Driver != "" {
		b = append(b, `,"driver":`...)
		b = appendString(b, r.Driver)
	}
	if r.ExternalID != "" {
		b = append(b, `,"external_id":`...)
		b = appendString(b, r.ExternalID)
	}
	if len(r.Attributes) > 0 {
		b = append(b, `,"attributes":`...)
		if b, err = appendRaw(b, r.Attributes); err != nil {
			return nil, fmt.Errorf("attributes: %w", err)
		}
	}
	if len(r.Dependencies) > 0 {
		b = append(b, `,"dependencies":[`...)
		for i, d := range r.Dependencies {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d.String())
		}
		b = append(b, ']')
	}
	if len(r.Attachments) > 0 {
		b = append(b, `,"attachments":[`...)
		for i := range r.Attachments {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendAttachment(b, &r.Attachments[i]); err != nil {
				return nil, fmt.Errorf("attachment %s: %w", r.Attachments[i].Name, err)
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"observation":{"status":`...)
	b = appendString(b, string(r.Observation.Status))
	if r.Observation.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, r.Observation.Reason)
	}
	b = append(b, `,"at":`...)
	if b, err = appendTime(b, r.Observation.At); err != nil {
		return nil, err
	}
	b = append(b, `},"owner":{"topology":`...)
	b = appendString(b, r.Owner.Topology)
	b = append(b, `,"address":`...)
	b = appendString(b, r.Owner.Address)
	b = append(b, `,"type":`...)
	b = appendString(b, r.Owner.Type)
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, r.Owner.Generation, 10)
	b = append(b, '}')
	if r.Private != nil {
		b = append(b, `,"private":`...)
		if b, err = appendEnvelope(b, r.Private); err != nil {
			return nil, fmt.Errorf("private: %w", err)
		}
	}
	b = append(b, `,"created_at":`...)
	if b, err = appendTime(b, r.CreatedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"updated_at":`...)
	if b, err = appendTime(b, r.UpdatedAt); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func appendAttachment(b []byte, a *substrate.AttachmentState) ([]byte, error) {
	b = append(b, `{"name":`...)
	b = appendString(b, a.Name)
	b = append(b, `,"mac":`...)
	b = appendString(b, a.MAC)
	if len(a.IPv4) > 0 {
		b = append(b, `,"ipv4":[`...)
		for i, p := range a.IPv4 {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, p)
		}
		b = append(b, ']')
	}
	if a.Gateway != "" {
		b = append(b, `,"gateway":`...)
		b = appendString(b, a.Gateway)
	}
	b = append(b, `,"private":`...)
	b, err := appendEnvelope(b, &a.Private)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func appendEnvelope(b []byte, e *substrate.Envelope) ([]byte, error) {
	b = append(b, `{"driver":`...)
	b = appendString(b, e.Driver)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(e.Version), 10)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		var err error
		if b, err = appendRaw(b, e.Data); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y >= 10000 {
		return nil, fmt.Errorf("time %v: year outside [0,9999]", t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendRaw appends raw JSON compacted (and validated) as encoding/json does for a
// json.RawMessage; already-compact input without characters json escapes is copied as is.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if isCompactSafe(raw) && json.Valid(raw) {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	// encoding/json also HTML-escapes inside raw messages; keep byte equality with it.
	out, err := json.Marshal(json.RawMessage(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// isCompactSafe reports whether raw has no whitespace outside strings and none of the
// characters encoding/json rewrites (<, >, &, U+2028, U+2029) — a conservative byte test.
func isCompactSafe(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '<' || c == '>' || c == '&' || c >= 0x80:
			return false
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			return false
		}
	}
	return true
}

// appendString appends s as a JSON string exactly as encoding/json.Marshal does: quotes and
// backslashes are escaped here; control characters, non-ASCII and the HTML-sensitive <, >, &
// take encoding/json's own path.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			out, _ := json.Marshal(s)
			return append(b, out...)
		}
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
