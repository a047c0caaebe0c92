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

// Contains reports whether the target selects instance a.
func (t Target) Contains(a Instance) bool {
	switch t.Kind {
	case TargetModule:
		return a.Module.HasPrefix(t.Module)
	case TargetResource:
		return a.Module.Equal(t.Module) && a.Resource == t.Resource
	}
	return a.Module.Equal(t.Module) && a.Resource == t.Resource && a.Key == t.Key
}

// Move rewrites a for `state mv FROM TO`: if from contains a, it returns a with from's part
// replaced by to's, and true. from and to must be of the same kind (see CheckMove).
func Move(a Instance, from, to Target) (Instance, bool) {
	if from.Kind != to.Kind || !from.Contains(a) {
		return Instance{}, false
	}
	switch from.Kind {
	case TargetModule:
		m := NewModule(to.Module...)
		m = append(m, a.Module[len(from.Module):]...)
		return newInstance(m, a.Resource, a.Key), true
	case TargetResource:
		if from.Resource.Type != to.Resource.Type || from.Resource.Mode != to.Resource.Mode {
			return Instance{}, false
		}
		return newInstance(NewModule(to.Module...), to.Resource, a.Key), true
	}
	if from.Resource.Type != to.Resource.Type || from.Resource.Mode != to.Resource.Mode {
		return Instance{}, false
	}
	return newInstance(NewModule(to.Module...), to.Resource, to.Key), true
}

// CheckMove explains why `state mv FROM TO` is not allowed, or returns nil.
func CheckMove(from, to Target) error {
	if from.Kind != to.Kind {
		return &MoveError{From: from, To: to, Reason: "source and destination must both be modules, resources, or instances"}
	}
	if from.Kind != TargetModule && (from.Resource.Type != to.Resource.Type || from.Resource.Mode != to.Resource.Mode) {
		return &MoveError{From: from, To: to, Reason: "a move cannot change the resource type"}
	}
	if from.Kind == TargetModule && (from.Module.IsRoot() || to.Module.IsRoot()) {
		return &MoveError{From: from, To: to, Reason: "the root module cannot be moved"}
	}
	if from.Kind == TargetModule && to.Module.HasPrefix(from.Module) {
		return &MoveError{From: from, To: to, Reason: "a module cannot be moved into itself"}
	}
	return nil
}

// MoveError explains a refused `state mv`.
type MoveError struct {
	From, To Target
	Reason   string
}

func (e *MoveError) Error() string {
	return "move " + e.From.String() + " to " + e.To.String() + ": " + e.Reason
}
