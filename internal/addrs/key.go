package addrs

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// keyKind says which of the three key forms an InstanceKey holds.
type keyKind uint8

const (
	noKey keyKind = iota
	intKey
	stringKey
)

// InstanceKey selects one instance of a resource or module expanded with count (IntKey) or
// for_each (StringKey). NoKey marks a resource or module without count/for_each.
// The zero value is NoKey. InstanceKey is comparable with ==.
type InstanceKey struct {
	kind keyKind
	i    int
	s    string
}

// NoKey is the key of a single-instance resource or module.
var NoKey = InstanceKey{}

// IntKey returns the key of instance i of a counted resource or module.
func IntKey(i int) InstanceKey { return InstanceKey{kind: intKey, i: i} }

// StringKey returns the key of instance s of a for_each resource or module. s should be valid
// UTF-8 (all configuration-derived keys are); invalid bytes render as U+FFFD.
func StringKey(s string) InstanceKey { return InstanceKey{kind: stringKey, s: s} }

// IsNone reports whether k is NoKey.
func (k InstanceKey) IsNone() bool { return k.kind == noKey }

// Int returns the integer value and true for an IntKey.
func (k InstanceKey) Int() (int, bool) { return k.i, k.kind == intKey }

// Str returns the string value and true for a StringKey.
func (k InstanceKey) Str() (string, bool) { return k.s, k.kind == stringKey }

// String renders `[0]`, `["blue"]` (JSON quoting) or "" for NoKey.
func (k InstanceKey) String() string {
	switch k.kind {
	case intKey:
		return "[" + strconv.Itoa(k.i) + "]"
	case stringKey:
		return "[" + quoteJSON(k.s) + "]"
	}
	return ""
}

// appendTo appends String's rendering to b.
func (k InstanceKey) appendTo(b []byte) []byte {
	switch k.kind {
	case intKey:
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(k.i), 10)
		return append(b, ']')
	case stringKey:
		b = append(b, '[')
		b = append(b, quoteJSON(k.s)...)
		return append(b, ']')
	}
	return b
}

// Value renders the key without brackets for use as each.key / count.index in messages:
// `0`, `"blue"`, or "" for NoKey.
func (k InstanceKey) Value() string {
	s := k.String()
	if s == "" {
		return ""
	}
	return s[1 : len(s)-1]
}

// Less orders NoKey < IntKey (numerically) < StringKey (bytewise).
func (k InstanceKey) Less(o InstanceKey) bool {
	if k.kind != o.kind {
		return k.kind < o.kind
	}
	switch k.kind {
	case intKey:
		return k.i < o.i
	case stringKey:
		return k.s < o.s
	}
	return false
}

func (k InstanceKey) compare(o InstanceKey) int {
	if k.Less(o) {
		return -1
	}
	if o.Less(k) {
		return 1
	}
	return 0
}

// quoteJSON quotes s as a JSON string without HTML escaping.
func quoteJSON(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
