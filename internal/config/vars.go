package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// InputValue is a root variable value from outside the configuration.
type InputValue struct {
	Value   cty.Value // when !IsRaw
	Raw     string    // -var and SYSBOX_VAR_*: interpreted by the variable's type
	IsRaw   bool
	Source  string     // "-var", "SYSBOX_VAR_x", or the var file
	Range   *hcl.Range // in a var file, else nil
	FromEnv bool       // from SYSBOX_VAR_* (an undeclared one is only a warning)
}

// EnvPrefix prefixes environment variables that set root variables.
const EnvPrefix = "SYSBOX_VAR_"

// EnvInputs collects SYSBOX_VAR_name=value from environ (os.Environ() form).
func EnvInputs(environ []string) map[string]InputValue {
	out := map[string]InputValue{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix) || len(k) == len(EnvPrefix) {
			continue
		}
		name := strings.TrimPrefix(k, EnvPrefix)
		out[name] = InputValue{Raw: v, IsRaw: true, Source: "environment variable " + k, FromEnv: true}
	}
	return out
}

// ParseVarFlag parses one -var NAME=VALUE.
func ParseVarFlag(s string) (string, InputValue, error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || !hclsyntax.ValidIdentifier(k) {
		return "", InputValue{}, fmt.Errorf("-var %q: expected NAME=VALUE with NAME a variable name", s)
	}
	return k, InputValue{Raw: v, IsRaw: true, Source: "-var " + k}, nil
}

// LoadVarFile reads an HCL file of NAME = VALUE attributes (`*.sysbox.vars.hcl`). Values may use
// the standard functions but no references.
func LoadVarFile(path string) (map[string]InputValue, []byte, hcl.Diagnostics) {
	b, err := ReadInput(path, MaxInputFile)
	if err != nil {
		return nil, nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read variables file", Detail: err.Error()}}
	}
	f, diags := hclsyntax.ParseConfig(b, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, b, diags
	}
	attrs, d := f.Body.JustAttributes()
	diags = append(diags, d...)
	out := map[string]InputValue{}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a := attrs[n]
		if len(a.Expr.Variables()) > 0 {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Variables not allowed",
				Detail: fmt.Sprintf("%s: a variables file holds literal values; %s refers to other values", path, n), Subject: a.Expr.Range().Ptr()})
			continue
		}
		v, d := a.Expr.Value(&hcl.EvalContext{Functions: staticFuncs()})
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		r := a.Expr.Range()
		out[n] = InputValue{Value: v, Source: path, Range: &r}
	}
	return out, b, diags
}

// rawInput interprets a -var or SYSBOX_VAR_ string: a string-typed (or untyped) variable takes
// it literally; other types parse it as an HCL expression (`-var 'targets=3'`, `-var 'tags=["a"]'`).
func rawInput(v *Variable, in InputValue) (cty.Value, hcl.Diagnostics) {
	if v.Type == cty.String || v.Type == cty.DynamicPseudoType {
		return cty.StringVal(in.Raw), nil
	}
	expr, diags := hclsyntax.ParseExpression([]byte(in.Raw), in.Source, hcl.InitialPos)
	if diags.HasErrors() {
		return cty.DynamicVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid value for variable",
			Detail: fmt.Sprintf("%s: variable %q expects %s; %q is not a valid HCL expression", in.Source, v.Name, v.Type.FriendlyName(), in.Raw)}}
	}
	val, diags := expr.Value(&hcl.EvalContext{Functions: staticFuncs()})
	if diags.HasErrors() {
		return cty.DynamicVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid value for variable",
			Detail: fmt.Sprintf("%s: variable %q: %s", in.Source, v.Name, diags.Error())}}
	}
	return val, nil
}
