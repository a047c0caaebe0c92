package fcsim

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// ContractYAML is Firecracker's published API contract (Swagger 2.0, v1.17), copied verbatim
// from the project's spec so the clone carries it.
//
//go:embed firecracker-api.yaml
var ContractYAML []byte

// contract is the loaded contract: the OpenAPI 3 document and a router over it.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

// loadContract loads the contract once per process; the document and router are only read
// after that.
var loadContract = sync.OnceValues(parseContract)

// parseContract converts the Swagger 2.0 contract to OpenAPI 3 and closes every object schema:
// Firecracker deserialises bodies with serde's deny_unknown_fields, so a field the contract does
// not define is refused there and must be refused here too.
func parseContract() (*contract, error) {
	var doc2 openapi2.T
	if err := openapi2.UnmarshalFromData(ContractYAML, &doc2); err != nil {
		return nil, fmt.Errorf("fcsim: contract: %w", err)
	}
	doc, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("fcsim: contract: to OpenAPI 3: %w", err)
	}
	seen := map[*openapi3.Schema]bool{}
	for _, s := range doc.Components.Schemas {
		closeSchema(s, seen)
	}
	for _, rb := range doc.Components.RequestBodies {
		if rb.Value != nil {
			for _, mt := range rb.Value.Content {
				closeSchema(mt.Schema, seen)
			}
		}
	}
	// The router matches servers too; the API socket has no host, so drop them.
	doc.Servers = nil
	if err := doc.Validate(openapi3.NewLoader().Context); err != nil {
		return nil, fmt.Errorf("fcsim: contract: invalid: %w", err)
	}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("fcsim: contract: router: %w", err)
	}
	return &contract{doc: doc, router: r}, nil
}

func closeSchema(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
		no := false
		s.AdditionalProperties.Has = &no
	}
	for _, p := range s.Properties {
		closeSchema(p, seen)
	}
	closeSchema(s.Items, seen)
	for _, l := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
		for _, x := range l {
			closeSchema(x, seen)
		}
	}
}
