package sysbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/secrets"
)

var caps = drivertest.Caps{
	"netns":    {driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState, driver.CapGuestExec},
	"nftables": {driver.CapPolicy},
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, environ []string, tty bool, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Environ: environ, IsTTY: tty, Version: "test",
		Drivers: func() (plans.CapabilityChecker, error) { return caps, nil }}
	code := Main(context.Background(), env, args)
	return result{code, out.String(), errb.String()}
}

// copyDir copies an example into a temp dir so that commands never write into the repository.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == ".sysbox" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeTopo(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		dir        func(t *testing.T) string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{"lab-small", func(t *testing.T) string { return copyDir(t, "../../../examples/lab-small") }, 0, "The topology is valid: 8 resource instance(s).", nil},
		{"modules-foreach", func(t *testing.T) string { return copyDir(t, "../../../examples/modules-foreach") }, 0, "valid: 9 resource", nil},
		{"two errors at once", func(t *testing.T) string {
			return writeTopo(t, "resource \"sysbox_network\" \"a\" {\n  ipv4_cidr = \"2001:db8::/64\"\n}\nresource \"sysbox_node\" \"b\" {\n  cpus = var.missing\n}\n")
		}, 1, "", []string{"main.sysbox.hcl:2:15", "is IPv6", "main.sysbox.hcl:5:10", "undeclared input variable", "2 error(s)"}},
		{"syntax error", func(t *testing.T) string { return writeTopo(t, "resource \"sysbox_node\" {\n") }, 1, "", []string{"main.sysbox.hcl:1"}},
		{"required variable without a value", func(t *testing.T) string {
			return writeTopo(t, "variable \"n\" { type = number }\nresource \"sysbox_node\" \"a\" {\n  count = var.n\n}\nresource \"sysbox_node\" \"b\" {\n  cpus = \"x\"\n}\n")
		}, 1, "", []string{"Warning: Variable without a value", `variable "n" has no value`, "main.sysbox.hcl:6:10", "1 error(s), 1 warning(s)"}},
		{"only a variable without a value", func(t *testing.T) string {
			return writeTopo(t, "variable \"n\" { type = number }\nresource \"sysbox_node\" \"a\" {\n  count = var.n\n}\n")
		}, 0, "The topology is valid", []string{"0 error(s), 1 warning(s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, nil, false, "validate", "--chdir", tt.dir(t))
			if r.code != tt.wantCode {
				t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.wantCode, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tt.wantStdout) {
				t.Errorf("stdout: got %q, want it to contain %q", r.stdout, tt.wantStdout)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

func TestValidateJSON(t *testing.T) {
	dir := writeTopo(t, "resource \"sysbox_node\" \"b\" {\n  cpus = var.missing\n}\n")
	r := run(t, nil, false, "validate", "--json", "-chdir="+dir)
	var got struct {
		Valid       bool `json:"valid"`
		Diagnostics []struct {
			Summary string `json:"summary"`
			Range   struct {
				Start struct{ Line, Column int } `json:"start"`
			} `json:"range"`
		} `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if r.code != 1 || got.Valid || len(got.Diagnostics) != 1 || got.Diagnostics[0].Range.Start.Line != 2 || got.Diagnostics[0].Range.Start.Column != 10 {
		t.Errorf("got code %d, %+v", r.code, got)
	}
}

func TestPlanJSONAndDetailedExitCode(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	r := run(t, nil, false, "plan", "--chdir", dir, "-json", "-detailed-exitcode")
	if r.code != ExitChanges {
		t.Fatalf("exit: got %d, want %d; stderr: %s", r.code, ExitChanges, r.stderr)
	}
	var p struct {
		FormatVersion string `json:"format_version"`
		Actions       []struct {
			Address, Action, Reason string
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.FormatVersion != "1" || len(p.Actions) != 8 {
		t.Fatalf("got format %q with %d actions, want 1 with 8", p.FormatVersion, len(p.Actions))
	}
	first := p.Actions[0]
	if first.Address != "sysbox_network.lan" || first.Action != "create" || first.Reason == "" {
		t.Errorf("first action: got %+v", first)
	}
	if r := run(t, nil, false, "plan", "--chdir", dir); r.code != 0 || !strings.Contains(r.stdout, "Plan: 8 to create") {
		t.Errorf("without -detailed-exitcode: got %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestPlanOutShowAndTarget(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	planFile := filepath.Join(t.TempDir(), "lab.plan")
	r := run(t, nil, false, "plan", "-chdir", dir, "-out", planFile, "-target", "sysbox_router.edge")
	if r.code != 0 {
		t.Fatalf("plan: %d %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "Saved the plan to "+planFile) {
		t.Errorf("stdout: %s", r.stdout)
	}
	s := run(t, nil, false, "show", planFile, "--json")
	var p plans.Plan
	if err := json.Unmarshal([]byte(s.stdout), &p); err != nil {
		t.Fatalf("show --json: %v\n%s", err, s.stdout)
	}
	var got []string
	for _, a := range p.Actions {
		got = append(got, a.Address.String())
	}
	want := []string{"sysbox_network.lan", "sysbox_network.wan", "sysbox_node.gw", "sysbox_router.edge"}
	if !slices.Equal(got, want) {
		t.Errorf("targeted plan: got %v, want %v", got, want)
	}
	h := run(t, nil, false, "show", planFile)
	if h.code != 0 || !strings.Contains(h.stdout, "+ sysbox_router.edge create") || !strings.Contains(h.stdout, "Plan: 4 to create") {
		t.Errorf("show: %d\n%s", h.code, h.stdout)
	}
	if b := run(t, nil, false, "show", filepath.Join(t.TempDir(), "missing.plan")); b.code != 1 {
		t.Errorf("show of a missing file: exit %d, want 1", b.code)
	}
}

func TestPlanHoldsNoSecretInFileOrJSON(t *testing.T) {
	const value = "tok-3x4mpl3+/=ZZ"
	dir := copyDir(t, "../../../examples/lab-small") // web nodes have TOKEN = env("WEB_TOKEN")
	planFile := filepath.Join(t.TempDir(), "lab.plan")
	environ := []string{"WEB_TOKEN=" + value}
	r := run(t, environ, false, "plan", "-chdir", dir, "-json", "-out", planFile)
	if r.code != 0 {
		t.Fatalf("plan: %d %s", r.code, r.stderr)
	}
	file, _ := os.ReadFile(planFile)
	human := run(t, environ, false, "show", planFile)
	for name, data := range map[string]string{"plan --json": r.stdout, "plan file": string(file), "show": human.stdout, "stderr": r.stderr} {
		if leaks := secrets.Leaks([]byte(data), value); len(leaks) > 0 {
			t.Errorf("%s contains the secret (as %q)", name, leaks)
		}
	}
	if !strings.Contains(r.stdout, "secret://env/WEB_TOKEN") {
		t.Error("plan --json lacks the reference secret://env/WEB_TOKEN")
	}
}

func TestFmt(t *testing.T) {
	dir := writeTopo(t, "resource \"sysbox_network\" \"a\" {\nipv4_cidr=\"198.51.100.0/24\"\n    mtu = 1500\n}\n")
	r := run(t, nil, false, "fmt", "-check", "--chdir", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "main.sysbox.hcl") {
		t.Fatalf("fmt -check on unformatted: got %d %q", r.code, r.stdout)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "main.sysbox.hcl"))
	if r := run(t, nil, false, "fmt", "--chdir", dir); r.code != 0 {
		t.Fatalf("fmt: %d %s", r.code, r.stderr)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "main.sysbox.hcl"))
	want := "resource \"sysbox_network\" \"a\" {\n  ipv4_cidr = \"198.51.100.0/24\"\n  mtu       = 1500\n}\n"
	if string(after) != want {
		t.Errorf("formatted:\n%s\nwant:\n%s\n(before:\n%s)", after, want, before)
	}
	if r := run(t, nil, false, "fmt", "-check", "--chdir", dir); r.code != 0 || r.stdout != "" {
		t.Errorf("fmt -check after fmt: %d %q", r.code, r.stdout)
	}
	for _, ex := range []string{"../../../examples/lab-small", "../../../examples/modules-foreach"} {
		if r := run(t, nil, false, "fmt", "-check", ex); r.code != 0 {
			t.Errorf("%s is not formatted: %s", ex, r.stdout)
		}
	}
}

func TestGraphDOT(t *testing.T) {
	r := run(t, nil, false, "graph", "--chdir", copyDir(t, "../../../examples/lab-small"))
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, want := range []string{"digraph sysbox {", `"sysbox_router.edge" -> "sysbox_node.gw";`, `"sysbox_node.web[1]" -> "sysbox_network.lan";`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("DOT lacks %s:\n%s", want, r.stdout)
		}
	}
}

func TestColourOnlyOnTTY(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	tests := []struct {
		tty   bool
		args  []string
		color bool
	}{
		{false, nil, false},
		{true, nil, true},
		{true, []string{"--no-color"}, false},
	}
	for _, tt := range tests {
		r := run(t, nil, tt.tty, append([]string{"plan", "--chdir", dir}, tt.args...)...)
		if got := strings.Contains(r.stdout, "\x1b["); got != tt.color {
			t.Errorf("tty=%v args=%v: colour %v, want %v", tt.tty, tt.args, got, tt.color)
		}
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{fmt.Errorf("boom"), ExitError},
		{&silentExit{code: ExitChanges}, ExitChanges},
		{fmt.Errorf("apply: %w", &plans.StaleError{Field: plans.FieldSerial}), ExitStale},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v): got %d, want %d", tt.err, got, tt.want)
		}
	}
	if r := run(t, nil, false, "plan", "--chdir", t.TempDir()); r.code != 1 || !strings.Contains(r.stderr, "no *.sysbox.hcl files") {
		t.Errorf("empty dir: %d %s", r.code, r.stderr)
	}
	if r := run(t, nil, false, "plan", "--chdir", copyDir(t, "../../../examples/lab-small"), "-target", "sysbox_node.[0]"); r.code != 1 || !strings.Contains(r.stderr, "offset 12") {
		t.Errorf("bad target: %d %s", r.code, r.stderr)
	}
}

func TestVarFlagsAndFiles(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	os.WriteFile(filepath.Join(dir, "three.sysbox.vars.hcl"), []byte("targets = 3\n"), 0o644)
	count := func(r result) int {
		var p plans.Plan
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatalf("%v: %s %s", err, r.stdout, r.stderr)
		}
		return len(p.Actions)
	}
	if n := count(run(t, []string{"SYSBOX_VAR_targets=1"}, false, "plan", "-json", "--chdir", dir)); n != 6 {
		t.Errorf("SYSBOX_VAR_targets=1: got %d actions, want 6", n)
	}
	if n := count(run(t, []string{"SYSBOX_VAR_targets=1"}, false, "plan", "-json", "--chdir", dir, "-var-file", "three.sysbox.vars.hcl")); n != 10 {
		t.Errorf("-var-file targets=3: got %d actions, want 10", n)
	}
	if n := count(run(t, nil, false, "plan", "-json", "--chdir", dir, "-var-file", "three.sysbox.vars.hcl", "-var", "targets=4")); n != 12 {
		t.Errorf("-var targets=4 after the file: got %d actions, want 12", n)
	}
	r := run(t, nil, false, "plan", "--chdir", dir, "-var", "targets=0")
	if r.code != 1 || !strings.Contains(r.stderr, "targets must be between 1 and 50") {
		t.Errorf("validation: %d %s", r.code, r.stderr)
	}
}

// TestPlanTargetModuleCallSelectsEveryInstance: -target module.segment plans the resources of
// module.segment["red"] and module.segment["blue"] (OpenTofu's containment), nothing else.
func TestPlanTargetModuleCallSelectsEveryInstance(t *testing.T) {
	dir := copyDir(t, "../../../examples/modules-foreach")
	r := run(t, nil, false, "plan", "-chdir", dir, "-json", "-target", "module.segment")
	var p struct {
		Actions []struct{ Address string } `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != 0 {
		t.Fatalf("plan: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	seen := map[string]int{}
	for _, a := range p.Actions {
		inst, err := addrs.ParseInstance(a.Address)
		if err != nil || inst.Module.IsRoot() {
			t.Fatalf("targeted plan holds %s, outside module.segment", a.Address)
		}
		seen[inst.Module.String()]++
	}
	if seen[`module.segment["red"]`] == 0 || seen[`module.segment["blue"]`] == 0 || len(seen) != 2 {
		t.Fatalf("targeted plan: got actions per module instance %v, want both module.segment instances", seen)
	}
}
