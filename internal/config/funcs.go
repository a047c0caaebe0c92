package config

import (
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	"zyvor.dev/sysbox/internal/secrets"
)

// Sensitive is the cty mark carried by env() references and by values of sensitive variables.
const Sensitive = sensitiveMark("sensitive")

type sensitiveMark string

var (
	stdOnce sync.Once
	stdMap  map[string]function.Function
)

// staticFuncs is the cty standard library plus cidr and type-conversion functions; it does no I/O.
func staticFuncs() map[string]function.Function {
	stdOnce.Do(func() {
		stdMap = map[string]function.Function{
			"abs": stdlib.AbsoluteFunc, "ceil": stdlib.CeilFunc, "chomp": stdlib.ChompFunc,
			"chunklist": stdlib.ChunklistFunc, "coalesce": stdlib.CoalesceFunc, "coalescelist": stdlib.CoalesceListFunc,
			"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
			"csvdecode": stdlib.CSVDecodeFunc, "distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc,
			"flatten": stdlib.FlattenFunc, "floor": stdlib.FloorFunc, "format": stdlib.FormatFunc,
			"formatdate": stdlib.FormatDateFunc, "formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc,
			"index": stdlib.IndexFunc, "join": stdlib.JoinFunc, "jsondecode": stdlib.JSONDecodeFunc,
			"jsonencode": stdlib.JSONEncodeFunc, "keys": stdlib.KeysFunc, "length": stdlib.LengthFunc,
			"log": stdlib.LogFunc, "lookup": stdlib.LookupFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc,
			"merge": stdlib.MergeFunc, "min": stdlib.MinFunc, "parseint": stdlib.ParseIntFunc, "pow": stdlib.PowFunc,
			"range": stdlib.RangeFunc, "regex": stdlib.RegexFunc, "regexall": stdlib.RegexAllFunc,
			"replace": stdlib.ReplaceFunc, "reverse": stdlib.ReverseListFunc, "setintersection": stdlib.SetIntersectionFunc,
			"setproduct": stdlib.SetProductFunc, "setsubtract": stdlib.SetSubtractFunc, "setunion": stdlib.SetUnionFunc,
			"signum": stdlib.SignumFunc, "slice": stdlib.SliceFunc, "sort": stdlib.SortFunc, "split": stdlib.SplitFunc,
			"strrev": stdlib.ReverseFunc, "substr": stdlib.SubstrFunc, "timeadd": stdlib.TimeAddFunc, "title": stdlib.TitleFunc,
			"trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc, "trimspace": stdlib.TrimSpaceFunc,
			"trimsuffix": stdlib.TrimSuffixFunc, "upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc,
			"zipmap": stdlib.ZipmapFunc, "strlen": stdlib.StrlenFunc,
			"tostring": stdlib.MakeToFunc(cty.String), "tonumber": stdlib.MakeToFunc(cty.Number),
			"tobool": stdlib.MakeToFunc(cty.Bool), "toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
			"tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
			"try": tryfunc.TryFunc, "can": tryfunc.CanFunc,
			"cidrhost": cidrHostFunc, "cidrsubnet": cidrSubnetFunc, "cidrnetmask": cidrNetmaskFunc,
		}
	})
	return stdMap
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// funcsFor returns the function table for a module directory: the static library plus env,
// env_optional and file. onEnv records each env() reference.
func (e *evaluator) funcsFor(dir string) map[string]function.Function {
	if f, ok := e.funcCache[dir]; ok {
		return f
	}
	out := make(map[string]function.Function, len(staticFuncs())+3)
	for k, v := range staticFuncs() {
		out[k] = v
	}
	out["env"] = function.New(&function.Spec{
		Description: "Returns a secret reference secret://env/NAME; the value is read only at execution.",
		Params:      []function.Parameter{{Name: "name", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			name := args[0].AsString()
			if !envNameRE.MatchString(name) {
				return cty.NilVal, function.NewArgErrorf(0, "%q is not a valid environment variable name", name)
			}
			ref := secrets.EnvRef(name)
			e.mu.Lock()
			e.secretRefs[ref.String()] = ref
			e.mu.Unlock()
			return cty.StringVal(ref.String()).Mark(SecretRef), nil
		},
	})
	out["env_optional"] = function.New(&function.Spec{
		Description: "Returns the environment variable's value, or null when unset. Not for secrets.",
		Params:      []function.Parameter{{Name: "name", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			name := args[0].AsString()
			if !envNameRE.MatchString(name) {
				return cty.NilVal, function.NewArgErrorf(0, "%q is not a valid environment variable name", name)
			}
			v, ok := e.lookupEnv(name)
			e.mu.Lock()
			if ok {
				e.envRead[name] = v
			} else {
				e.envRead[name] = "\x00unset"
			}
			e.mu.Unlock()
			if !ok {
				return cty.NullVal(cty.String), nil
			}
			return cty.StringVal(v), nil
		},
	})
	out["file"] = function.New(&function.Spec{
		Description: "Reads a UTF-8 file relative to the module directory.",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p := args[0].AsString()
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return cty.NilVal, function.NewArgErrorf(0, "read %s: %v", p, err)
			}
			if !utf8.Valid(b) {
				return cty.NilVal, function.NewArgErrorf(0, "%s is not valid UTF-8", p)
			}
			return cty.StringVal(string(b)), nil
		},
	})
	e.funcCache[dir] = out
	return out
}

var cidrHostFunc = function.New(&function.Spec{
	Description: "Calculates the address of host number hostnum within prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}, {Name: "hostnum", Type: cty.Number}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		p, err := netip.ParsePrefix(args[0].AsString())
		if err != nil {
			return cty.NilVal, function.NewArgErrorf(0, "invalid CIDR: %v", err)
		}
		n, acc := args[1].AsBigFloat().Int64()
		if acc != 0 {
			return cty.NilVal, function.NewArgErrorf(1, "hostnum must be a whole number")
		}
		a, err := hostAddr(p.Masked(), n)
		if err != nil {
			return cty.NilVal, function.NewArgError(1, err)
		}
		return cty.StringVal(a.String()), nil
	},
})

var cidrNetmaskFunc = function.New(&function.Spec{
	Description: "Returns the dotted netmask of an IPv4 prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		p, err := netip.ParsePrefix(args[0].AsString())
		if err != nil || !p.Addr().Is4() {
			return cty.NilVal, function.NewArgErrorf(0, "invalid IPv4 CIDR %q", args[0].AsString())
		}
		m := ^uint32(0) << (32 - p.Bits())
		if p.Bits() == 0 {
			m = 0
		}
		return cty.StringVal(fmt.Sprintf("%d.%d.%d.%d", m>>24, m>>16&255, m>>8&255, m&255)), nil
	},
})

var cidrSubnetFunc = function.New(&function.Spec{
	Description: "Calculates subnet netnum of newbits additional bits within prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}, {Name: "newbits", Type: cty.Number}, {Name: "netnum", Type: cty.Number}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		p, err := netip.ParsePrefix(args[0].AsString())
		if err != nil {
			return cty.NilVal, function.NewArgErrorf(0, "invalid CIDR: %v", err)
		}
		nb, _ := args[1].AsBigFloat().Int64()
		num, _ := args[2].AsBigFloat().Int64()
		bits := p.Bits() + int(nb)
		if nb < 0 || bits > p.Addr().BitLen() {
			return cty.NilVal, function.NewArgErrorf(1, "newbits %d would make a prefix longer than /%d", nb, p.Addr().BitLen())
		}
		if num < 0 || (nb < 63 && num >= int64(1)<<nb) {
			return cty.NilVal, function.NewArgErrorf(2, "netnum %d does not fit in %d bits", num, nb)
		}
		base := p.Masked().Addr().AsSlice()
		hostBits := p.Addr().BitLen() - bits
		addBits(base, uint64(num), hostBits)
		a, _ := netip.AddrFromSlice(base)
		return cty.StringVal(netip.PrefixFrom(a, bits).String()), nil
	},
})

// addBits adds v<<shift to the big-endian address b in place (overflow is cut off).
func addBits(b []byte, v uint64, shift int) {
	x := new(big.Int).SetBytes(b)
	x.Add(x, new(big.Int).Lsh(new(big.Int).SetUint64(v), uint(shift)))
	out := x.Bytes()
	for i := range b {
		b[i] = 0
	}
	if len(out) > len(b) {
		out = out[len(out)-len(b):]
	}
	copy(b[len(b)-len(out):], out)
}

func hostAddr(p netip.Prefix, n int64) (netip.Addr, error) {
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits < 63 {
		size := int64(1) << hostBits
		if n >= size || n < -size {
			return netip.Addr{}, fmt.Errorf("prefix %s has no host number %d", p, n)
		}
		if n < 0 {
			n += size
		}
	} else if n < 0 {
		return netip.Addr{}, fmt.Errorf("negative host numbers are not supported for %s", p)
	}
	b := p.Addr().AsSlice()
	addBits(b, uint64(n), 0)
	a, _ := netip.AddrFromSlice(b)
	return a, nil
}
