package sysbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/secrets"
	"zyvor.dev/sysbox/pkg/substrate"
)

// varFlags are -var and -var-file, shared by every command that evaluates the topology.
type varFlags struct {
	vars  []string
	files []string
	// validateOnly: required variables may be unset (sysbox validate)
	validateOnly bool
	// once: the command does not evaluate the topology again (validate, plan), so resource
	// bodies are released as they are decoded (config.Options.ReleaseBodies)
	once bool
}

func addVarFlags(cmd *cobra.Command, vf *varFlags) {
	cmd.Flags().StringArrayVar(&vf.vars, "var", nil, "set a root variable: `NAME=VALUE` (repeatable)")
	cmd.Flags().StringArrayVar(&vf.files, "var-file", nil, "read root variables from an HCL `FILE` (repeatable)")
}

// loaded is an evaluated topology with what it was read from.
type loaded struct {
	top     *config.Topology
	sources *config.Sources
	diags   hcl.Diagnostics
	reg     *handlers.Registry
	// drivers is the registry configured from the substrate's driver blocks: the one the
	// command's planning and execution use.
	drivers *driver.Registry
}

// loadTopology reads and evaluates the topology: variables from SYSBOX_VAR_*, then var files,
// then -var (later wins).
func (a *App) loadTopology(vf *varFlags) (*loaded, error) {
	drivers, err := a.registry()
	if err != nil {
		return nil, err
	}
	reg := handlers.Builtin(nodeDrivers(drivers)...)
	l := &loaded{reg: reg, drivers: drivers}
	mod, src, diags := config.Load(a.dir())
	l.sources = src
	l.diags = diags
	inputs := config.EnvInputs(a.Env.Environ)
	for _, f := range vf.files {
		p := f
		if !filepath.IsAbs(p) {
			p = filepath.Join(a.dir(), p)
		}
		in, b, d := config.LoadVarFile(p)
		l.diags = append(l.diags, d...)
		if b != nil {
			src.Files[p] = b
		}
		for k, v := range in {
			inputs[k] = v
		}
	}
	for _, s := range vf.vars {
		k, v, err := config.ParseVarFlag(s)
		if err != nil {
			return nil, err
		}
		inputs[k] = v
	}
	if mod == nil {
		return l, nil
	}
	// Evaluate even after load errors (duplicates are dropped) so that validate reports
	// every problem at once.
	top, d := config.Evaluate(mod, src, config.Options{Schemas: reg, Inputs: inputs, LookupEnv: a.Env.LookupEnv, ValidateOnly: vf.validateOnly, ReleaseBodies: vf.once})
	l.diags = append(l.diags, d...)
	l.top = top
	if top != nil {
		l.diags = append(l.diags, a.configureDrivers(drivers, top)...)
	}
	return l, nil
}

// printDiags renders diagnostics as FILE:LINE:COLUMN with the source line and a caret.
func (a *App) printDiags(w io.Writer, l *loaded) {
	if len(l.diags) == 0 {
		return
	}
	paint := func(c, s string) string {
		if !a.color() {
			return s
		}
		return c + s + ansiReset
	}
	errs, warns := 0, 0
	for _, d := range l.diags {
		label := paint(ansiRed+ansiBold, "Error")
		if d.Severity == hcl.DiagError {
			errs++
		} else {
			warns++
			label = paint(ansiYellow+ansiBold, "Warning")
		}
		fmt.Fprintf(w, "%s: %s\n", label, d.Summary)
		if r := d.Subject; r != nil {
			fmt.Fprintf(w, "  --> %s:%d:%d\n", r.Filename, r.Start.Line, r.Start.Column)
			if l.sources != nil {
				if line, ok := sourceLine(l.sources.Files[r.Filename], r.Start.Line); ok {
					width := 1
					if r.End.Line == r.Start.Line && r.End.Column > r.Start.Column {
						width = r.End.Column - r.Start.Column
					}
					fmt.Fprintf(w, "  %4d | %s\n", r.Start.Line, line)
					fmt.Fprintf(w, "       | %s%s\n", strings.Repeat(" ", max(0, r.Start.Column-1)), strings.Repeat("^", width))
				}
			}
		}
		if d.Detail != "" {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(d.Detail, "\n", "\n  "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s)\n", errs, warns)
}

// sourceLine returns line n (1-based) of b with tabs kept, for snippets.
func sourceLine(b []byte, n int) (string, bool) {
	if b == nil || n < 1 {
		return "", false
	}
	lines := strings.Split(string(b), "\n")
	if n > len(lines) {
		return "", false
	}
	return strings.TrimRight(lines[n-1], "\r"), true
}

// jsonDiag is a diagnostic in --json output.
type jsonDiag struct {
	Severity string     `json:"severity"`
	Summary  string     `json:"summary"`
	Detail   string     `json:"detail,omitempty"`
	Range    *jsonRange `json:"range,omitempty"`
}

type jsonRange struct {
	Filename string  `json:"filename"`
	Start    jsonPos `json:"start"`
	End      jsonPos `json:"end"`
}

type jsonPos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
	Byte   int `json:"byte"`
}

func toJSONDiags(ds hcl.Diagnostics) []jsonDiag {
	out := []jsonDiag{}
	for _, d := range ds {
		j := jsonDiag{Severity: "error", Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			j.Severity = "warning"
		}
		if d.Subject != nil {
			r := d.Subject
			j.Range = &jsonRange{Filename: r.Filename, Start: jsonPos{r.Start.Line, r.Start.Column, r.Start.Byte}, End: jsonPos{r.End.Line, r.End.Column, r.End.Byte}}
		}
		out = append(out, j)
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// artifactFacts computes every artifact's digest from its source (S5): the only plan-time I/O
// besides reading configuration and state, done here so that the planner stays pure.
func artifactFacts(top *config.Topology) (plans.Facts, error) {
	f := plans.Facts{Artifacts: map[string]substrate.ArtifactIdentity{}}
	var errs []string
	for _, r := range top.Resources {
		c, ok := r.Config.(handlers.ArtifactConfig)
		if !ok {
			continue
		}
		p := c.Source
		if !filepath.IsAbs(p) {
			p = filepath.Join(r.BaseDir, p)
		}
		digest, size, err := substrate.DigestSource(p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: source %s: %v", r.Addr, c.Source, err))
			continue
		}
		f.Artifacts[r.Addr.String()] = substrate.ArtifactIdentity{Kind: c.Kind, Source: c.Source, Architecture: c.Architecture,
			GuestFamily: c.GuestFamily, Size: size, Digest: digest}
	}
	if len(errs) > 0 {
		return f, fmt.Errorf("artifacts: %s", strings.Join(errs, "; "))
	}
	return f, nil
}

// priorState reads the topology's state through its configured backend (read only).
func (a *App) priorState(ctx context.Context, top *config.Topology) (plans.PriorState, error) {
	b := top.Substrate.Backend
	be, err := a.openConfiguredBackend(ctx, b)
	if err != nil {
		return nil, err
	}
	defer be.Close()
	st, err := be.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read state (%s backend): %w", b.Name, err)
	}
	return plans.FromState(st), nil
}

// backendSettings turns the backend block into string settings: relative paths are resolved
// against the topology directory and secret references (dsn = env("…")) are resolved here,
// right before use, never stored.
func (a *App) backendSettings(ctx context.Context, b *config.NamedAttrs) (map[string]string, error) {
	res := &secrets.EnvResolver{Lookup: a.Env.LookupEnv}
	out := map[string]string{}
	keys := make([]string, 0, len(b.Attrs))
	for k := range b.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := b.Attrs[k]
		if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
			return nil, fmt.Errorf("backend %s: %s must be a string", b.Name, k)
		}
		s, err := secrets.ResolveString(ctx, res, v.AsString())
		if err != nil {
			return nil, fmt.Errorf("backend %s: %s: %w", b.Name, k, err)
		}
		if k == "path" && !filepath.IsAbs(s) {
			s = filepath.Join(a.dir(), s)
		}
		out[k] = s
	}
	return out, nil
}

func parseTargets(ts []string) ([]addrs.Target, error) {
	var out []addrs.Target
	for _, s := range ts {
		t, err := addrs.ParseTarget(s)
		if err != nil {
			return nil, fmt.Errorf("-target: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}
