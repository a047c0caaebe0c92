package config

import (
	"bytes"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// parseFast parses src, a piece of a topology file that starts at start, into the body
// hclsyntax.ParseConfig returns for it, when src keeps to the plain subset generated and
// hand-written topologies mostly use: blocks with quoted or bare labels, and arguments whose
// values are quoted strings (with ${...} interpolations), whole numbers, true/false/null,
// references (a.b.c), function calls and tuples of these, with comments, in printable ASCII
// with spaces and LF line ends.
//
// hclsyntax first lexes the whole input into a token slice, working out each token's column by
// Unicode grapheme segmentation, then parses the tokens; for this subset the columns are byte
// offsets and no token needs to be kept, so most of that work is not needed. On anything else
// (escapes, %{...} directives, strip markers, heredocs, operators, objects, for expressions,
// indexes and splats, tabs, CR, non-ASCII, a syntax error, a repeated argument) parseFast
// returns false and the caller parses with hclsyntax, which also reports the diagnostics. The
// result must equal hclsyntax's in every field and range: TestParseFast, FuzzParseFast and
// FuzzParsePieces compare the two.
func parseFast(src []byte, filename string, start hcl.Pos) (*hclsyntax.Body, bool) {
	if start.Column != 1 {
		return nil, false
	}
	p := &fastParser{src: src, filename: filename, base: start, lines: make([]int, 1, len(src)/24+1)}
	for i, c := range src {
		switch {
		case c == '\n':
			p.lines = append(p.lines, i+1)
		case c < 0x20 || c > 0x7e:
			return nil, false // tabs, CR, control bytes, non-ASCII (columns count graphemes)
		}
	}
	t, ok := p.peek(true)
	if !ok {
		return nil, false
	}
	// The top-level body's range starts at its first token (hclsyntax's PrevRange at the start).
	body, _, ok := p.body(ftEOF, p.rng(t))
	return body, ok
}

type ftKind uint8

const (
	ftEOF ftKind = iota
	ftNewline
	ftIdent
	ftNumber
	ftString   // a whole quoted string without escapes or template sequences
	ftTemplate // the opening quote of a string with ${ (the parser reads the rest)
	ftEqual
	ftOBrace
	ftCBrace
	ftOBrack
	ftCBrack
	ftComma
	ftDot
	ftOParen
	ftCParen
)

// punct maps the bytes that are one-byte tokens by themselves to their kinds (others: ftEOF).
var punct = [256]ftKind{'{': ftOBrace, '}': ftCBrace, '[': ftOBrack, ']': ftCBrack, ',': ftComma, '(': ftOParen, ')': ftCParen}

type ftoken struct {
	kind       ftKind
	start, end int // byte offsets in src
}

type fastParser struct {
	src      []byte
	filename string
	base     hcl.Pos
	lines    []int // offsets at which lines start
	line     int   // index into lines of the last position computed (positions only move forward)
	off      int
}

// pos is the position of offset off. Calls must not go backwards.
func (p *fastParser) pos(off int) hcl.Pos {
	for p.line+1 < len(p.lines) && p.lines[p.line+1] <= off {
		p.line++
	}
	return hcl.Pos{Line: p.base.Line + p.line, Column: off - p.lines[p.line] + 1, Byte: p.base.Byte + off}
}

// rng is the range of t as hclsyntax's lexer sets it: a newline (or a line comment standing
// for one) ends at column 1 of the next line.
func (p *fastParser) rng(t ftoken) hcl.Range {
	s := p.pos(t.start)
	if t.kind == ftNewline {
		return hcl.Range{Filename: p.filename, Start: s, End: hcl.Pos{Line: s.Line + 1, Column: 1, Byte: p.base.Byte + t.end}}
	}
	return hcl.Range{Filename: p.filename, Start: s, End: p.pos(t.end)}
}

func isIdentStart(c byte) bool { return isASCIILetter(c) || c == '_' }

func isIdentByte(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '-' }

// skip moves past spaces, comments and (unless nl) newlines from p.off and returns where the
// next token starts. Where newlines count, a line comment with its newline stands for that
// newline (its range the comment's): it is returned as that token, with comment set. A line
// comment without one (at the end) is skipped. false: an unterminated block comment.
func (p *fastParser) skip(nl bool) (i int, comment ftoken, ok bool) {
	i = p.off
	for i < len(p.src) {
		c := p.src[i]
		if c == ' ' || c == '\n' && !nl {
			i++
			continue
		}
		if c == '#' || c == '/' && i+1 < len(p.src) && p.src[i+1] == '/' {
			j := bytes.IndexByte(p.src[i:], '\n')
			if j < 0 {
				i = len(p.src)
				continue
			}
			if nl {
				return i, ftoken{kind: ftNewline, start: i, end: i + j + 1}, true
			}
			i += j + 1
			continue
		}
		if c == '/' && i+1 < len(p.src) && p.src[i+1] == '*' {
			j := bytes.Index(p.src[i+2:], []byte("*/"))
			if j < 0 {
				return i, ftoken{}, false
			}
			i += 2 + j + 2
			continue
		}
		break
	}
	return i, ftoken{}, true
}

// peek returns the next token, skipping spaces, comments and, unless nl, newlines (as
// hclsyntax's peeker does inside brackets); false for anything outside the subset.
func (p *fastParser) peek(nl bool) (ftoken, bool) {
	i, comment, ok := p.skip(nl)
	if !ok {
		return ftoken{}, false
	}
	if comment.end > 0 {
		return comment, true
	}
	if i == len(p.src) {
		return ftoken{kind: ftEOF, start: i, end: i}, true
	}
	one := func(k ftKind) (ftoken, bool) { return ftoken{kind: k, start: i, end: i + 1}, true }
	switch c := p.src[i]; {
	case c == '\n':
		return one(ftNewline)
	case isIdentStart(c):
		j := i + 1
		for j < len(p.src) && isIdentByte(p.src[j]) {
			j++
		}
		return ftoken{kind: ftIdent, start: i, end: j}, true
	case c >= '0' && c <= '9':
		j := i + 1
		for j < len(p.src) && p.src[j] >= '0' && p.src[j] <= '9' {
			j++
		}
		if j < len(p.src) && (isIdentByte(p.src[j]) || p.src[j] == '.') {
			return ftoken{}, false // decimals, exponents, or a name right after the digits
		}
		return ftoken{kind: ftNumber, start: i, end: j}, true
	case c == '"':
		j := i + 1
		for ; j < len(p.src) && p.src[j] != '"'; j++ {
			switch p.src[j] {
			case '$':
				return ftoken{kind: ftTemplate, start: i, end: i + 1}, true
			case '\\', '%', '\n':
				return ftoken{}, false // escapes and template directives
			}
		}
		if j == len(p.src) || j == i+1 {
			return ftoken{}, false // unterminated, or empty (no literal part)
		}
		return ftoken{kind: ftString, start: i, end: j + 1}, true
	case c == '=':
		if i+1 < len(p.src) && (p.src[i+1] == '=' || p.src[i+1] == '>') {
			return ftoken{}, false
		}
		return one(ftEqual)
	case punct[c] != ftEOF:
		return one(punct[c])
	case c == '.':
		if i+1 < len(p.src) && p.src[i+1] == '.' {
			return ftoken{}, false // an ellipsis
		}
		return one(ftDot)
	}
	return ftoken{}, false
}

// read returns the next token and moves past it.
func (p *fastParser) read(nl bool) (ftoken, bool) {
	t, ok := p.peek(nl)
	if ok {
		p.off = t.end
	}
	return t, ok
}

// body parses a body up to its end token (EOF, or the closing brace of a block), as hclsyntax's
// ParseBody does; startRange is where its range starts. It also returns the end token's range.
func (p *fastParser) body(end ftKind, startRange hcl.Range) (*hclsyntax.Body, hcl.Range, bool) {
	b := &hclsyntax.Body{Attributes: hclsyntax.Attributes{}, Blocks: hclsyntax.Blocks{}}
	for {
		t, ok := p.read(true)
		if !ok {
			return nil, hcl.Range{}, false
		}
		switch t.kind {
		case end:
			endRange := p.rng(t)
			b.SrcRange = hcl.RangeBetween(startRange, endRange)
			b.EndRange = hcl.Range{Filename: p.filename, Start: endRange.End, End: endRange.End}
			return b, endRange, true
		case ftNewline:
			continue
		case ftIdent:
			if !p.item(b, t) {
				return nil, hcl.Range{}, false
			}
		default:
			return nil, hcl.Range{}, false
		}
	}
}

// item parses an argument or a block whose name ident has been read, into b.
func (p *fastParser) item(b *hclsyntax.Body, ident ftoken) bool {
	next, ok := p.peek(true)
	if !ok {
		return false
	}
	identRange := p.rng(ident)
	name := string(p.src[ident.start:ident.end])
	if next.kind == ftEqual {
		p.off = next.end
		eq := p.rng(next)
		expr, last, ok := p.expr(true)
		if !ok {
			return false
		}
		if t, ok := p.read(true); !ok || t.kind != ftNewline && t.kind != ftEOF {
			return false
		}
		if _, dup := b.Attributes[name]; dup {
			return false // "Attribute redefined": hclsyntax reports it
		}
		b.Attributes[name] = &hclsyntax.Attribute{Name: name, Expr: expr, SrcRange: hcl.RangeBetween(identRange, last),
			NameRange: identRange, EqualsRange: eq}
		return true
	}
	blk := &hclsyntax.Block{Type: name, TypeRange: identRange}
	for {
		t, ok := p.read(true)
		if !ok {
			return false
		}
		switch t.kind {
		case ftString:
			blk.Labels = append(blk.Labels, string(p.src[t.start+1:t.end-1]))
			blk.LabelRanges = append(blk.LabelRanges, p.rng(t))
			continue
		case ftIdent:
			blk.Labels = append(blk.Labels, string(p.src[t.start:t.end]))
			blk.LabelRanges = append(blk.LabelRanges, p.rng(t))
			continue
		case ftOBrace:
			blk.OpenBraceRange = p.rng(t)
		default:
			return false
		}
		break
	}
	// hclsyntax parses "{ x = 1 }" on one line as a single-argument block: not covered.
	if t, ok := p.peek(true); !ok || t.kind != ftNewline && t.kind != ftCBrace {
		return false
	}
	// A block body's range starts at its opening brace (hclsyntax's PrevRange there).
	if blk.Body, blk.CloseBraceRange, ok = p.body(ftCBrace, blk.OpenBraceRange); !ok {
		return false
	}
	if t, ok := p.read(true); !ok || t.kind != ftNewline && t.kind != ftEOF {
		return false
	}
	b.Blocks = append(b.Blocks, blk)
	return true
}

// expr parses an expression and returns it with the range of its last token.
func (p *fastParser) expr(nl bool) (hclsyntax.Expression, hcl.Range, bool) {
	t, ok := p.read(nl)
	if !ok {
		return nil, hcl.Range{}, false
	}
	r := p.rng(t)
	var e hclsyntax.Expression
	switch t.kind {
	case ftString:
		lit := hcl.Range{Filename: p.filename, Start: hcl.Pos{Line: r.Start.Line, Column: r.Start.Column + 1, Byte: r.Start.Byte + 1},
			End: hcl.Pos{Line: r.End.Line, Column: r.End.Column - 1, Byte: r.End.Byte - 1}}
		e = &hclsyntax.TemplateExpr{Parts: []hclsyntax.Expression{&hclsyntax.LiteralValueExpr{
			Val: cty.StringVal(string(p.src[t.start+1 : t.end-1])), SrcRange: lit}}, SrcRange: r}
	case ftNumber:
		v, err := cty.ParseNumberVal(string(p.src[t.start:t.end]))
		if err != nil {
			return nil, hcl.Range{}, false
		}
		e = &hclsyntax.LiteralValueExpr{Val: v, SrcRange: r}
	case ftTemplate:
		if e, r, ok = p.template(t, r); !ok {
			return nil, hcl.Range{}, false
		}
	case ftIdent:
		if n, ok := p.peek(nl); ok && n.kind == ftOParen {
			if e, r, ok = p.call(t, r); !ok {
				return nil, hcl.Range{}, false
			}
			break
		}
		switch name := string(p.src[t.start:t.end]); name {
		case "true":
			e = &hclsyntax.LiteralValueExpr{Val: cty.True, SrcRange: r}
		case "false":
			e = &hclsyntax.LiteralValueExpr{Val: cty.False, SrcRange: r}
		case "null":
			e = &hclsyntax.LiteralValueExpr{Val: cty.NullVal(cty.DynamicPseudoType), SrcRange: r}
		default:
			st := &hclsyntax.ScopeTraversalExpr{Traversal: hcl.Traversal{hcl.TraverseRoot{Name: name, SrcRange: r}}, SrcRange: r}
			for {
				dot, ok := p.peek(nl)
				if !ok {
					return nil, hcl.Range{}, false
				}
				if dot.kind != ftDot {
					break
				}
				p.off = dot.end
				attr, ok := p.read(nl)
				if !ok || attr.kind != ftIdent {
					return nil, hcl.Range{}, false // a legacy index (a.0) or a splat
				}
				dr := p.rng(dot)
				r = p.rng(attr)
				step := hcl.TraverseAttr{Name: string(p.src[attr.start:attr.end]), SrcRange: hcl.RangeBetween(dr, r)}
				st.Traversal = append(st.Traversal, step)
				st.SrcRange = hcl.RangeBetween(st.SrcRange, step.SrcRange)
			}
			e = st
		}
	case ftOBrack:
		if e, r, ok = p.tuple(r); !ok {
			return nil, hcl.Range{}, false
		}
	default:
		return nil, hcl.Range{}, false
	}
	// What hclsyntax would read after a term: a traversal, an index, an operator, a call.
	n, ok := p.peek(nl)
	if !ok || n.kind == ftDot || n.kind == ftOBrack {
		return nil, hcl.Range{}, false
	}
	return e, r, true
}

// tuple parses a tuple constructor whose opening bracket (at openRange) has been read, and
// returns it with the range of its closing bracket.
func (p *fastParser) tuple(openRange hcl.Range) (hclsyntax.Expression, hcl.Range, bool) {
	if t, ok := p.peek(false); !ok || t.kind == ftIdent && string(p.src[t.start:t.end]) == "for" {
		return nil, hcl.Range{}, false // a for expression
	}
	exprs, closeRange, ok := p.exprList(ftCBrack)
	if !ok {
		return nil, hcl.Range{}, false
	}
	return &hclsyntax.TupleConsExpr{Exprs: exprs, SrcRange: hcl.RangeBetween(openRange, closeRange), OpenRange: openRange}, closeRange, true
}

// exprList parses expressions separated by commas (a trailing one allowed) up to the closing
// token close, which it reads, and returns them with its range. Inside brackets and parentheses
// newlines are insignificant.
func (p *fastParser) exprList(close ftKind) ([]hclsyntax.Expression, hcl.Range, bool) {
	var exprs []hclsyntax.Expression
	for {
		t, ok := p.peek(false)
		if !ok {
			return nil, hcl.Range{}, false
		}
		if t.kind == close {
			break
		}
		e, _, ok := p.expr(false)
		if !ok {
			return nil, hcl.Range{}, false
		}
		exprs = append(exprs, e)
		if t, ok = p.peek(false); !ok {
			return nil, hcl.Range{}, false
		}
		if t.kind == close {
			break
		}
		if t.kind != ftComma {
			return nil, hcl.Range{}, false
		}
		p.off = t.end
	}
	cl, _ := p.read(false)
	return exprs, p.rng(cl), true
}

// template parses a quoted template with interpolations whose opening quote open (at
// openRange) has been read, as hclsyntax does: literal parts and the interpolated expressions,
// or the expression alone when the string is one interpolation. It returns it with the range
// of its closing quote.
func (p *fastParser) template(open ftoken, openRange hcl.Range) (hclsyntax.Expression, hcl.Range, bool) {
	var parts []hclsyntax.Expression
	literals := 0
	i := open.end
	for {
		j := i
		for j < len(p.src) && p.src[j] != '"' && p.src[j] != '$' {
			if c := p.src[j]; c == '\\' || c == '%' || c == '\n' {
				return nil, hcl.Range{}, false
			}
			j++
		}
		if j == len(p.src) {
			return nil, hcl.Range{}, false
		}
		if j > i {
			parts = append(parts, &hclsyntax.LiteralValueExpr{Val: cty.StringVal(string(p.src[i:j])),
				SrcRange: hcl.Range{Filename: p.filename, Start: p.pos(i), End: p.pos(j)}})
			literals++
		}
		if p.src[j] == '"' {
			p.off = j + 1
			closeRange := p.rng(ftoken{kind: ftString, start: j, end: j + 1})
			r := hcl.RangeBetween(openRange, closeRange)
			if literals == 0 && len(parts) == 1 {
				return &hclsyntax.TemplateWrapExpr{Wrapped: parts[0], SrcRange: r}, closeRange, true
			}
			if len(parts) == 0 {
				return nil, hcl.Range{}, false // "": no parts (not covered)
			}
			return &hclsyntax.TemplateExpr{Parts: parts, SrcRange: r}, closeRange, true
		}
		// "$" not starting "${" is literal, "$${" an escape, "${~" strips spaces: not covered
		if j+2 >= len(p.src) || p.src[j+1] != '{' || p.src[j+2] == '~' {
			return nil, hcl.Range{}, false
		}
		p.off = j + 2
		e, _, ok := p.expr(false)
		if !ok {
			return nil, hcl.Range{}, false
		}
		if t, ok := p.read(false); !ok || t.kind != ftCBrace {
			return nil, hcl.Range{}, false
		}
		parts = append(parts, e)
		i = p.off
	}
}

// call parses a function call whose name (at nameRange) has been read and is followed by its
// opening parenthesis.
func (p *fastParser) call(name ftoken, nameRange hcl.Range) (hclsyntax.Expression, hcl.Range, bool) {
	open, _ := p.read(false)
	fc := &hclsyntax.FunctionCallExpr{Name: string(p.src[name.start:name.end]), NameRange: nameRange, OpenParenRange: p.rng(open)}
	var ok bool
	if fc.Args, fc.CloseParenRange, ok = p.exprList(ftCParen); !ok {
		return nil, hcl.Range{}, false
	}
	return fc, fc.CloseParenRange, true
}
