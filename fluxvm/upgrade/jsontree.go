package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// node is a decoded JSON value that remembers where it started in the source, keeps object
// members in source order and reports duplicate keys, so that validation can name every
// problem with a JSON path and a line:column.
type node struct {
	kind   kind
	off    int64
	fields []field // kindObject
	elems  []*node // kindArray
	str    string  // kindString
	num    json.Number
	b      bool
}

type field struct {
	key string
	off int64
	val *node
}

type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// syntaxError is malformed JSON at a byte offset.
type syntaxError struct {
	off  int64
	path string // JSON path of the value being read, when known
	msg  string
}

func (e *syntaxError) Error() string { return e.msg }

// parseJSON decodes exactly one JSON value from data.
func parseJSON(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec, "$")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &syntaxError{off: dec.InputOffset(), msg: "unexpected data after the top-level value"}
	}
	return n, nil
}

func parseValue(dec *json.Decoder, path string) (*node, error) {
	off := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return nil, wrapSyntax(dec, err, path)
	}
	return parseFrom(dec, tok, off, path)
}

func wrapSyntax(dec *json.Decoder, err error, path string) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &syntaxError{off: se.Offset, path: path, msg: se.Error()}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &syntaxError{off: dec.InputOffset(), path: path, msg: "unexpected end of JSON input"}
	}
	return &syntaxError{off: dec.InputOffset(), path: path, msg: err.Error()}
}

func parseFrom(dec *json.Decoder, tok json.Token, off int64, path string) (*node, error) {
	switch t := tok.(type) {
	case nil:
		return &node{kind: kindNull, off: off}, nil
	case bool:
		return &node{kind: kindBool, off: off, b: t}, nil
	case json.Number:
		return &node{kind: kindNumber, off: off, num: t}, nil
	case string:
		return &node{kind: kindString, off: off, str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: kindArray, off: off}
			for dec.More() {
				e, err := parseValue(dec, fmt.Sprintf("%s[%d]", path, len(n.elems)))
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, wrapSyntax(dec, err, path)
			}
			return n, nil
		case '{':
			n := &node{kind: kindObject, off: off}
			seen := map[string]bool{}
			for dec.More() {
				koff := dec.InputOffset()
				kt, err := dec.Token()
				if err != nil {
					return nil, wrapSyntax(dec, err, path)
				}
				key, ok := kt.(string)
				if !ok {
					return nil, &syntaxError{off: koff, path: path, msg: "object key is not a string"}
				}
				if seen[key] {
					return nil, &syntaxError{off: koff, path: path + "." + key, msg: fmt.Sprintf("duplicate object key %q", key)}
				}
				seen[key] = true
				v, err := parseValue(dec, path+"."+key)
				if err != nil {
					return nil, err
				}
				n.fields = append(n.fields, field{key: key, off: koff, val: v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, wrapSyntax(dec, err, path)
			}
			return n, nil
		}
	}
	return nil, &syntaxError{off: off, path: path, msg: fmt.Sprintf("unexpected token %v", tok)}
}

// lineCol converts a byte offset into a 1-based line and column, skipping the whitespace the
// decoder reports before a token.
func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	for off < int64(len(data)) && strings.ContainsRune(" \t\r\n,:", rune(data[off])) {
		off++
	}
	line, col := 1, 1
	for _, c := range data[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// Canonicalize returns the RFC 8785 (JCS) style canonical form of a JSON document: object
// members sorted by UTF-16 code units, no insignificant whitespace, ECMAScript number form and
// minimal string escaping.
func Canonicalize(data []byte) ([]byte, error) {
	n, err := parseJSON(data)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, n); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCanonical(buf *bytes.Buffer, n *node) error {
	switch n.kind {
	case kindNull:
		buf.WriteString("null")
	case kindBool:
		buf.WriteString(strconv.FormatBool(n.b))
	case kindNumber:
		s, err := canonicalNumber(string(n.num))
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case kindString:
		writeCanonicalString(buf, n.str)
	case kindArray:
		buf.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case kindObject:
		fs := append([]field(nil), n.fields...)
		sort.Slice(fs, func(i, j int) bool { return lessUTF16(fs[i].key, fs[j].key) })
		buf.WriteByte('{')
		for i, f := range fs {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonicalString(buf, f.key)
			buf.WriteByte(':')
			if err := writeCanonical(buf, f.val); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	}
	return nil
}

func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func writeCanonicalString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(buf, `\u%04x`, r)
			} else {
				buf.WriteRune(r)
			}
		}
	}
	buf.WriteByte('"')
}

// canonicalNumber formats a JSON number the way ECMAScript's Number.prototype.toString does
// (RFC 8785 section 3.2.2.3).
func canonicalNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s cannot be represented as an IEEE 754 double", lit)
	}
	if f == 0 {
		return "0", nil
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	n, k := x+1, len(digits)
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		s = digits[:1]
		if k > 1 {
			s += "." + digits[1:]
		}
		if n-1 >= 0 {
			s += "e+" + strconv.Itoa(n-1)
		} else {
			s += "e-" + strconv.Itoa(1-n)
		}
	}
	return sign + s, nil
}
