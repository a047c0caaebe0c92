package config

import (
	"fmt"
	"regexp"
	"sync"

	ctyfcidr "github.com/hashicorp/go-cty-funcs/cidr"
	"github.com/hashicorp/go-cty-funcs/collection"
	"github.com/hashicorp/go-cty-funcs/crypto"
	"github.com/hashicorp/go-cty-funcs/encoding"
	"github.com/hashicorp/go-cty-funcs/filesystem"
	ctyuuid "github.com/hashicorp/go-cty-funcs/uuid"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	"zyvor.dev/sysbox/internal/secrets"
)

// Sensitive is the cty mark carried by env() references and by values of sensitive variables.
const Sensitive = sensitiveMark("sensitive")

type sensitiveMark string

// coreNamespace is OpenTofu's namespace for built-in functions: core::abs is abs.
const coreNamespace = "core::"

var (
	stdOnce sync.Once
	stdMap  map[string]function.Function
)

// staticFuncs is every function that does no I/O, with OpenTofu's names and semantics. Where a
// library function matches OpenTofu it is used as is; funcs_tofu.go and funcs_cidr.go hold the
// rest. docs/sysbox-language.md lists where each one comes from.
func staticFuncs() map[string]function.Function {
	stdOnce.Do(func() {
		stdMap = map[string]function.Function{
			// go-cty stdlib
			"abs": stdlib.AbsoluteFunc, "ceil": stdlib.CeilFunc, "chomp": stdlib.ChompFunc,
			"chunklist": stdlib.ChunklistFunc, "coalescelist": stdlib.CoalesceListFunc,
			"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
			"csvdecode": stdlib.CSVDecodeFunc, "distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc,
			"flatten": stdlib.FlattenFunc, "floor": stdlib.FloorFunc, "format": stdlib.FormatFunc,
			"formatdate": stdlib.FormatDateFunc, "formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc,
			"join": stdlib.JoinFunc, "jsondecode": stdlib.JSONDecodeFunc,
			"jsonencode": stdlib.JSONEncodeFunc, "keys": stdlib.KeysFunc,
			"log": stdlib.LogFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc,
			"merge": stdlib.MergeFunc, "min": stdlib.MinFunc, "parseint": stdlib.ParseIntFunc, "pow": stdlib.PowFunc,
			"range": stdlib.RangeFunc, "regex": stdlib.RegexFunc, "regexall": stdlib.RegexAllFunc,
			"reverse": stdlib.ReverseListFunc, "setintersection": stdlib.SetIntersectionFunc,
			"setproduct": stdlib.SetProductFunc, "setsubtract": stdlib.SetSubtractFunc, "setunion": stdlib.SetUnionFunc,
			"signum": stdlib.SignumFunc, "slice": stdlib.SliceFunc, "sort": stdlib.SortFunc, "split": stdlib.SplitFunc,
			"strrev": stdlib.ReverseFunc, "substr": stdlib.SubstrFunc, "timeadd": stdlib.TimeAddFunc, "title": stdlib.TitleFunc,
			"trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc, "trimspace": stdlib.TrimSpaceFunc,
			"trimsuffix": stdlib.TrimSuffixFunc, "upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc,
			"zipmap": stdlib.ZipmapFunc,
			// HCL
			"try": tryfunc.TryFunc, "can": tryfunc.CanFunc,
			// go-cty-yaml
			"yamldecode": ctyyaml.YAMLDecodeFunc, "yamlencode": ctyyaml.YAMLEncodeFunc,
			// go-cty-funcs
			"coalesce":     collection.CoalesceFunc,
			"base64decode": encoding.Base64DecodeFunc, "base64encode": encoding.Base64EncodeFunc,
			"urlencode": encoding.URLEncodeFunc,
			"md5":       crypto.Md5Func, "sha1": crypto.Sha1Func, "sha256": crypto.Sha256Func, "sha512": crypto.Sha512Func,
			"rsadecrypt": crypto.RsaDecryptFunc,
			"uuidv5":     ctyuuid.V5Func,
			"basename":   filesystem.BasenameFunc, "dirname": filesystem.DirnameFunc,
			"cidrsubnets": withLenientPrefix(ctyfcidr.SubnetsFunc),
			"cidrhost":    cidrHostFunc,
			"cidrsubnet":  cidrSubnetFunc,
			// funcs_cidr.go, funcs_tofu.go
			"cidrnetmask": cidrNetmaskFunc, "cidrcontains": cidrContainsFunc,
			"index": indexFunc, "length": lengthFunc, "lookup": lookupFunc, "replace": replaceFunc,
			"alltrue": allTrueFunc, "anytrue": anyTrueFunc, "sum": sumFunc, "one": oneFunc,
			"matchkeys": matchkeysFunc, "transpose": transposeFunc,
			"startswith": startsWithFunc, "endswith": endsWithFunc, "strcontains": strContainsFunc,
			"timecmp": timeCmpFunc, "urldecode": urlDecodeFunc,
			"base64gzip": base64GzipFunc, "base64gunzip": base64GunzipFunc,
			"base64sha256": base64Sha256Func, "base64sha512": base64Sha512Func,
			"textencodebase64": textEncodeBase64Func, "textdecodebase64": textDecodeBase64Func,
			"sensitive": sensitiveFunc, "nonsensitive": nonsensitiveFunc, "issensitive": isSensitiveFunc,
			"flip_sensitive": flipSensitiveFunc,
			"tostring":       stdlib.MakeToFunc(cty.String), "tonumber": stdlib.MakeToFunc(cty.Number),
			"tobool": stdlib.MakeToFunc(cty.Bool), "toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
			"tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		}
		for name, why := range refusedFuncs {
			stdMap[name] = refusedFunc(name, why)
		}
	})
	return stdMap
}

// refusedFuncs are OpenTofu functions sysbox does not offer, with the reason: calling one is an
// error naming it, never a different result.
var refusedFuncs = map[string]string{
	"timestamp":     "its result changes between plan and apply, so every plan would differ",
	"plantimestamp": "its result changes with every plan, so no plan would ever be empty",
	"uuid":          "its result changes between plan and apply; use uuidv5 with a fixed name",
	"bcrypt":        "its salt is random, so the result changes between plan and apply",
	"abspath":       "its result depends on the host's working directory; use path.module or path.root",
	"pathexpand":    "its result depends on the host user's home directory",
	"type":          "OpenTofu offers it only in the console",
	"list":          "OpenTofu removed it; use tolist or a [ ] expression",
	"map":           "OpenTofu removed it; use tomap or a { } expression",
}

func refusedFunc(name, why string) function.Function {
	return function.New(&function.Spec{
		Description: "Not offered by sysbox: " + why + ".",
		VarParam:    &function.Parameter{Name: "args", Type: cty.DynamicPseudoType, AllowNull: true, AllowUnknown: true, AllowDynamicType: true, AllowMarked: true},
		Type: func([]cty.Value) (cty.Type, error) {
			return cty.NilType, fmt.Errorf("sysbox does not offer the function %s: %s", name, why)
		},
		Impl: func([]cty.Value, cty.Type) (cty.Value, error) {
			return cty.NilVal, fmt.Errorf("sysbox does not offer the function %s: %s", name, why)
		},
	})
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// funcsFor returns the function table for a module directory: the static library plus env,
// env_optional, and the file functions confined to the topology directory. Every name is also
// offered as core::NAME, as OpenTofu does.
func (e *evaluator) funcsFor(dir string) map[string]function.Function {
	if f, ok := e.funcCache[dir]; ok {
		return f
	}
	out := make(map[string]function.Function, 2*(len(staticFuncs())+16))
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
	fs := fileScope{root: e.rootDir, dir: dir}
	for k, v := range fs.funcs(out) {
		out[k] = v
	}
	for k, v := range out {
		out[coreNamespace+k] = v
	}
	e.funcCache[dir] = out
	return out
}
