package states

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// encodePlain encodes a deep copy of st, which has no cache: the reference output.
func encodePlain(t *testing.T, st *State) []byte {
	t.Helper()
	b, err := Encode(st.Clone())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A cached encode writes what an uncached one writes, through every kind of change the
// executor makes and some it must not make (changes in place), and reuses what did not change.
func TestEncodeCacheMatchesUncached(t *testing.T) {
	st := sample()
	cache := NewEncodeCache()
	ctx := WithEncodeCache(context.Background(), cache)
	steps := []struct {
		name   string
		change func(st *State)
		reused int // resources whose encoding must come from the cache
	}{
		{"first encode", func(*State) {}, 0},
		{"nothing changed", func(*State) {}, 4},
		{"serial and outputs", func(st *State) {
			st.Serial++
			st.Outputs = map[string]Output{"x": {Value: json.RawMessage(`1`)}}
		}, 4},
		{"replaced", func(st *State) {
			c := st.Resources[1].Clone()
			c.Observation.Reason = "replaced"
			st.Set(c)
		}, 3},
		{"added and removed", func(st *State) {
			st.Set(res(st.Lineage, "sysbox_node.new"))
			st.Remove(st.Resources[0].Addr)
		}, 3},
		{"attribute byte changed in place", func(st *State) { st.Resources[2].Attributes[2] = 'H' }, 3},
		{"attachment address changed in place", func(st *State) { st.Resources[3].Attachments[0].IPv4[0] = "198.51.100.99/24" }, 3},
		{"private data changed in place", func(st *State) { st.Resources[0].Private.Data[2] = 'N' }, 3},
		{"dependency list replaced", func(st *State) {
			st.Resources[0].Dependencies = []addrs.Instance{addrs.MustParseInstance("sysbox_network.other")}
		}, 3},
		{"dependency list replaced by an equal one", func(st *State) {
			st.Resources[0].Dependencies = slices.Clone(st.Resources[0].Dependencies)
		}, 4},
		{"time zone changed in place", func(st *State) { st.Resources[1].CreatedAt = st.Resources[1].CreatedAt.In(time.FixedZone("X", 60)) }, 3},
	}
	for _, s := range steps {
		s.change(st)
		want := encodePlain(t, st)
		got, err := EncodeContext(ctx, st.ShallowCopy()) // as the executor's saver encodes
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: cached encode\n%s\nwant\n%s", s.name, got, want)
		}
		if _, err := Decode(got); err != nil {
			t.Fatalf("%s: decode: %v", s.name, err)
		}
		reused := 0
		for _, r := range st.Resources {
			if e := cache.m[r]; e != nil && e.round == cache.round {
				reused++
			}
		}
		if len(cache.m) != len(st.Resources) || reused != len(st.Resources) {
			t.Fatalf("%s: cache holds %d entries (%d current), want %d", s.name, len(cache.m), reused, len(st.Resources))
		}
		if hits := cache.hits; hits != s.reused {
			t.Errorf("%s: %d encodings reused, want %d", s.name, hits, s.reused)
		}
	}
}

// A failed encode leaves nothing behind that a later encode could trust.
func TestEncodeCacheAfterError(t *testing.T) {
	st := sample()
	ctx := WithEncodeCache(context.Background(), NewEncodeCache())
	bad := st.Resources[2].Clone()
	bad.Attributes = json.RawMessage(`{"a":`)
	st.Set(bad)
	if _, err := EncodeContext(ctx, st); err == nil {
		t.Fatal("invalid attributes: got nil error")
	}
	bad.Attributes = json.RawMessage(`{"a":1}`) // mended in place
	got, err := EncodeContext(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if want := encodePlain(t, st); !bytes.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// sameResource must look at every field: change any one leaf of a resource and it must say
// "changed". Walking the type by reflection makes a field added later fail here until
// sameResource compares it.
func TestSameResourceSeesEveryField(t *testing.T) {
	orig := res("l", "sysbox_node.web[0]")
	orig.Dependencies = []addrs.Instance{addrs.MustParseInstance("sysbox_network.lan")}
	orig.Attachments[0].Gateway = "198.51.100.1"
	orig.Observation.Reason = "r"
	if !sameResource(orig, orig.Clone()) {
		t.Fatal("a resource and its clone differ")
	}
	n := 0
	for i := 0; ; i++ {
		c := orig.Clone()
		path, ok := mutateLeaf(reflect.ValueOf(c).Elem(), "", new(int), i)
		if !ok {
			break
		}
		n++
		if sameResource(orig, c) {
			t.Errorf("changing %s: sameResource still says same", path)
		}
	}
	if n < 25 {
		t.Fatalf("walked %d leaves of Resource, expected at least 25", n)
	}
}

// mutateLeaf changes the target-th leaf under v (counting with seen) and returns its path.
func mutateLeaf(v reflect.Value, path string, seen *int, target int) (string, bool) {
	leaf := func(change func()) (string, bool) {
		if *seen == target {
			change()
			return path, true
		}
		*seen++
		return "", false
	}
	switch x := v.Addr().Interface().(type) {
	case *addrs.Instance:
		return leaf(func() { *x = addrs.MustParseInstance("sysbox_node.other") })
	case *time.Time:
		return leaf(func() { *x = x.Add(time.Nanosecond) })
	case *json.RawMessage:
		return leaf(func() { (*x)[0]++ }) // in place, same length
	case *substrate.Status:
		return leaf(func() { *x += "x" })
	}
	switch v.Kind() {
	case reflect.String:
		return leaf(func() { v.SetString(v.String() + "x") })
	case reflect.Int:
		return leaf(func() { v.SetInt(v.Int() + 1) })
	case reflect.Uint64:
		return leaf(func() { v.SetUint(v.Uint() + 1) })
	case reflect.Pointer:
		if p, ok := leaf(func() { v.SetZero() }); ok {
			return p + " (to nil)", true
		}
		return mutateLeaf(v.Elem(), path, seen, target)
	case reflect.Struct:
		for i := range v.NumField() {
			if p, ok := mutateLeaf(v.Field(i), path+"."+v.Type().Field(i).Name, seen, target); ok {
				return p, true
			}
		}
		return "", false
	case reflect.Slice:
		if p, ok := leaf(func() { v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem()))) }); ok {
			return p + " (appended)", true
		}
		for i := range v.Len() {
			if p, ok := mutateLeaf(v.Index(i), path+"[]", seen, target); ok {
				return p, true
			}
		}
		return "", false
	}
	panic("mutateLeaf: no rule for " + path + " of kind " + v.Kind().String() + ": teach the test and sameResource")
}
