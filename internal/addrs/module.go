package addrs

import "strings"

// ModuleStep is one step of a module instance path: `module.NAME` plus its instance key.
type ModuleStep struct {
	Name string
	Key  InstanceKey
}

// String renders `module.NAME[KEY]`.
func (s ModuleStep) String() string { return "module." + s.Name + s.Key.String() }

// Module is a module instance path. The root module is the empty path.
type Module []ModuleStep

// RootModule is the root module instance.
var RootModule Module

// NewModule returns a module path holding a copy of steps.
func NewModule(steps ...ModuleStep) Module {
	if len(steps) == 0 {
		return nil
	}
	return append(Module(nil), steps...)
}

// IsRoot reports whether m is the root module.
func (m Module) IsRoot() bool { return len(m) == 0 }

// Child returns the path of module call name (instance key) inside m. m is not modified.
func (m Module) Child(name string, key InstanceKey) Module {
	out := make(Module, len(m), len(m)+1)
	copy(out, m)
	return append(out, ModuleStep{Name: name, Key: key})
}

// Parent returns the module containing m (root for root).
func (m Module) Parent() Module {
	if len(m) <= 1 {
		return nil
	}
	return NewModule(m[:len(m)-1]...)
}

// String renders `module.a.module.b["x"]`, or "" for the root module.
func (m Module) String() string {
	var b strings.Builder
	for i, s := range m {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// Equal reports whether m and o are the same module instance.
func (m Module) Equal(o Module) bool {
	if len(m) != len(o) {
		return false
	}
	for i := range m {
		if m[i] != o[i] {
			return false
		}
	}
	return true
}

// HasPrefix reports whether p is m or one of its ancestors.
func (m Module) HasPrefix(p Module) bool {
	return len(p) <= len(m) && m[:len(p)].Equal(p)
}

// Less orders module paths step by step (name, then key); a prefix sorts first.
func (m Module) Less(o Module) bool { return m.compare(o) < 0 }

func (m Module) compare(o Module) int {
	for i := 0; i < len(m) && i < len(o); i++ {
		if m[i].Name != o[i].Name {
			if m[i].Name < o[i].Name {
				return -1
			}
			return 1
		}
		if c := m[i].Key.compare(o[i].Key); c != 0 {
			return c
		}
	}
	switch {
	case len(m) < len(o):
		return -1
	case len(m) > len(o):
		return 1
	}
	return 0
}

// MarshalText renders the canonical form.
func (m Module) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses the canonical form.
func (m *Module) UnmarshalText(b []byte) error {
	v, err := ParseModule(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
