package config

import (
	"bytes"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// chunkTarget is the source size parseConfig aims for per piece. hclsyntax lexes a whole input
// into one token slice grown by append (about 100 bytes per token, 1.25× steps once large), so
// an 18 KB file allocates and copies its tokens about four times over; pieces of this size keep
// the slices small.
const chunkTarget = 2048

// parseConfig parses src like hclsyntax.ParseConfig(src, filename, hcl.InitialPos), in pieces
// split between top-level blocks, each by parseFast when it can, and returns the same file and
// diagnostics. A split is only taken at the start of a line that begins with a letter right
// after a line that is exactly "}". Such a line may still lie inside a heredoc, a comment or a
// multi-line expression; then the piece before it ends inside that construct and fails to
// parse (parseFast accepts only pieces whose constructs all close). So if any piece has a
// diagnostic, or two pieces set the same top-level argument (the parser's "Attribute
// redefined" check spans the whole body), the whole source is parsed again in one go.
func parseConfig(src []byte, filename string) (*hcl.File, hcl.Diagnostics) {
	return parsePieces(src, filename, chunkTarget)
}

func parsePieces(src []byte, filename string, target int) (*hcl.File, hcl.Diagnostics) {
	cuts := chunkCuts(src, target)
	var root *hcl.File
	var body *hclsyntax.Body
	begin := hcl.InitialPos
	for i := 0; i <= len(cuts); i++ {
		end := len(src)
		if i < len(cuts) {
			end = cuts[i].Byte
		}
		b, ok := parseFast(src[begin.Byte:end], filename, begin)
		var f *hcl.File
		if !ok {
			if len(cuts) == 0 {
				return hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
			}
			var d hcl.Diagnostics
			f, d = hclsyntax.ParseConfig(src[begin.Byte:end], filename, begin)
			if len(d) > 0 {
				return hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
			}
			b = f.Body.(*hclsyntax.Body)
		}
		if root == nil {
			// The first piece's file keeps its navigation (diagnostic context) pointing at
			// its body, which becomes the whole file's body. A fast-parsed piece has no file:
			// an empty one is made and its body replaced.
			if f == nil {
				f, _ = hclsyntax.ParseConfig(nil, filename, begin)
				body = f.Body.(*hclsyntax.Body)
				*body = *b
			} else {
				body = b
			}
			root = f
		} else {
			for name, a := range b.Attributes {
				if _, dup := body.Attributes[name]; dup {
					return hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
				}
				body.Attributes[name] = a
			}
			body.Blocks = append(body.Blocks, b.Blocks...)
			body.SrcRange = hcl.RangeBetween(body.SrcRange, b.SrcRange)
			body.EndRange = b.EndRange
		}
		if i < len(cuts) {
			begin = cuts[i]
		}
	}
	root.Bytes = src
	return root, nil
}

// chunkCuts lists the positions where parseConfig may split src: the start of a line beginning
// with an ASCII letter right after a line that is exactly "}" (a top-level block's end in
// formatted HCL), at least target bytes after the previous cut.
func chunkCuts(src []byte, target int) []hcl.Pos {
	var cuts []hcl.Pos
	line, last := 1, 0
	prevClose := false
	for off := 0; off < len(src); {
		nl := bytes.IndexByte(src[off:], '\n')
		if nl < 0 {
			break
		}
		lineText := bytes.TrimSuffix(src[off:off+nl], []byte("\r"))
		if prevClose && off-last >= target && len(lineText) > 0 && isASCIILetter(lineText[0]) {
			cuts = append(cuts, hcl.Pos{Line: line, Column: 1, Byte: off})
			last = off
		}
		prevClose = len(lineText) == 1 && lineText[0] == '}'
		off += nl + 1
		line++
	}
	if len(cuts) > 0 && len(src)-cuts[len(cuts)-1].Byte < target/4 {
		cuts = cuts[:len(cuts)-1] // a short tail is not worth its own parse
	}
	return cuts
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
