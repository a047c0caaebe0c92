package sysbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/secrets"
	"zyvor.dev/sysbox/internal/states"
)

func init() { register(newOutputCommand) }

// Redacted is what output prints instead of a sensitive output or one holding a secret reference.
const Redacted = "(sensitive value)"

func newOutputCommand(app *App) *cobra.Command {
	var f runFlags
	var asJSON bool
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "output [NAME]",
		Short: "Print the topology's outputs, evaluated against state",
		Long: `output evaluates the configuration's outputs against the saved state: attributes known only
after apply (a node's external_id, generation, observation; an artifact's digest and size) take
the values state records. It prints all of them, or NAME's value (a string raw, for shell use).

Sensitive outputs (sensitive = true) and outputs holding a secret reference (env()) are shown as
` + Redacted + `, never their value; an output whose resources are not in state yet is
"(known after apply)". With --json, all outputs print as one object: redacted ones as the string
"` + Redacted + `", unknown ones as null.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "output", args, "")
			}
			rt, err := app.openRuntime(cmd.Context(), &f, false)
			if err != nil {
				return err
			}
			defer rt.close()
			st, err := rt.mgr.Read(cmd.Context())
			if err != nil {
				return err
			}
			outs, err := app.outputsAgainst(rt.l.top, st)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				for _, o := range outs {
					if o.Name == args[0] {
						return printOutput(app, o, asJSON)
					}
				}
				return fmt.Errorf("output %q: not declared in the configuration", args[0])
			}
			if asJSON {
				m := map[string]json.RawMessage{}
				for _, o := range outs {
					m[o.Name] = o.JSON
				}
				return writeJSON(app.Env.Stdout, m)
			}
			for _, o := range outs {
				fmt.Fprintf(app.Env.Stdout, "%s = %s\n", o.Name, o.display())
			}
			return nil
		},
	}
	addVarFlags(cmd, &f.vars)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addRemoteFlags(cmd, &rf)
	return cmd
}

// outputResult is one output as output prints it.
type outputResult struct {
	Name     string
	Redacted bool            // sensitive, or holds a secret reference
	Known    bool            // wholly known (false: known after apply)
	JSON     json.RawMessage // the value; the redaction string or null when redacted or unknown
}

func (o outputResult) display() string {
	switch {
	case o.Redacted:
		return Redacted
	case !o.Known:
		return "(known after apply)"
	}
	return string(o.JSON)
}

func printOutput(app *App, o outputResult, asJSON bool) error {
	if asJSON || o.Redacted || !o.Known {
		if asJSON {
			fmt.Fprintln(app.Env.Stdout, string(o.JSON))
		} else {
			fmt.Fprintln(app.Env.Stdout, o.display())
		}
		return nil
	}
	var s string
	if json.Unmarshal(o.JSON, &s) == nil {
		fmt.Fprintln(app.Env.Stdout, s) // a string prints raw, for shell use
	} else {
		fmt.Fprintln(app.Env.Stdout, string(o.JSON))
	}
	return nil
}

// outputsAgainst evaluates top's outputs with the computed attributes state records, sorted
// by name. An output still unknown (its resource is not in state) falls back to the value the
// last apply stored, if any.
func (a *App) outputsAgainst(top *config.Topology, st *states.State) ([]outputResult, error) {
	vals, err := a.evaluateOutputs(top, st)
	if err != nil {
		return nil, err
	}
	redacted, _ := json.Marshal(Redacted)
	var out []outputResult
	for _, o := range vals {
		r := outputResult{Name: o.Name, Known: o.Value.IsWhollyKnown()}
		switch {
		case o.Sensitive || holdsSecretRef(o.Value):
			r.Redacted, r.JSON = true, redacted
		case r.Known:
			b, err := ctyjson.Marshal(o.Value, o.Value.Type())
			if err != nil {
				return nil, fmt.Errorf("output %s: %w", o.Name, err)
			}
			r.JSON = b
		default:
			r.JSON = json.RawMessage("null")
			if st != nil {
				if saved, ok := st.Outputs[o.Name]; ok && len(saved.Value) > 0 {
					r.Known, r.JSON = true, saved.Value
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// storedOutputs computes the outputs the end of an apply stores in state: evaluated against the
// final state, wholly known, neither sensitive nor holding a secret reference (state holds no
// secret, not even a reference in an output).
func (a *App) storedOutputs(top *config.Topology, st *states.State) (map[string]states.Output, error) {
	vals, err := a.evaluateOutputs(top, st)
	if err != nil {
		return nil, err
	}
	out := map[string]states.Output{}
	for _, o := range vals {
		if o.Sensitive || !o.Value.IsWhollyKnown() || holdsSecretRef(o.Value) {
			continue
		}
		b, err := ctyjson.Marshal(o.Value, o.Value.Type())
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		out[o.Name] = states.Output{Value: b}
	}
	return out, nil
}

// evaluateOutputs returns top's outputs; when some are not wholly known and st has resources,
// it evaluates the configuration again with the computed attributes from st (same module,
// sources and root variable values), so that e.g. `sysbox_node.server.external_id` is known.
func (a *App) evaluateOutputs(top *config.Topology, st *states.State) ([]*config.OutputValue, error) {
	if top == nil {
		return nil, errors.New("outputs: no configuration")
	}
	allKnown := true
	for _, o := range top.Outputs {
		if !o.Value.IsWhollyKnown() {
			allKnown = false
		}
	}
	if allKnown || st == nil || len(st.Resources) == 0 || top.Root == nil {
		return top.Outputs, nil
	}
	inputs := map[string]config.InputValue{}
	for _, v := range top.Variables {
		inputs[v.Name] = config.InputValue{Value: v.Value, Source: "the evaluated configuration"}
	}
	again, diags := config.Evaluate(top.Root, top.Sources, config.Options{
		Schemas: stateSchemas{Schemas: handlers.Builtin(), st: st}, Inputs: inputs, LookupEnv: a.Env.LookupEnv})
	if diags.HasErrors() || again == nil {
		return nil, fmt.Errorf("evaluate outputs against state: %w", errors.New(diagsText(diags)))
	}
	return again.Outputs, nil
}

func diagsText(diags hcl.Diagnostics) string {
	var b []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Subject != nil {
			s = d.Subject.String() + ": " + s
		}
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		b = append(b, s)
	}
	return strings.Join(b, "; ")
}

// holdsSecretRef reports whether v contains a secret reference (secret://…) anywhere.
func holdsSecretRef(v cty.Value) bool {
	found := false
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if found || !x.IsKnown() || x.IsNull() {
			return !found, nil
		}
		if x.Type() == cty.String && len(secrets.FindRefs(x.AsString())) > 0 {
			found = true
		}
		return !found, nil
	})
	return found
}

// stateSchemas wraps the handlers' schemas so that each instance's reference value carries the
// computed attributes state records for it instead of unknown values.
type stateSchemas struct {
	config.Schemas
	st *states.State
}

func (s stateSchemas) Schema(mode addrs.ResourceMode, typ string) (config.Schema, bool) {
	sc, ok := s.Schemas.Schema(mode, typ)
	if !ok {
		return nil, false
	}
	return stateSchema{Schema: sc, st: s.st}, true
}

type stateSchema struct {
	config.Schema
	st *states.State
}

func (s stateSchema) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d, diags := s.Schema.Decode(req)
	if d == nil {
		return d, diags
	}
	r := s.st.Resource(req.Addr)
	if r == nil {
		return d, diags
	}
	known := computedOf(r)
	ref, refFunc, refAttr := d.Ref, d.RefFunc, d.RefAttr
	whole := func() cty.Value {
		v := ref
		if v == cty.NilVal && refFunc != nil {
			v = refFunc()
		}
		return fillUnknown(v, known)
	}
	if ref != cty.NilVal {
		d.Ref = whole()
	} else {
		d.RefFunc = whole
	}
	if refAttr != nil {
		d.RefAttr = func(name string) (cty.Value, bool) {
			v, ok := refAttr(name)
			if ok && !v.IsKnown() {
				if k, has := known[name]; has {
					if c, err := convert.Convert(k, v.Type()); err == nil {
						return c, true
					}
				}
			}
			return v, ok
		}
	}
	return d, diags
}

// computedOf lists the values state records for a resource's computed attributes: its external
// id, generation and observation, and the top-level attributes of its stored form (an artifact's
// digest and size).
func computedOf(r *states.Resource) map[string]cty.Value {
	out := map[string]cty.Value{}
	var stored map[string]json.RawMessage
	if json.Unmarshal(r.Attributes, &stored) == nil {
		for k, raw := range stored {
			ty, err := ctyjson.ImpliedType(raw)
			if err != nil {
				continue
			}
			if v, err := ctyjson.Unmarshal(raw, ty); err == nil {
				out[k] = v
			}
		}
	}
	if r.ExternalID != "" {
		out["external_id"] = cty.StringVal(r.ExternalID)
	}
	if r.Owner.Generation > 0 {
		out["generation"] = cty.NumberIntVal(int64(r.Owner.Generation))
	}
	if r.Observation.Status != "" {
		out["observation"] = cty.StringVal(string(r.Observation.Status))
	}
	return out
}

// fillUnknown replaces the unknown top-level attributes of object v that known has a value for
// (converted to the attribute's type); everything the configuration knows stays as it is.
func fillUnknown(v cty.Value, known map[string]cty.Value) cty.Value {
	if v == cty.NilVal || !v.IsKnown() || v.IsNull() || !v.Type().IsObjectType() {
		return v
	}
	attrs := v.AsValueMap()
	changed := false
	for name, cur := range attrs {
		if cur.IsKnown() {
			continue
		}
		k, ok := known[name]
		if !ok {
			continue
		}
		if c, err := convert.Convert(k, cur.Type()); err == nil {
			attrs[name], changed = c, true
		}
	}
	if !changed {
		return v
	}
	return cty.ObjectVal(attrs)
}
