package config

// Functions whose OpenTofu semantics no library offers (or where go-cty's stdlib function of the
// same name means something else: index, length, lookup, replace). Their behaviour follows
// OpenTofu's internal/lang/funcs; funcs_test.go checks them with OpenTofu's own cases.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/ianaindex"
)

// indexFunc returns the position of value in a list or tuple (go-cty's index looks an
// element up by key instead).
var indexFunc = function.New(&function.Spec{
	Description: "Returns the index of the first element of list equal to value.",
	Params: []function.Parameter{
		{Name: "list", Type: cty.DynamicPseudoType},
		{Name: "value", Type: cty.DynamicPseudoType},
	},
	Type: func(args []cty.Value) (cty.Type, error) {
		if t := args[0].Type(); !(t.IsListType() || t.IsTupleType()) && t != cty.DynamicPseudoType {
			return cty.NilType, function.NewArgErrorf(0, "argument must be a list or tuple")
		}
		return cty.Number, nil
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if !args[0].IsKnown() {
			return cty.UnknownVal(cty.Number), nil
		}
		if args[0].LengthInt() == 0 {
			return cty.NilVal, function.NewArgErrorf(0, "cannot search an empty list")
		}
		for it := args[0].ElementIterator(); it.Next(); {
			i, v := it.Element()
			eq, err := stdlib.Equal(v, args[1])
			if err != nil {
				return cty.NilVal, err
			}
			if !eq.IsKnown() {
				return cty.UnknownVal(cty.Number), nil
			}
			if eq.True() {
				return i, nil
			}
		}
		return cty.NilVal, function.NewArgErrorf(1, "item not found")
	},
})

// lengthFunc counts a collection's elements, a structural value's attributes or elements, or
// a string's grapheme clusters.
var lengthFunc = function.New(&function.Spec{
	Description: "Returns the number of elements, attributes or characters of value.",
	Params: []function.Parameter{
		{Name: "value", Type: cty.DynamicPseudoType, AllowDynamicType: true, AllowUnknown: true},
	},
	Type: func(args []cty.Value) (cty.Type, error) {
		t := args[0].Type()
		switch {
		case t == cty.String || t.IsCollectionType() || t.IsTupleType() || t.IsObjectType() || t == cty.DynamicPseudoType:
			return cty.Number, nil
		}
		return cty.NilType, function.NewArgErrorf(0, "argument must be a string, a collection type, or a structural type")
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v := args[0]
		switch {
		case v.Type() == cty.String:
			return stdlib.Strlen(v)
		case v.Type().IsTupleType() || v.Type().IsObjectType() || v.Type().IsListType() || v.Type().IsMapType() || v.Type().IsSetType():
			return v.Length(), nil
		}
		return cty.UnknownVal(cty.Number), nil
	},
})

// lookupFunc reads a map element or object attribute; without a default a missing key is an
// error.
var lookupFunc = function.New(&function.Spec{
	Description: "Returns the element of inputMap named key, or default when there is none.",
	Params: []function.Parameter{
		{Name: "inputMap", Type: cty.DynamicPseudoType},
		{Name: "key", Type: cty.String},
	},
	VarParam: &function.Parameter{Name: "default", Type: cty.DynamicPseudoType, AllowUnknown: true, AllowDynamicType: true, AllowNull: true},
	Type: func(args []cty.Value) (cty.Type, error) {
		if len(args) > 3 {
			return cty.NilType, fmt.Errorf("lookup() takes two or three arguments, got %d", len(args))
		}
		t := args[0].Type()
		switch {
		case t == cty.DynamicPseudoType:
			return cty.DynamicPseudoType, nil
		case t.IsObjectType():
			if !args[1].IsKnown() {
				return cty.DynamicPseudoType, nil
			}
			key := args[1].AsString()
			if t.HasAttribute(key) {
				return t.AttributeType(key), nil
			}
			if len(args) == 3 {
				return args[2].Type(), nil
			}
			return cty.NilType, function.NewArgErrorf(0, "the given object has no attribute %q", key)
		case t.IsMapType():
			if len(args) == 3 {
				if _, err := convert.Convert(args[2], t.ElementType()); err != nil {
					return cty.NilType, function.NewArgErrorf(2, "the default value must have the same type as the map elements")
				}
			}
			return t.ElementType(), nil
		}
		return cty.NilType, function.NewArgErrorf(0, "lookup() requires a map as the first argument")
	},
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		m, key := args[0], args[1].AsString()
		if !m.IsWhollyKnown() {
			return cty.UnknownVal(ret), nil
		}
		if m.Type().IsObjectType() {
			if m.Type().HasAttribute(key) {
				return m.GetAttr(key), nil
			}
		} else if m.HasIndex(cty.StringVal(key)) == cty.True {
			return m.Index(cty.StringVal(key)), nil
		}
		if len(args) == 3 {
			return convert.Convert(args[2], ret)
		}
		return cty.UnknownVal(ret), fmt.Errorf("lookup failed to find key %q", key)
	},
})

// replaceFunc treats a substring written /like this/ as a regular expression, as OpenTofu does.
var replaceFunc = function.New(&function.Spec{
	Description: "Replaces each occurrence of substring (or /regex/) in str with replace.",
	Params: []function.Parameter{
		{Name: "str", Type: cty.String}, {Name: "substr", Type: cty.String}, {Name: "replace", Type: cty.String},
	},
	Type: function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		sub := args[1].AsString()
		if len(sub) > 1 && sub[0] == '/' && sub[len(sub)-1] == '/' {
			return stdlib.RegexReplace(args[0], cty.StringVal(sub[1:len(sub)-1]), args[2])
		}
		return stdlib.Replace(args[0], args[1], args[2])
	},
})

func boolListFunc(desc string, empty bool, decisive bool) function.Function {
	return function.New(&function.Spec{
		Description: desc,
		Params:      []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
		Type:        function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			result := cty.BoolVal(empty)
			for it := args[0].ElementIterator(); it.Next(); {
				_, v := it.Element()
				switch {
				case !v.IsKnown():
					result = cty.UnknownVal(cty.Bool)
				case v.IsNull():
					if !empty {
						continue
					}
					return cty.False, nil
				case v.True() == decisive:
					return cty.BoolVal(decisive), nil
				}
			}
			return result, nil
		},
	})
}

var (
	allTrueFunc = boolListFunc("Reports whether every element is true (true for an empty list).", true, false)
	anyTrueFunc = boolListFunc("Reports whether any element is true (false for an empty list).", false, true)
)

var sumFunc = function.New(&function.Spec{
	Description: "Returns the sum of a list or set of numbers.",
	Params:      []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
	Type:        function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		l := args[0]
		t := l.Type()
		if !(t.IsListType() || t.IsSetType() || t.IsTupleType()) {
			return cty.NilVal, function.NewArgErrorf(0, "argument must be list, set, or tuple. Received %s", t.FriendlyName())
		}
		if !l.IsWhollyKnown() {
			return cty.UnknownVal(cty.Number), nil
		}
		if l.LengthInt() == 0 {
			return cty.NilVal, function.NewArgErrorf(0, "cannot sum an empty list")
		}
		sum := new(big.Float)
		for it := l.ElementIterator(); it.Next(); {
			_, v := it.Element()
			if v.IsNull() {
				return cty.NilVal, function.NewArgErrorf(0, "argument must be list, set, or tuple of number values")
			}
			n, err := convert.Convert(v, cty.Number)
			if err != nil {
				return cty.NilVal, function.NewArgErrorf(0, "argument must be list, set, or tuple of number values")
			}
			sum.Add(sum, n.AsBigFloat())
		}
		return cty.NumberVal(sum), nil
	},
})

var oneFunc = function.New(&function.Spec{
	Description: "Returns the only element of a list, set or tuple of zero or one elements (null for none).",
	Params:      []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
	Type: func(args []cty.Value) (cty.Type, error) {
		t := args[0].Type()
		switch {
		case t.IsListType() || t.IsSetType():
			return t.ElementType(), nil
		case t.IsTupleType():
			switch n := len(t.TupleElementTypes()); n {
			case 0:
				return cty.DynamicPseudoType, nil
			case 1:
				return t.TupleElementTypes()[0], nil
			}
		case t == cty.DynamicPseudoType:
			return cty.DynamicPseudoType, nil
		}
		return cty.NilType, function.NewArgErrorf(0, "must be a list, set, or tuple value with either zero or one elements")
	},
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		l := args[0]
		if !l.IsKnown() {
			return cty.UnknownVal(ret), nil
		}
		if l.IsNull() {
			return cty.NilVal, function.NewArgErrorf(0, "argument must not be null")
		}
		switch l.LengthInt() {
		case 0:
			return cty.NullVal(ret), nil
		case 1:
			it := l.ElementIterator()
			it.Next()
			_, v := it.Element()
			return v, nil
		}
		return cty.NilVal, function.NewArgErrorf(0, "must be a list, set, or tuple value with either zero or one elements")
	},
})

var matchkeysFunc = function.New(&function.Spec{
	Description: "Returns the elements of values whose corresponding keys element is in searchset.",
	Params: []function.Parameter{
		{Name: "values", Type: cty.List(cty.DynamicPseudoType)},
		{Name: "keys", Type: cty.List(cty.DynamicPseudoType)},
		{Name: "searchset", Type: cty.List(cty.DynamicPseudoType)},
	},
	Type: func(args []cty.Value) (cty.Type, error) {
		ty, _ := convert.UnifyUnsafe([]cty.Type{args[1].Type(), args[2].Type()})
		if ty == cty.NilType {
			return cty.NilType, errors.New("keys and searchset must be of the same type")
		}
		return args[0].Type(), nil
	},
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		if !args[0].IsKnown() {
			return cty.UnknownVal(ret), nil
		}
		if args[0].LengthInt() != args[1].LengthInt() {
			return cty.NilVal, errors.New("length of keys and values should be equal")
		}
		var out []cty.Value
		values := args[0].AsValueSlice()
		i := 0
		for it := args[1].ElementIterator(); it.Next(); i++ {
			_, key := it.Element()
			for sit := args[2].ElementIterator(); sit.Next(); {
				_, s := sit.Element()
				eq, err := stdlib.Equal(key, s)
				if err != nil {
					return cty.NilVal, err
				}
				if !eq.IsKnown() {
					return cty.UnknownVal(ret), nil
				}
				if eq.True() {
					out = append(out, values[i])
					break
				}
			}
		}
		if len(out) == 0 {
			return cty.ListValEmpty(ret.ElementType()), nil
		}
		return cty.ListVal(out), nil
	},
})

var transposeFunc = function.New(&function.Spec{
	Description: "Swaps the keys and list values of a map of lists of strings.",
	Params:      []function.Parameter{{Name: "values", Type: cty.Map(cty.List(cty.String))}},
	Type:        function.StaticReturnType(cty.Map(cty.List(cty.String))),
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		tmp := map[string][]string{}
		for it := args[0].ElementIterator(); it.Next(); {
			k, list := it.Element()
			if list.IsNull() {
				return cty.NilVal, errors.New("lists must not contain null values")
			}
			for lit := list.ElementIterator(); lit.Next(); {
				_, v := lit.Element()
				if v.IsNull() {
					return cty.NilVal, errors.New("lists must not contain null values")
				}
				tmp[v.AsString()] = append(tmp[v.AsString()], k.AsString())
			}
		}
		if len(tmp) == 0 {
			return cty.MapValEmpty(cty.List(cty.String)), nil
		}
		out := make(map[string]cty.Value, len(tmp))
		for k, vs := range tmp {
			l := make([]cty.Value, len(vs))
			for i, v := range vs {
				l[i] = cty.StringVal(v)
			}
			out[k] = cty.ListVal(l)
		}
		return cty.MapVal(out), nil
	},
})

func stringPredicate(desc, second string, f func(s, x string) bool) function.Function {
	return function.New(&function.Spec{
		Description: desc,
		Params:      []function.Parameter{{Name: "str", Type: cty.String}, {Name: second, Type: cty.String}},
		Type:        function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.BoolVal(f(args[0].AsString(), args[1].AsString())), nil
		},
	})
}

var (
	startsWithFunc  = stringPredicate("Reports whether str begins with prefix.", "prefix", strings.HasPrefix)
	endsWithFunc    = stringPredicate("Reports whether str ends with suffix.", "suffix", strings.HasSuffix)
	strContainsFunc = stringPredicate("Reports whether str contains substr.", "substr", strings.Contains)
)

var timeCmpFunc = function.New(&function.Spec{
	Description: "Compares two RFC 3339 timestamps: -1, 0 or 1.",
	Params:      []function.Parameter{{Name: "timestamp_a", Type: cty.String}, {Name: "timestamp_b", Type: cty.String}},
	Type:        function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		var ts [2]time.Time
		for i := range ts {
			t, err := time.Parse(time.RFC3339, args[i].AsString())
			if err != nil {
				return cty.NilVal, function.NewArgErrorf(i, "not a valid RFC3339 timestamp: %v", err)
			}
			ts[i] = t
		}
		return cty.NumberIntVal(int64(ts[0].Compare(ts[1]))), nil
	},
})

var urlDecodeFunc = function.New(&function.Spec{
	Description: "Decodes a URL query-encoded string.",
	Params:      []function.Parameter{{Name: "str", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		s, err := url.QueryUnescape(args[0].AsString())
		if err != nil {
			return cty.NilVal, fmt.Errorf("failed to decode URL '%s': %v", args[0].AsString(), err)
		}
		return cty.StringVal(s), nil
	},
})

func stringFunc(desc string, f func(string) (string, error)) function.Function {
	return function.New(&function.Spec{
		Description: desc,
		Params:      []function.Parameter{{Name: "str", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			s, err := f(args[0].AsString())
			if err != nil {
				return cty.UnknownVal(cty.String), err
			}
			return cty.StringVal(s), nil
		},
	})
}

var (
	base64GzipFunc = stringFunc("Gzips str and encodes the result in base64.", func(s string) (string, error) {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write([]byte(s)); err != nil {
			return "", fmt.Errorf("failed to write gzip raw data: %w", err)
		}
		if err := w.Close(); err != nil {
			return "", fmt.Errorf("failed to close gzip writer: %w", err)
		}
		return base64.StdEncoding.EncodeToString(b.Bytes()), nil
	})
	base64GunzipFunc = stringFunc("Decodes base64 and gunzips the result.", func(s string) (string, error) {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("failed to decode base64 data: %w", err)
		}
		r, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return "", fmt.Errorf("failed to gunzip bytestream: %w", err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			return "", fmt.Errorf("failed to read gunzip raw data: %w", err)
		}
		if !utf8.Valid(out) {
			return "", errors.New("the result of decoding the provided string is not valid UTF-8")
		}
		return string(out), nil
	})
	base64Sha256Func = stringFunc("Returns the base64 of the SHA-256 of str.", func(s string) (string, error) {
		h := sha256.Sum256([]byte(s))
		return base64.StdEncoding.EncodeToString(h[:]), nil
	})
	base64Sha512Func = stringFunc("Returns the base64 of the SHA-512 of str.", func(s string) (string, error) {
		h := sha512.Sum512([]byte(s))
		return base64.StdEncoding.EncodeToString(h[:]), nil
	})
)

// ianaEncoding looks up the character encoding named by argument 1 (an IANA name or alias).
func ianaEncoding(name cty.Value) (encoding.Encoding, error) {
	enc, err := ianaindex.IANA.Encoding(name.AsString())
	if err != nil || enc == nil {
		return nil, function.NewArgErrorf(1, "%q is not a supported IANA encoding name or alias", name.AsString())
	}
	return enc, nil
}

var textEncodeBase64Func = function.New(&function.Spec{
	Description: "Encodes str in the named character encoding, then in base64.",
	Params:      []function.Parameter{{Name: "string", Type: cty.String}, {Name: "encoding", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		enc, err := ianaEncoding(args[1])
		if err != nil {
			return cty.UnknownVal(cty.String), err
		}
		b, err := enc.NewEncoder().Bytes([]byte(args[0].AsString()))
		if err != nil {
			return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "the given string contains characters that cannot be represented in %s", args[1].AsString())
		}
		return cty.StringVal(base64.StdEncoding.EncodeToString(b)), nil
	},
})

var textDecodeBase64Func = function.New(&function.Spec{
	Description: "Decodes base64, then the named character encoding, into a string.",
	Params:      []function.Parameter{{Name: "source", Type: cty.String}, {Name: "encoding", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		enc, err := ianaEncoding(args[1])
		if err != nil {
			return cty.UnknownVal(cty.String), err
		}
		raw, err := base64.StdEncoding.DecodeString(args[0].AsString())
		if err != nil {
			return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "the given value is not a valid base64 string: %v", err)
		}
		out, err := enc.NewDecoder().Bytes(raw)
		if err != nil || !utf8.Valid(out) {
			return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "the given string contains symbols that are not defined for %s", args[1].AsString())
		}
		return cty.StringVal(string(out)), nil
	},
})

// markedValueParam is the one parameter of the functions that read or change marks: any value,
// marks included.
var markedValueParam = []function.Parameter{{Name: "value", Type: cty.DynamicPseudoType, AllowUnknown: true, AllowNull: true, AllowMarked: true, AllowDynamicType: true}}

func sameTypeAsArg(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil }

var sensitiveFunc = function.New(&function.Spec{
	Description: "Marks value sensitive.",
	Params:      markedValueParam,
	Type:        sameTypeAsArg,
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return args[0].Mark(Sensitive), nil
	},
})

var nonsensitiveFunc = function.New(&function.Spec{
	Description: "Removes the sensitive mark of value; an env() secret reference stays marked.",
	Params:      markedValueParam,
	Type:        sameTypeAsArg,
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v, marks := args[0].UnmarkDeep()
		if _, ok := marks[SecretRef]; ok {
			return cty.NilVal, function.NewArgErrorf(0, "an env() secret reference cannot be made nonsensitive")
		}
		delete(marks, Sensitive)
		return v.WithMarks(marks), nil
	},
})

var flipSensitiveFunc = function.New(&function.Spec{
	Description: "Makes a sensitive value nonsensitive and a nonsensitive value sensitive.",
	Params:      markedValueParam,
	Type:        sameTypeAsArg,
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		if args[0].HasMark(Sensitive) || args[0].HasMark(SecretRef) {
			return nonsensitiveFunc.Call(args)
		}
		return sensitiveFunc.Call(args)
	},
})

var isSensitiveFunc = function.New(&function.Spec{
	Description: "Reports whether value is sensitive.",
	Params:      markedValueParam,
	Type:        function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		_, marks := args[0].UnmarkDeep()
		_, s := marks[Sensitive]
		_, r := marks[SecretRef]
		return cty.BoolVal(s || r), nil
	},
})
