package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
)

// openAPIDoc is the API's document parsed and validated as OpenAPI (the tests check every
// response against it).
func openAPIDoc() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPIYAML())
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
}

// The served JSON is the YAML document, valid OpenAPI, and says what the YAML says.
func TestOpenAPIJSONIsTheDocument(t *testing.T) {
	fromYAML, err := openAPIDoc()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	served, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := openapi3.NewLoader().LoadFromData(served)
	if err != nil {
		t.Fatalf("served JSON does not load as OpenAPI: %v", err)
	}
	if err := fromJSON.Validate(context.Background()); err != nil {
		t.Fatalf("served JSON is not valid OpenAPI: %v", err)
	}
	a, _ := json.Marshal(fromYAML)
	b, _ := json.Marshal(fromJSON)
	var av, bv any
	_ = json.Unmarshal(a, &av)
	_ = json.Unmarshal(b, &bv)
	if diff := cmp.Diff(av, bv); diff != "" {
		t.Fatalf("served JSON differs from openapi.yaml (-yaml +json):\n%s", diff)
	}
	if len(fromJSON.Paths.Map()) < 10 {
		t.Fatalf("served document has %d paths", len(fromJSON.Paths.Map()))
	}
}

// TestOpenAPINamesTheEventKinds: the document names every event kind the agent sends, where an
// event is read and where it is sent.
func TestOpenAPINamesTheEventKinds(t *testing.T) {
	doc, err := openAPIDoc()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	read := doc.Components.Schemas["Event"].Value.Properties["kind"].Value.Description
	sent := doc.Components.Schemas["EventBatch"].Value.Properties["events"].Value.Items.Value.Properties["kind"].Value.Description
	for _, kind := range []string{"progress", "stderr", "checkpoint"} {
		if !strings.Contains(read, kind) || !strings.Contains(sent, kind) {
			t.Errorf("event kind %q: Event.kind says %q, EventBatch's kind says %q; want it named in both", kind, read, sent)
		}
	}
}
