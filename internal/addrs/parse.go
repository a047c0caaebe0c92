package addrs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// ParseError reports malformed address text: where it went wrong and what was expected.
type ParseError struct {
	Input    string // the whole text
	Offset   int    // byte offset of the problem
	Expected string // what the grammar wanted there
	Found    string // what was there ("end of address" at the end)
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("invalid address %q: at offset %d: expected %s, found %s", e.Input, e.Offset, e.Expected, e.Found)
}

// parsed is the structural result of scanning an address.
type parsed struct {
	module      Module
	hasResource bool
	resource    Resource
	hasKey      bool
	key         InstanceKey
}

type scanner struct {
	in  string
	pos int
}

func (s *scanner) fail(expected string) *ParseError {
	found := "end of address"
	if s.pos < len(s.in) {
		r, _ := utf8.DecodeRuneInString(s.in[s.pos:])
		found = strconv.QuoteRune(r)
	}
	return &ParseError{Input: s.in, Offset: s.pos, Expected: expected, Found: found}
}

func (s *scanner) eof() bool { return s.pos >= len(s.in) }

func (s *scanner) consume(lit string) bool {
	if strings.HasPrefix(s.in[s.pos:], lit) {
		s.pos += len(lit)
		return true
	}
	return false
}

// ident scans an HCL identifier: ID_Start or '_', then ID_Continue or '-' (Unicode UAX #31).
// ASCII is judged here; a name with other characters is judged by hclsyntax itself, so the
// Unicode tables are exactly HCL's.
func (s *scanner) ident(what string) (string, error) {
	start := s.pos
	ascii := true
	for s.pos < len(s.in) {
		c := s.in[s.pos]
		if c >= utf8.RuneSelf {
			ascii = false
			_, n := utf8.DecodeRuneInString(s.in[s.pos:])
			s.pos += n
			continue
		}
		if !identASCII(c, s.pos == start) {
			break
		}
		s.pos++
	}
	if !ascii {
		// the longest prefix HCL accepts is the identifier; what follows is unexpected
		end := s.pos
		for end > start && !hclsyntax.ValidIdentifier(s.in[start:end]) {
			_, n := utf8.DecodeLastRuneInString(s.in[start:end])
			end -= n
		}
		s.pos = end
	}
	if s.pos == start {
		return "", s.fail(what)
	}
	return s.in[start:s.pos], nil
}

func identASCII(c byte, first bool) bool {
	switch {
	case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		return true
	case first:
		return false
	}
	return c == '-' || '0' <= c && c <= '9'
}

// key scans `[N]` or `["json string"]`; the caller has checked for '['.
func (s *scanner) key() (InstanceKey, error) {
	s.pos++ // '['
	if s.eof() {
		return NoKey, s.fail(`an integer or a JSON-quoted string key`)
	}
	var k InstanceKey
	switch c := s.in[s.pos]; {
	case c >= '0' && c <= '9':
		start := s.pos
		for s.pos < len(s.in) && s.in[s.pos] >= '0' && s.in[s.pos] <= '9' {
			s.pos++
		}
		digits := s.in[start:s.pos]
		if len(digits) > 1 && digits[0] == '0' {
			s.pos = start
			return NoKey, s.fail("an integer key without leading zeros")
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			s.pos = start
			return NoKey, s.fail("an integer key that fits in an int")
		}
		k = IntKey(n)
	case c == '"':
		start := s.pos
		s.pos++
		closed := false
	scan:
		for s.pos < len(s.in) {
			switch s.in[s.pos] {
			case '\\':
				s.pos += 2
			case '"':
				s.pos++
				closed = true
				break scan
			default:
				s.pos++
			}
		}
		if !closed || s.pos > len(s.in) {
			s.pos = len(s.in)
			return NoKey, s.fail(`closing '"' of the string key`)
		}
		var str string
		if err := json.Unmarshal([]byte(s.in[start:s.pos]), &str); err != nil || !utf8.ValidString(s.in[start:s.pos]) {
			s.pos = start
			return NoKey, s.fail("a valid JSON string key")
		}
		k = StringKey(str)
	default:
		return NoKey, s.fail(`an integer or a JSON-quoted string key`)
	}
	if !s.consume("]") {
		return NoKey, s.fail(`']'`)
	}
	return k, nil
}

func parse(in string) (parsed, error) {
	s := &scanner{in: in}
	var p parsed
	if in == "" {
		return p, s.fail("an address")
	}
	for s.consume("module.") {
		name, err := s.ident("a module name")
		if err != nil {
			return p, err
		}
		step := ModuleStep{Name: name}
		if !s.eof() && s.in[s.pos] == '[' {
			if step.Key, err = s.key(); err != nil {
				return p, err
			}
		}
		p.module = append(p.module, step)
		if s.eof() {
			return p, nil
		}
		if !s.consume(".") {
			return p, s.fail(`'.' or '['`)
		}
	}
	if s.consume("data.") {
		p.resource.Mode = Data
	}
	typ, err := s.ident("a resource type or 'module.'")
	if err != nil {
		return p, err
	}
	if typ == "data" || typ == "module" {
		s.pos -= len(typ)
		return p, s.fail(fmt.Sprintf("a resource type (%q is reserved)", typ))
	}
	if !s.consume(".") {
		return p, s.fail(`'.' after the resource type`)
	}
	name, err := s.ident("a resource name")
	if err != nil {
		return p, err
	}
	p.hasResource = true
	p.resource.Type, p.resource.Name = typ, name
	if !s.eof() && s.in[s.pos] == '[' {
		if p.key, err = s.key(); err != nil {
			return p, err
		}
		p.hasKey = true
	}
	if !s.eof() {
		if p.hasKey {
			return p, s.fail("end of address")
		}
		return p, s.fail("'[' or end of address")
	}
	return p, nil
}

// ParseInstance parses the canonical form of a resource instance address.
// A resource address without a key parses as its NoKey instance.
func ParseInstance(s string) (Instance, error) {
	p, err := parse(s)
	if err != nil {
		return Instance{}, err
	}
	if !p.hasResource {
		return Instance{}, &ParseError{Input: s, Offset: len(s), Expected: "a resource after the module path", Found: "end of address"}
	}
	return parsedInstance(s, p), nil
}

// parsedInstance returns the Instance of p, parsed from s; s itself becomes its canonical
// string when it is canonical (no second copy).
func parsedInstance(s string, p parsed) Instance {
	var buf [128]byte
	b := appendInstance(buf[:0], p.module, p.resource, p.key)
	if string(b) != s {
		s = string(b)
	}
	return Instance{Module: p.module, Resource: p.resource, Key: p.key, c: &instanceCache{s: s, mod: p.module, res: p.resource, key: p.key}}
}

// ParseAbsResource parses `module.x.TYPE.NAME` (no instance key).
func ParseAbsResource(s string) (AbsResource, error) {
	p, err := parse(s)
	if err != nil {
		return AbsResource{}, err
	}
	if !p.hasResource {
		return AbsResource{}, &ParseError{Input: s, Offset: len(s), Expected: "a resource after the module path", Found: "end of address"}
	}
	if p.hasKey {
		off := strings.LastIndexByte(s, '[')
		return AbsResource{}, &ParseError{Input: s, Offset: off, Expected: "end of address (a resource, not an instance)", Found: "'['"}
	}
	return AbsResource{Module: p.module, Resource: p.resource}, nil
}

// ParseModule parses a module instance path (`module.a["x"].module.b`); "" is the root module.
func ParseModule(s string) (Module, error) {
	if s == "" {
		return RootModule, nil
	}
	p, err := parse(s)
	if err != nil {
		return nil, err
	}
	if p.hasResource {
		return nil, &ParseError{Input: s, Offset: strings.Index(s, p.resource.String()), Expected: "'module.' (a module path, not a resource)", Found: strconv.Quote(p.resource.Type)}
	}
	return p.module, nil
}

// MustParseInstance is ParseInstance for constants in tests and examples; it panics on error.
func MustParseInstance(s string) Instance {
	a, err := ParseInstance(s)
	if err != nil {
		panic(err)
	}
	return a
}
