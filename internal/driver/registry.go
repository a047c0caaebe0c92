package driver

import (
	"fmt"
	"slices"
	"sort"
)

// Registry holds the drivers one runtime may use. It is an instance: tests build their own.
type Registry struct {
	drivers map[string]Driver
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{drivers: map[string]Driver{}} }

// Register adds d. A duplicate name is an error, and so is a declared capability that d does
// not implement.
func (r *Registry) Register(d Driver) error {
	desc := d.Descriptor()
	if desc.Name == "" {
		return fmt.Errorf("register driver: empty name")
	}
	if _, dup := r.drivers[desc.Name]; dup {
		return fmt.Errorf("register driver %q: already registered", desc.Name)
	}
	for _, c := range desc.Capabilities {
		if !implements(d, c) {
			return fmt.Errorf("register driver %q: declares capability %q but does not implement it", desc.Name, c)
		}
	}
	r.drivers[desc.Name] = d
	return nil
}

// Names lists registered drivers, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.drivers))
	for n := range r.drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Descriptors lists registered drivers' descriptors, sorted by name (for plan fingerprints).
func (r *Registry) Descriptors() []Descriptor {
	var out []Descriptor
	for _, n := range r.Names() {
		out = append(out, r.drivers[n].Descriptor())
	}
	return out
}

// Driver returns the named driver; an unknown name lists the known ones.
func (r *Registry) Driver(name string) (Driver, error) {
	d, ok := r.drivers[name]
	if !ok {
		return nil, &MissingCapabilityError{Driver: name, Known: r.Names()}
	}
	return d, nil
}

// Has reports whether the named driver declares capability c.
func (r *Registry) Has(name string, c Capability) bool {
	d, ok := r.drivers[name]
	return ok && slices.Contains(d.Descriptor().Capabilities, c)
}

// Require checks that the named driver declares every capability, for the resource at address.
func (r *Registry) Require(address, name string, caps ...Capability) error {
	d, err := r.Driver(name)
	if err != nil {
		e := err.(*MissingCapabilityError)
		e.Address = address
		return e
	}
	declared := d.Descriptor().Capabilities
	for _, c := range caps {
		if !slices.Contains(declared, c) {
			return &MissingCapabilityError{Address: address, Driver: name, Capability: c}
		}
	}
	return nil
}

// Get returns the named driver's capability c as interface T, e.g.
// Get[driver.Nodes](reg, "netns", driver.CapNodeLifecycle).
func Get[T any](r *Registry, name string, c Capability) (T, error) {
	var zero T
	if err := r.Require("", name, c); err != nil {
		return zero, err
	}
	impl, ok := r.drivers[name].(T)
	if !ok {
		return zero, &MissingCapabilityError{Driver: name, Capability: c}
	}
	return impl, nil
}

func implements(d Driver, c Capability) bool {
	switch c {
	case CapArtifact:
		_, ok := d.(Artifacts)
		return ok
	case CapManagedNetwork:
		_, ok := d.(Networks)
		return ok
	case CapNodeLifecycle:
		_, ok := d.(Nodes)
		return ok
	case CapNIC:
		_, ok := d.(NICs)
		return ok
	case CapNodeState:
		_, ok := d.(NodeState)
		return ok
	case CapGuestExec:
		_, ok := d.(GuestExec)
		return ok
	case CapPolicy:
		_, ok := d.(Policy)
		return ok
	case CapReset:
		_, ok := d.(Resetter)
		return ok
	case CapImport:
		// Import is one capability whatever a driver can adopt; the executor asks for the
		// interface of the resource's kind and reports a missing one by name.
		_, node := d.(Importer)
		_, network := d.(NetworkImporter)
		_, policy := d.(PolicyImporter)
		return node || network || policy
	case CapAudit:
		_, ok := d.(Auditor)
		return ok
	}
	return false
}
