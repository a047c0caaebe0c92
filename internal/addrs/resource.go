package addrs

// ResourceMode distinguishes managed resources from data sources.
type ResourceMode uint8

const (
	// Managed is a `resource` block.
	Managed ResourceMode = iota
	// Data is a `data` block; its address is prefixed `data.`.
	Data
)

// String names the mode.
func (m ResourceMode) String() string {
	if m == Data {
		return "data"
	}
	return "managed"
}

// Resource is a resource block's address within its module: mode, type and name.
type Resource struct {
	Mode ResourceMode
	Type string
	Name string
}

// String renders `TYPE.NAME` or `data.TYPE.NAME`.
func (r Resource) String() string {
	if r.Mode == Data {
		return "data." + r.Type + "." + r.Name
	}
	return r.Type + "." + r.Name
}

func (r Resource) compare(o Resource) int {
	switch {
	case r.Mode != o.Mode:
		if r.Mode < o.Mode {
			return -1
		}
		return 1
	case r.Type != o.Type:
		if r.Type < o.Type {
			return -1
		}
		return 1
	case r.Name != o.Name:
		if r.Name < o.Name {
			return -1
		}
		return 1
	}
	return 0
}

// AbsResource is a resource in a particular module instance, all of its instances together.
type AbsResource struct {
	Module   Module
	Resource Resource
}

// NewAbsResource returns an AbsResource holding a copy of module.
func NewAbsResource(module Module, r Resource) AbsResource {
	return AbsResource{Module: NewModule(module...), Resource: r}
}

// Instance returns the address of instance key of r.
func (r AbsResource) Instance(key InstanceKey) Instance {
	return newInstance(NewModule(r.Module...), r.Resource, key)
}

// String renders `module.a.TYPE.NAME`.
func (r AbsResource) String() string {
	if r.Module.IsRoot() {
		return r.Resource.String()
	}
	return r.Module.String() + "." + r.Resource.String()
}

// Equal reports whether r and o name the same resource.
func (r AbsResource) Equal(o AbsResource) bool {
	return r.Resource == o.Resource && r.Module.Equal(o.Module)
}

// Less is a total order consistent with Equal.
func (r AbsResource) Less(o AbsResource) bool {
	if c := r.Module.compare(o.Module); c != 0 {
		return c < 0
	}
	return r.Resource.compare(o.Resource) < 0
}

// UniqueKey returns a comparable key, equal exactly when Equal is true.
func (r AbsResource) UniqueKey() string { return r.String() }

// MarshalText renders the canonical form.
func (r AbsResource) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses the canonical form.
func (r *AbsResource) UnmarshalText(b []byte) error {
	v, err := ParseAbsResource(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Instance is THE canonical address of one resource instance:
// `module.segment["red"].sysbox_node.target[1]`, `data.sysbox_artifact.kernel`.
//
// Instances made by this package (NewInstance, AbsResource.Instance, WithKey, ParseInstance,
// UnmarshalText, Move) carry their canonical string, computed once: String and UniqueKey of
// such a value (and of its copies) do not build it again. The cache is checked against the
// fields, so a value whose fields were reassigned, or one written as a literal, still renders
// correctly (by building the string each time); steps of Module must not be modified in place.
type Instance struct {
	Module   Module
	Resource Resource
	Key      InstanceKey

	c *instanceCache // canonical string of (Module, Resource, Key) at construction; may be nil
}

// instanceCache is an Instance's canonical string with the fields it was built from. mod shares
// the Instance's module backing array, so that a copy of the Instance is recognised by identity.
type instanceCache struct {
	s   string
	mod Module
	res Resource
	key InstanceKey
}

// newInstance returns an Instance of module (which the caller hands over: it is not copied)
// with its canonical string computed.
func newInstance(module Module, r Resource, key InstanceKey) Instance {
	var buf [128]byte
	s := string(appendInstance(buf[:0], module, r, key))
	return Instance{Module: module, Resource: r, Key: key, c: &instanceCache{s: s, mod: module, res: r, key: key}}
}

// NewInstance returns an Instance holding a copy of module.
func NewInstance(module Module, r Resource, key InstanceKey) Instance {
	return newInstance(NewModule(module...), r, key)
}

// String renders the canonical form.
func (a Instance) String() string {
	if c := a.c; c != nil && c.res == a.Resource && c.key == a.Key && sameModule(c.mod, a.Module) {
		return c.s
	}
	var buf [128]byte
	return string(appendInstance(buf[:0], a.Module, a.Resource, a.Key))
}

// sameModule reports whether m and o are the same slice (same length and backing array).
func sameModule(m, o Module) bool {
	return len(m) == len(o) && (len(m) == 0 || &m[0] == &o[0])
}

// appendInstance appends the canonical form of an instance address to b.
func appendInstance(b []byte, m Module, r Resource, k InstanceKey) []byte {
	for _, st := range m {
		b = append(b, "module."...)
		b = append(b, st.Name...)
		b = st.Key.appendTo(b)
		b = append(b, '.')
	}
	if r.Mode == Data {
		b = append(b, "data."...)
	}
	b = append(b, r.Type...)
	b = append(b, '.')
	b = append(b, r.Name...)
	return k.appendTo(b)
}

// Equal reports whether a and o are the same instance.
func (a Instance) Equal(o Instance) bool {
	return a.Resource == o.Resource && a.Key == o.Key && a.Module.Equal(o.Module)
}

// Less is a total order consistent with Equal: module path, then mode (managed before data),
// type, name, key.
func (a Instance) Less(o Instance) bool { return a.Compare(o) < 0 }

// Compare returns -1, 0 or +1 (for slices.SortFunc).
func (a Instance) Compare(o Instance) int {
	if c := a.Module.compare(o.Module); c != 0 {
		return c
	}
	if c := a.Resource.compare(o.Resource); c != 0 {
		return c
	}
	return a.Key.compare(o.Key)
}

// UniqueKey returns a comparable key, equal exactly when Equal is true (the canonical string).
func (a Instance) UniqueKey() string { return a.String() }

// ContainingResource returns the resource (all instances) a belongs to.
func (a Instance) ContainingResource() AbsResource {
	return AbsResource{Module: NewModule(a.Module...), Resource: a.Resource}
}

// WithKey returns a copy of a with another instance key.
func (a Instance) WithKey(k InstanceKey) Instance {
	return newInstance(NewModule(a.Module...), a.Resource, k)
}

// MarshalText renders the canonical form, so an Instance serialises as its string in JSON.
func (a Instance) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText parses the canonical form.
func (a *Instance) UnmarshalText(b []byte) error {
	v, err := ParseInstance(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
