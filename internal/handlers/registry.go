package handlers

import (
	"encoding/json"
	"fmt"
	"sort"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/plans"
)

// Handler is a resource type's complete behaviour: decoding (config.Schema) and planning
// (plans.Handler).
type Handler interface {
	config.Schema
	plans.Handler
	Type() string
	// Modes says whether the type is a managed resource, a data source, or both.
	Modes() (managed, data bool)
	// Kind says which driver capabilities the executor operates the resource through.
	Kind() specs.Kind
	// DriverSpec returns the driver-neutral spec of the handler's stored attributes; refs
	// resolves references to other resources.
	DriverSpec(attrs json.RawMessage, refs specs.Refs) (specs.Desired, error)
}

// Registry maps resource types to handlers. It is an instance: callers build their own.
type Registry struct {
	byType map[string]Handler
}

var (
	_ config.Schemas = (*Registry)(nil)
	_ plans.Handlers = (*Registry)(nil)
)

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byType: map[string]Handler{}} }

// Builtin returns a new registry holding the five built-in types. nodeDrivers, when given,
// are the only drivers a sysbox_node may name (the driver registry's node drivers).
func Builtin(nodeDrivers ...string) *Registry {
	r := NewRegistry()
	for _, h := range []Handler{&Artifact{}, &Network{}, &Node{Drivers: nodeDrivers}, &Firewall{}, &Router{}} {
		if err := r.Register(h); err != nil {
			panic(err) // programming error: built-in types are distinct
		}
	}
	return r
}

// Register adds h; a duplicate type is an error.
func (r *Registry) Register(h Handler) error {
	if _, dup := r.byType[h.Type()]; dup {
		return fmt.Errorf("register handler %q: already registered", h.Type())
	}
	r.byType[h.Type()] = h
	return nil
}

func (r *Registry) lookup(mode addrs.ResourceMode, typ string) (Handler, bool) {
	h, ok := r.byType[typ]
	if !ok {
		return nil, false
	}
	m, d := h.Modes()
	if (mode == addrs.Managed && !m) || (mode == addrs.Data && !d) {
		return nil, false
	}
	return h, true
}

// Schema implements config.Schemas.
func (r *Registry) Schema(mode addrs.ResourceMode, typ string) (config.Schema, bool) {
	return r.lookup(mode, typ)
}

// Handler implements plans.Handlers.
func (r *Registry) Handler(mode addrs.ResourceMode, typ string) (plans.Handler, bool) {
	return r.lookup(mode, typ)
}

// Get returns the full handler.
func (r *Registry) Get(typ string) (Handler, bool) {
	h, ok := r.byType[typ]
	return h, ok
}

// Types lists the types available in mode, sorted.
func (r *Registry) Types(mode addrs.ResourceMode) []string {
	var out []string
	for t := range r.byType {
		if _, ok := r.lookup(mode, t); ok {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// compile-time checks that every built-in handler is complete.
var (
	_ Handler = (*Artifact)(nil)
	_ Handler = (*Network)(nil)
	_ Handler = (*Node)(nil)
	_ Handler = (*Firewall)(nil)
	_ Handler = (*Router)(nil)
)
