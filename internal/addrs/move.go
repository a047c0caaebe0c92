package addrs

import (
	"fmt"
	"slices"
)

// MovePair is one instance re-addressed by `state mv`.
type MovePair struct {
	From, To Instance
}

// MoveError explains why `state mv FROM TO` is refused. Nothing is moved when it is returned.
type MoveError struct {
	From, To string
	Reason   string
}

func (e *MoveError) Error() string {
	return "state mv " + e.From + " " + e.To + ": " + e.Reason
}

// PlanMove computes what `state mv FROM TO` does to the instances in have (the state's
// addresses), or refuses the move as a whole:
//
//   - an instance moves to an instance (`web[0]` → `web["a"]`, `web` → `web[0]`, `web[0]` → `web`);
//   - a resource moves with all its instances, keys kept (`web` → `front` moves `web[0]`, `web[1]`);
//   - a module instance moves with everything in it and its descendants (`module.a["x"]` →
//     `module.b`); a module call without a key moves all its instances, keys kept (`module.a`
//     → `module.b` moves `module.a[0]` to `module.b[0]`).
//
// It refuses when nothing matches, when the kinds differ (a resource to an instance of another
// resource, a module to a resource), when the type would change, when several instances
// would land on one address, when a destination is already in have, and when a module would
// move into itself. The pairs are in the order of have.
func PlanMove(from, to Target, have []Instance) ([]MovePair, error) {
	refuse := func(format string, args ...any) ([]MovePair, error) {
		return nil, &MoveError{From: from.String(), To: to.String(), Reason: fmt.Sprintf(format, args...)}
	}
	if (from.Kind == TargetModule) != (to.Kind == TargetModule) {
		return refuse("a module moves only to a module, and a resource or instance only to a resource or instance")
	}
	if from.Kind != TargetModule && (from.Resource.Type != to.Resource.Type || from.Resource.Mode != to.Resource.Mode) {
		return refuse("the resource type would change from %s to %s; a different type is a different object (destroy and create it instead)",
			typeName(from.Resource), typeName(to.Resource))
	}
	if from.Kind == TargetModule {
		if from.Module.IsRoot() || to.Module.IsRoot() {
			return refuse("the root module cannot be moved")
		}
		if stepsMatch(from.Module, to.Module) || stepsMatch(to.Module, from.Module) {
			return refuse("a module cannot be moved into itself or its own parent")
		}
	}
	var pairs []MovePair
	for _, a := range have {
		if dst, ok := moveOne(a, from, to); ok {
			pairs = append(pairs, MovePair{From: a, To: dst})
		}
	}
	if len(pairs) == 0 {
		if from.Kind == TargetModule {
			return refuse("no resource in %s in state", from)
		}
		return refuse("no resource %s in state", from)
	}
	// resource → instance is an instance move when the resource has only its single instance
	if from.Kind == TargetResource && to.Kind == TargetInstance {
		if len(pairs) > 1 || !pairs[0].From.Key.IsNone() {
			return refuse("%s has %d instance(s) (%s); move a resource to a resource, or one instance to an instance", from, len(pairs), pairs[0].From)
		}
		pairs[0].To = newInstance(NewModule(to.Module...), to.Resource, to.Key)
	}
	if from.Kind == TargetModule && !to.Module[len(to.Module)-1].Key.IsNone() && len(moduleInstances(pairs, len(from.Module))) > 1 {
		return refuse("%s has several instances; %s names one", from, to)
	}
	moving := make(map[string]bool, len(pairs))
	for _, p := range pairs {
		moving[p.From.UniqueKey()] = true
	}
	landing := make(map[string]Instance, len(pairs))
	for _, p := range pairs {
		k := p.To.UniqueKey()
		if q, dup := landing[k]; dup {
			return refuse("%s and %s would both become %s", q, p.From, p.To)
		}
		landing[k] = p.From
		if p.From.Equal(p.To) {
			return refuse("source and destination are the same address %s", p.To)
		}
	}
	for _, a := range have {
		if moving[a.UniqueKey()] {
			continue
		}
		if _, taken := landing[a.UniqueKey()]; taken {
			return refuse("%s already exists in state", a)
		}
		// a resource moves only to a resource with no instances yet
		if to.Kind == TargetResource && from.Kind == TargetResource && a.Module.Equal(to.Module) && a.Resource == to.Resource {
			return refuse("%s already exists in state", a)
		}
	}
	return pairs, nil
}

// moveOne returns a's address after moving from to to, if from selects a.
func moveOne(a Instance, from, to Target) (Instance, bool) {
	switch from.Kind {
	case TargetModule:
		n := len(from.Module)
		// only the last step of the source may stand for every instance of its call
		if len(a.Module) < n || !a.Module[:n-1].Equal(from.Module[:n-1]) || !stepsMatch(from.Module[n-1:], a.Module[n-1:n]) {
			return Instance{}, false
		}
		m := NewModule(to.Module...)
		if from.Module[n-1].Key.IsNone() && to.Module[len(m)-1].Key.IsNone() {
			m[len(m)-1].Key = a.Module[n-1].Key // the whole call moves: keys kept
		}
		m = append(m, a.Module[n:]...)
		return newInstance(m, a.Resource, a.Key), true
	case TargetResource:
		if !a.Module.Equal(from.Module) || a.Resource != from.Resource {
			return Instance{}, false
		}
		key := a.Key
		if to.Kind == TargetInstance {
			key = to.Key
		}
		return newInstance(NewModule(to.Module...), to.Resource, key), true
	}
	if !from.Contains(a) {
		return Instance{}, false
	}
	return newInstance(NewModule(to.Module...), to.Resource, to.Key), true
}

// moduleInstances returns the distinct module instances at depth n the pairs move from.
func moduleInstances(pairs []MovePair, n int) []string {
	var out []string
	for _, p := range pairs {
		s := p.From.Module[:n].String()
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func typeName(r Resource) string {
	if r.Mode == Data {
		return "data." + r.Type
	}
	return r.Type
}
