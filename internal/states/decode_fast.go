package states

import (
	"encoding/json"
	"strconv"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// fastResource decodes one resource line in exactly the layout appendResource writes, without
// reflection. It returns ok=false on anything else — another key order, an escape sequence,
// non-ASCII text, an unknown field — and the caller then uses encoding/json for that line, so
// the fast path never decides what is valid; it only skips reflection for canonical lines. A
// test holds its results equal to encoding/json's.
func fastResource(line []byte) (*Resource, bool) { return fastResourceShared(line, nil) }

// depLists remembers dependency lists already decoded, by their exact JSON text: resources
// of one configuration resource usually have the same dependencies, and a list is then decoded
// once and shared (capacity-limited, so an append copies; State.Move copies before it
// rewrites). Not safe for concurrent use: one per decoding goroutine.
type depLists map[string][]addrs.Instance

// fastResourceShared is fastResource sharing dependency lists through seen (which may be nil).
func fastResourceShared(line []byte, seen depLists) (*Resource, bool) {
	p := &scan{b: line}
	r := &Resource{}
	var s string
	if !p.lit(`{"address":`) || !p.str(&s) || r.Addr.UnmarshalText([]byte(s)) != nil {
		return nil, false
	}
	if !p.lit(`,"schema_version":`) || !p.integer(&r.SchemaVersion) {
		return nil, false
	}
	if p.key(`,"driver":`) && !p.str(&r.Driver) {
		return nil, false
	}
	if p.key(`,"external_id":`) && !p.str(&r.ExternalID) {
		return nil, false
	}
	if p.key(`,"attributes":`) && !p.raw((*[]byte)(&r.Attributes)) {
		return nil, false
	}
	if p.key(`,"dependencies":`) && !p.dependencies(r, seen) {
		return nil, false
	}
	if p.key(`,"attachments":`) && !p.attachments(r) {
		return nil, false
	}
	if !p.observationOwner(r) {
		return nil, false
	}
	if p.key(`,"private":`) {
		r.Private = &substrate.Envelope{}
		if !p.envelope(r.Private) {
			return nil, false
		}
	}
	if !p.lit(`,"created_at":`) || !p.time(&r.CreatedAt) || !p.lit(`,"updated_at":`) || !p.time(&r.UpdatedAt) || !p.lit(`}`) {
		return nil, false
	}
	return r, p.i == len(p.b)
}

// dependencies reads r's dependency list (the value after its key), reusing the list decoded
// for the same text through seen.
func (p *scan) dependencies(r *Resource, seen depLists) bool {
	var span []byte
	if end, ok := p.stringArrayEnd(); ok && seen != nil && end-p.i > 2 {
		span = p.b[p.i:end]
		if deps, ok := seen[string(span)]; ok {
			r.Dependencies, p.i = deps, end
			return true
		}
	}
	var s string
	ok := p.array(func() bool {
		var a addrs.Instance
		if !p.str(&s) || a.UnmarshalText([]byte(s)) != nil {
			return false
		}
		r.Dependencies = append(r.Dependencies, a)
		return true
	})
	if !ok {
		return false
	}
	if r.Dependencies == nil {
		r.Dependencies = []addrs.Instance{}
	}
	if span != nil {
		r.Dependencies = r.Dependencies[:len(r.Dependencies):len(r.Dependencies)]
		seen[string(span)] = r.Dependencies
	}
	return true
}

// attachments reads r's attachment list (the value after its key).
func (p *scan) attachments(r *Resource) bool {
	ok := p.array(func() bool {
		var a substrate.AttachmentState
		if !p.lit(`{"name":`) || !p.str(&a.Name) || !p.lit(`,"mac":`) || !p.str(&a.MAC) {
			return false
		}
		if p.key(`,"ipv4":`) {
			if !p.array(func() bool {
				var v string
				if !p.str(&v) {
					return false
				}
				a.IPv4 = append(a.IPv4, v)
				return true
			}) {
				return false
			}
			if a.IPv4 == nil {
				a.IPv4 = []string{}
			}
		}
		if p.key(`,"gateway":`) && !p.str(&a.Gateway) {
			return false
		}
		if !p.lit(`,"private":`) || !p.envelope(&a.Private) || !p.lit(`}`) {
			return false
		}
		r.Attachments = append(r.Attachments, a)
		return true
	})
	if !ok {
		return false
	}
	if r.Attachments == nil {
		r.Attachments = []substrate.AttachmentState{}
	}
	return true
}

// observationOwner reads r's observation and owner objects (both keys included).
func (p *scan) observationOwner(r *Resource) bool {
	var s string
	if !p.lit(`,"observation":{"status":`) || !p.str(&s) {
		return false
	}
	r.Observation.Status = substrate.Status(s)
	if p.key(`,"reason":`) && !p.str(&r.Observation.Reason) {
		return false
	}
	return p.lit(`,"at":`) && p.time(&r.Observation.At) && p.lit(`},"owner":{"topology":`) && p.str(&r.Owner.Topology) &&
		p.lit(`,"address":`) && p.str(&r.Owner.Address) && p.lit(`,"type":`) && p.str(&r.Owner.Type) &&
		p.lit(`,"generation":`) && p.unsigned(&r.Owner.Generation) && p.lit(`}`)
}

// scan is a cursor over one canonical line.
type scan struct {
	b []byte
	i int
}

// lit consumes s exactly.
func (p *scan) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// key consumes an optional key (reports whether it was there).
func (p *scan) key(s string) bool { return p.lit(s) }

// str reads a string of printable ASCII whose only escapes are \" and \\ (what
// appendString writes for addresses with string keys); anything else is left to encoding/json.
func (p *scan) str(dst *string) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	escaped := false
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			v := p.b[p.i+1 : j]
			if escaped {
				out := make([]byte, 0, len(v))
				for k := 0; k < len(v); k++ {
					if v[k] == '\\' {
						k++
					}
					out = append(out, v[k])
				}
				*dst = string(out)
			} else {
				*dst = string(v)
			}
			p.i = j + 1
			return true
		case c == '\\':
			if j+1 >= len(p.b) || (p.b[j+1] != '"' && p.b[j+1] != '\\') {
				return false
			}
			escaped = true
			j++
		case c < 0x20 || c >= 0x80:
			return false
		}
	}
	return false
}

func (p *scan) digits() (string, bool) {
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	start := j
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == start || j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return "", false
	}
	if p.b[start] == '0' && j-start > 1 {
		return "", false // a leading zero is not JSON (nothing validated the line before)
	}
	s := string(p.b[p.i:j])
	p.i = j
	return s, true
}

func (p *scan) integer(dst *int) bool {
	s, ok := p.digits()
	if !ok {
		return false
	}
	v, err := strconv.ParseInt(s, 10, strconv.IntSize)
	*dst = int(v)
	return err == nil
}

func (p *scan) unsigned(dst *uint64) bool {
	s, ok := p.digits()
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	*dst = v
	return err == nil
}

func (p *scan) time(dst *time.Time) bool {
	start := p.i
	var s string
	if !p.str(&s) {
		return false
	}
	return dst.UnmarshalJSON(p.b[start:p.i]) == nil
}

// raw reads one JSON value's bytes (its extent, then json.Valid in take) and copies them, as
// encoding/json does for a json.RawMessage.
func (p *scan) raw(dst *[]byte) bool {
	start, depth := p.i, 0
	for j := p.i; j < len(p.b); j++ {
		switch c := p.b[j]; c {
		case '"':
			for j++; j < len(p.b) && p.b[j] != '"'; j++ {
				if p.b[j] == '\\' {
					j++
				}
			}
			if j >= len(p.b) {
				return false
			}
			if depth == 0 {
				return p.take(dst, start, j+1)
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return false
			}
			if depth == 0 {
				return p.take(dst, start, j+1)
			}
		case ',':
			if depth == 0 {
				return p.take(dst, start, j)
			}
		}
	}
	return false
}

func (p *scan) take(dst *[]byte, start, end int) bool {
	v := p.b[start:end]
	if !json.Valid(v) {
		return false
	}
	*dst = append([]byte(nil), v...)
	p.i = end
	return true
}

// array reads `[` elem (`,` elem)* `]` (or `[]`), calling elem for each element.
// stringArrayEnd returns the offset just after the array of strings at p.i, without moving;
// ok is false if the text there is not '[' then strings up to a ']'. It does not validate the
// strings: the decoder does that.
func (p *scan) stringArrayEnd() (end int, ok bool) {
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return 0, false
	}
	in := false
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case in && c == '\\':
			j++
		case c == '"':
			in = !in
		case !in && c == ']':
			return j + 1, true
		case !in && (c == '[' || c == '{'):
			return 0, false
		}
	}
	return 0, false
}

func (p *scan) array(elem func() bool) bool {
	if !p.lit(`[`) {
		return false
	}
	if p.lit(`]`) {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.lit(`]`) {
			return true
		}
		if !p.lit(`,`) {
			return false
		}
	}
}

func (p *scan) envelope(e *substrate.Envelope) bool {
	if !p.lit(`{"driver":`) || !p.str(&e.Driver) || !p.lit(`,"version":`) || !p.integer(&e.Version) {
		return false
	}
	if p.key(`,"data":`) && !p.raw((*[]byte)(&e.Data)) {
		return false
	}
	return p.lit(`}`)
}
