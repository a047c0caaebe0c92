package config

import (
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// TestResourceContentIsPartialContent: resourceContent gives what PartialContent(resourceMeta)
// gives (content, diagnostics), skipping the copy only for a body without a lifecycle block or
// argument; and schemaBody of such a body hides the meta-arguments from a schema's decoder.
func TestResourceContentIsPartialContent(t *testing.T) {
	for name, tc := range map[string]struct {
		src     string
		visible bool
	}{
		"plain":              {"x = 1\n", true},
		"meta-arguments":     {"count = 2\nfor_each = {}\ndepends_on = [a.b]\nprovider = p\nx = 1\n", true},
		"nested count":       {"x = 1\ninner {\n  count = 3\n}\n", true},
		"lifecycle block":    {"count = 2\nx = 1\nlifecycle {\n  prevent_destroy = true\n}\n", false},
		"lifecycle argument": {"x = 1\nlifecycle = 3\n", false},
		"lifecycle labelled": {"x = 1\nlifecycle \"l\" {\n}\n", false},
		"two lifecycle":      {"lifecycle {\n}\nlifecycle {\n}\n", false},
		"empty":              {"", true},
	} {
		t.Run(name, func(t *testing.T) {
			f, d := hclsyntax.ParseConfig([]byte(tc.src), "r.hcl", hcl.InitialPos)
			if d.HasErrors() {
				t.Fatal(d)
			}
			wantContent, wantRemain, wantDiags := f.Body.PartialContent(resourceMeta)
			content, remain, visible, diags := resourceContent(f.Body)
			if visible != tc.visible {
				t.Fatalf("visible %v, want %v", visible, tc.visible)
			}
			if !reflect.DeepEqual(content.Attributes, wantContent.Attributes) || len(content.Blocks) != len(wantContent.Blocks) ||
				content.MissingItemRange != wantContent.MissingItemRange || len(diags) != len(wantDiags) {
				t.Fatalf("got content %+v diags %v, want %+v diags %v", content, diags, wantContent, wantDiags)
			}
			r := &Resource{Body: remain, metaVisible: visible}
			if visible && remain != f.Body {
				t.Error("visible, but the remainder is not the body itself")
			}
			// A decoder of the schema (x and inner) sees no meta-argument in the schema body.
			schema := &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "x"}}, Blocks: []hcl.BlockHeaderSchema{{Type: "inner"}}}
			_, gotD := r.schemaBody().Content(schema)
			_, wantD := wantRemain.Content(schema)
			if gotD.Error() != wantD.Error() {
				t.Errorf("schema body decode: got %v, want %v", gotD, wantD)
			}
		})
	}
}
