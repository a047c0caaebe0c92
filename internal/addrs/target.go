package addrs

// TargetKind says what a Target selects.
type TargetKind uint8

const (
	// TargetModule selects every resource in a module instance and its descendants.
	TargetModule TargetKind = iota
	// TargetResource selects every instance of one resource.
	TargetResource
	// TargetInstance selects one resource instance.
	TargetInstance
)

// Target is an address used to select part of a topology: `-target ADDR` and `state mv OLD NEW`.
// `sysbox_node.web` selects all instances of the resource; `sysbox_node.web[0]` one instance;
// `module.lab` everything in that module instance.
type Target struct {
	Kind     TargetKind
	Module   Module
	Resource Resource    // TargetResource, TargetInstance
	Key      InstanceKey // TargetInstance
}

// ParseTarget parses a module path, a resource or a resource instance.
func ParseTarget(s string) (Target, error) {
	p, err := parse(s)
	if err != nil {
		return Target{}, err
	}
	t := Target{Module: p.module, Resource: p.resource, Key: p.key}
	switch {
	case !p.hasResource:
		t.Kind = TargetModule
	case p.hasKey:
		t.Kind = TargetInstance
	default:
		t.Kind = TargetResource
	}
	return t, nil
}

// String renders the canonical form.
func (t Target) String() string {
	switch t.Kind {
	case TargetModule:
		return t.Module.String()
	case TargetResource:
		return AbsResource{Module: t.Module, Resource: t.Resource}.String()
	}
	return Instance{Module: t.Module, Resource: t.Resource, Key: t.Key}.String()
}

// Contains reports whether the target selects instance a. As in OpenTofu, a module step
// without a key in a module target names the module call, so `module.lab` selects
// `module.lab[0]` and `module.lab["x"]` as well as an unrepeated `module.lab`.
func (t Target) Contains(a Instance) bool {
	switch t.Kind {
	case TargetModule:
		return stepsMatch(t.Module, a.Module)
	case TargetResource:
		return a.Module.Equal(t.Module) && a.Resource == t.Resource
	}
	return a.Module.Equal(t.Module) && a.Resource == t.Resource && a.Key == t.Key
}

// stepsMatch reports whether pattern's steps are a prefix of m's, a step without a key
// matching every instance of its call.
func stepsMatch(pattern, m Module) bool {
	if len(pattern) > len(m) {
		return false
	}
	for i, p := range pattern {
		if p.Name != m[i].Name || (!p.Key.IsNone() && p.Key != m[i].Key) {
			return false
		}
	}
	return true
}
