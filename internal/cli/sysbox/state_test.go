package sysbox

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/backend/sqlite"
	"zyvor.dev/sysbox/internal/states"
)

// runCLI runs the CLI in dir and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, dir, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader(stdin), Environ: []string{}, Version: "test"}
	code := Main(context.Background(), env, append([]string{"--chdir", dir}, args...))
	return out.String(), errb.String(), code
}

// seedState writes a local state with the given resources and returns its path.
func seedState(t *testing.T, addrList ...string) (string, *states.State) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lab.sbxstate")
	b, err := local.New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := states.New()
	for _, a := range addrList {
		st.Set(backendtest.Resource(st.Lineage, a))
	}
	st.Resource(addrs.MustParseInstance(addrList[0])).Dependencies = []addrs.Instance{addrs.MustParseInstance(addrList[len(addrList)-1])}
	st.Serial = 1
	if err := b.Save(context.Background(), st, 0); err != nil {
		t.Fatal(err)
	}
	return p, st
}

func readState(t *testing.T, p string) *states.State {
	t.Helper()
	b, err := local.New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var labAddrs = []string{`sysbox_node.web["blue"]`, "sysbox_node.web[0]", "module.dmz.sysbox_node.fw", "sysbox_network.lan"}

func TestStateList(t *testing.T) {
	p, st := seedState(t, labAddrs...)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"all, canonical order", nil, "sysbox_network.lan\nsysbox_node.web[0]\nsysbox_node.web[\"blue\"]\nmodule.dmz.sysbox_node.fw\n"},
		{"one resource's instances", []string{"sysbox_node.web"}, "sysbox_node.web[0]\nsysbox_node.web[\"blue\"]\n"},
		{"a module", []string{"module.dmz"}, "module.dmz.sysbox_node.fw\n"},
		{"no match", []string{"sysbox_router.r"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, t.TempDir(), "", append([]string{"state", "list", "-state", p}, tt.args...)...)
			if code != 0 || out != tt.want {
				t.Fatalf("got exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, tt.want)
			}
		})
	}
	out, _, code := runCLI(t, t.TempDir(), "", "state", "list", "--state", p, "--json")
	var got stateListJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if got.Lineage != st.Lineage || got.Serial != 1 || len(got.Resources) != 4 || got.Resources[0].Address != "sysbox_network.lan" || got.Resources[0].Status != "present" {
		t.Fatalf("--json: got %+v", got)
	}
}

func TestStateListEmptyAndBadTarget(t *testing.T) {
	out, errOut, code := runCLI(t, t.TempDir(), "", "state", "list", "--state", filepath.Join(t.TempDir(), "none"))
	if code != 0 || out != "" {
		t.Fatalf("empty state: got exit %d %q %q, want 0 and nothing", code, out, errOut)
	}
	_, errOut, code = runCLI(t, t.TempDir(), "", "state", "list", "--state", filepath.Join(t.TempDir(), "none"), "sysbox_node.[")
	if code != 1 || !strings.Contains(errOut, "-target") {
		t.Fatalf("bad target: got exit %d %q, want 1 naming the target", code, errOut)
	}
}

func TestStateShow(t *testing.T) {
	p, _ := seedState(t, labAddrs...)
	out, errOut, code := runCLI(t, t.TempDir(), "", "state", "show", "--state", p, `sysbox_node.web["blue"]`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`# sysbox_node.web["blue"]`, "external id     ext-sysbox_node.web[\"blue\"]", "observation     present", "depends on      sysbox_network.lan", "fake envelope v1, 9 bytes (opaque)", `"cidr": "198.51.100.0/24"`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"k":"v"`) || strings.Contains(out, `"k": "v"`) {
		t.Errorf("private envelope content shown:\n%s", out)
	}
	out, _, code = runCLI(t, t.TempDir(), "", "state", "show", "--state", p, "--json", "sysbox_node.web[0]")
	var v stateShowJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 {
		t.Fatalf("--json: exit %d %v\n%s", code, err, out)
	}
	if v.Address != "sysbox_node.web[0]" || v.Owner.Generation != 1 || v.Private == nil || v.Private.Bytes != 9 || strings.Contains(out, `"k"`) {
		t.Fatalf("--json: got %s", out)
	}
	for _, tt := range []struct{ arg, want string }{{"sysbox_node.nope", "no resource sysbox_node.nope in state"}, {"sysbox_node", `address "sysbox_node"`}} {
		_, errOut, code := runCLI(t, t.TempDir(), "", "state", "show", "--state", p, tt.arg)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("show %s: got exit %d %q, want 1 and %q", tt.arg, code, errOut, tt.want)
		}
	}
}

func TestStateMv(t *testing.T) {
	tests := []struct {
		name, from, to string
		wantCode       int
		wantErr        string
	}{
		{"rename", "sysbox_node.web[0]", "sysbox_node.app", 0, ""},
		{"into a module instance", "sysbox_network.lan", `module.seg["red"].sysbox_network.lan`, 0, ""},
		{"destination exists", "sysbox_node.web[0]", `sysbox_node.web["blue"]`, 1, "already exists"},
		{"source missing", "sysbox_node.ghost", "sysbox_node.app", 1, "no resource sysbox_node.ghost"},
		{"type change", "sysbox_node.web[0]", "sysbox_network.web", 1, "resource type would change"},
		{"malformed destination", "sysbox_node.web[0]", "sysbox_node.app[", 1, "destination address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, before := seedState(t, labAddrs...)
			out, errOut, code := runCLI(t, t.TempDir(), "", "state", "mv", "-state", p, tt.from, tt.to)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Fatalf("got exit %d, stderr %q; want %d containing %q", code, errOut, tt.wantCode, tt.wantErr)
			}
			after := readState(t, p)
			if tt.wantCode != 0 {
				if after.Serial != 1 {
					t.Fatalf("a refused mv saved the state (serial %d)", after.Serial)
				}
				return
			}
			from, to := addrs.MustParseInstance(tt.from), addrs.MustParseInstance(tt.to)
			old, moved := before.Resource(from), after.Resource(to)
			if after.Serial != 2 || after.Resource(from) != nil || moved == nil {
				t.Fatalf("got serial %d, addresses %v; want serial 2 with %s moved to %s", after.Serial, after.Addresses(), from, to)
			}
			if moved.ExternalID != old.ExternalID || moved.Owner != old.Owner || string(moved.Private.Data) != string(old.Private.Data) {
				t.Fatalf("the object changed: got %+v, want external id, owner and private envelope of %s kept", moved, from)
			}
			if !strings.Contains(out, "No external object was touched") {
				t.Fatalf("stdout: %q", out)
			}
			snaps, _ := mustLocal(t, p).Snapshots(context.Background())
			if len(snaps) != 1 || snaps[0].Serial != 1 {
				t.Fatalf("got snapshots %+v, want one of serial 1 taken before mv", snaps)
			}
		})
	}
}

// TestStateListModuleCallSelectsItsInstances: `state list module.bax` lists module.bax[0] and
// module.bax["a"] (OpenTofu), not module.baxter.
func TestStateListModuleCallSelectsItsInstances(t *testing.T) {
	p, _ := seedState(t, `module.bax[0].sysbox_node.n`, `module.bax["a"].sysbox_node.n`, `module.baxter.sysbox_node.n`, `module.bax["a"].module.in.sysbox_node.m`)
	for _, tt := range []struct{ arg, want string }{
		{"module.bax", "module.bax[0].sysbox_node.n\nmodule.bax[\"a\"].sysbox_node.n\nmodule.bax[\"a\"].module.in.sysbox_node.m\n"},
		{`module.bax["a"]`, "module.bax[\"a\"].sysbox_node.n\nmodule.bax[\"a\"].module.in.sysbox_node.m\n"},
		{"module.bax.module.in", "module.bax[\"a\"].module.in.sysbox_node.m\n"},
	} {
		out, errOut, code := runCLI(t, t.TempDir(), "", "state", "list", "-state", p, tt.arg)
		if code != 0 || out != tt.want {
			t.Errorf("state list %s: got exit %d, stdout %q, stderr %q; want 0 and %q", tt.arg, code, out, errOut, tt.want)
		}
	}
}

// TestStateMvWholeObjects moves a resource with all its instances and a module with everything
// in it; -dry-run shows the same moves without writing; --json reports them.
func TestStateMvWholeObjects(t *testing.T) {
	seed := []string{"sysbox_node.foo[0]", "sysbox_node.foo[1]", `module.a["x"].sysbox_node.n`, `module.a["y"].sysbox_node.n`, "sysbox_network.lan"}
	tests := []struct {
		from, to string
		want     []stateMvRow
	}{
		{"sysbox_node.foo", "sysbox_node.bar", []stateMvRow{{"sysbox_node.foo[0]", "sysbox_node.bar[0]"}, {"sysbox_node.foo[1]", "sysbox_node.bar[1]"}}},
		{"module.a", "module.b", []stateMvRow{{`module.a["x"].sysbox_node.n`, `module.b["x"].sysbox_node.n`}, {`module.a["y"].sysbox_node.n`, `module.b["y"].sysbox_node.n`}}},
		{`module.a["x"]`, "module.b", []stateMvRow{{`module.a["x"].sysbox_node.n`, `module.b.sysbox_node.n`}}},
	}
	for _, tt := range tests {
		t.Run(tt.from+" to "+tt.to, func(t *testing.T) {
			p, before := seedState(t, seed...)
			out, errOut, code := runCLI(t, t.TempDir(), "", "state", "mv", "-state", p, "-dry-run", "--json", tt.from, tt.to)
			var dry stateMvJSON
			if err := json.Unmarshal([]byte(out), &dry); err != nil || code != 0 {
				t.Fatalf("-dry-run --json: exit %d %v %q %q", code, err, out, errOut)
			}
			if !dry.DryRun || dry.Serial != 1 || !slices.Equal(dry.Moves, tt.want) {
				t.Fatalf("-dry-run: got %+v, want moves %v at serial 1", dry, tt.want)
			}
			if st := readState(t, p); st.Serial != 1 || !slices.EqualFunc(st.Addresses(), before.Addresses(), addrs.Instance.Equal) {
				t.Fatalf("-dry-run changed the state: serial %d, %v", st.Serial, st.Addresses())
			}
			out, errOut, code = runCLI(t, t.TempDir(), "", "state", "mv", "-state", p, tt.from, tt.to)
			if code != 0 {
				t.Fatalf("mv: exit %d %q", code, errOut)
			}
			for _, m := range tt.want {
				if !strings.Contains(out, "Moved "+m.From+" to "+m.To+"\n") {
					t.Errorf("stdout %q does not report %s -> %s", out, m.From, m.To)
				}
			}
			after := readState(t, p)
			for _, m := range tt.want {
				old, moved := before.Resource(addrs.MustParseInstance(m.From)), after.Resource(addrs.MustParseInstance(m.To))
				if moved == nil || after.Resource(addrs.MustParseInstance(m.From)) != nil || moved.ExternalID != old.ExternalID || moved.Owner != old.Owner {
					t.Fatalf("%s -> %s: got %v; want the same object at the new address only", m.From, m.To, after.Addresses())
				}
			}
			if len(after.Resources) != len(before.Resources) || after.Serial != 2 {
				t.Fatalf("got %d resources at serial %d, want %d at serial 2", len(after.Resources), after.Serial, len(before.Resources))
			}
		})
	}
	for _, tt := range []struct{ from, to, want string }{
		{"sysbox_node.foo", "sysbox_node.foo[0]", "has 2 instance(s)"},
		{"sysbox_node.foo", "sysbox_network.lan", "resource type would change"},
		{"module.a", "module.z[0]", "module.a has several instances"},
		{"sysbox_node.foo[0]", "sysbox_node.foo[1]", "sysbox_node.foo[1] already exists in state"},
	} {
		p, _ := seedState(t, seed...)
		for _, extra := range [][]string{{"-dry-run"}, nil} {
			_, errOut, code := runCLI(t, t.TempDir(), "", append(append([]string{"state", "mv", "-state", p}, extra...), tt.from, tt.to)...)
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Errorf("mv %v %s %s: got exit %d %q, want 1 and %q", extra, tt.from, tt.to, code, errOut, tt.want)
			}
		}
		if st := readState(t, p); st.Serial != 1 {
			t.Errorf("refused mv %s %s saved the state (serial %d)", tt.from, tt.to, st.Serial)
		}
		if snaps, _ := mustLocal(t, p).Snapshots(context.Background()); len(snaps) != 0 {
			t.Errorf("refused mv %s %s took a snapshot: %+v", tt.from, tt.to, snaps)
		}
	}
}

func mustLocal(t *testing.T, p string) *local.Backend {
	b, err := local.New(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestStateRm(t *testing.T) {
	p, _ := seedState(t, labAddrs...)
	_, errOut, code := runCLI(t, t.TempDir(), "", "state", "rm", "--state", p, "sysbox_node.web[0]", "sysbox_node.ghost")
	if code != 1 || !strings.Contains(errOut, "nothing removed") || !strings.Contains(errOut, "sysbox_node.ghost") {
		t.Fatalf("partly missing: got exit %d %q, want 1 naming the missing address", code, errOut)
	}
	if st := readState(t, p); st.Serial != 1 || len(st.Resources) != 4 {
		t.Fatalf("a refused rm changed the state: serial %d, %d resources", st.Serial, len(st.Resources))
	}
	out, errOut, code := runCLI(t, t.TempDir(), "", "state", "rm", "--state", p, "sysbox_node.web[0]", "module.dmz.sysbox_node.fw")
	if code != 0 || !strings.Contains(out, "Removed sysbox_node.web[0]\nRemoved module.dmz.sysbox_node.fw\n") {
		t.Fatalf("got exit %d %q %q", code, out, errOut)
	}
	st := readState(t, p)
	if st.Serial != 2 || len(st.Resources) != 2 {
		t.Fatalf("got serial %d and %v, want serial 2 with 2 resources", st.Serial, st.Addresses())
	}
}

func TestStateMutationWaitsOrFailsOnLock(t *testing.T) {
	p, _ := seedState(t, labAddrs...)
	holder := mustLocal(t, p)
	id, err := holder.Lock(context.Background(), backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, t.TempDir(), "", "state", "rm", "--state", p, "sysbox_node.web[0]")
	if code != 1 || !strings.Contains(errOut, "state is locked") || !strings.Contains(errOut, id) || !strings.Contains(errOut, `"apply"`) {
		t.Fatalf("got exit %d %q, want 1 naming lock %s held for apply", code, errOut, id)
	}
	_, errOut, code = runCLI(t, t.TempDir(), "", "state", "rm", "--state", p, "-lock-timeout", "200ms", "sysbox_node.web[0]")
	if code != 1 || !strings.Contains(errOut, "gave up after waiting 200ms") {
		t.Fatalf("-lock-timeout: got exit %d %q", code, errOut)
	}
	// Reads do not need the lock.
	if out, _, code := runCLI(t, t.TempDir(), "", "state", "list", "--state", p); code != 0 || out == "" {
		t.Fatalf("list while locked: exit %d", code)
	}
	holder.Unlock(context.Background(), id)
}

func TestStateWithTopologyBackend(t *testing.T) {
	dir := t.TempDir()
	hcl := "substrate \"lab\" {\n  backend \"sqlite\" {\n    path = \"state/lab.db\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := sqlite.New(ctx, filepath.Join(dir, "state", "lab.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Serial = 1
	if err := b.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, dir, "", "state", "list")
	if code != 0 || out != "sysbox_node.web\n" {
		t.Fatalf("list through the topology's sqlite backend: exit %d %q %q", code, out, errOut)
	}
	// A lock left behind by a crashed holder: force-unlock asks, then removes it.
	id, err := b.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, dir, "no\n", "state", "force-unlock", id); code != 1 || !strings.Contains(errOut, "not confirmed") {
		t.Fatalf("unconfirmed: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, dir, "", "state", "force-unlock", "--force", "wrong-id"); code != 1 || !strings.Contains(errOut, id) {
		t.Fatalf("wrong id: exit %d %q, want the held lock %s named", code, errOut, id)
	}
	if out, errOut, code := runCLI(t, dir, "yes\n", "state", "force-unlock", id); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("confirmed: exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, dir, "", "state", "mv", "sysbox_node.web", "sysbox_node.www"); code != 0 {
		t.Fatalf("mv after force-unlock: exit %d %q %q", code, out, errOut)
	}
}

func TestForceUnlockOnLocalExplains(t *testing.T) {
	p, _ := seedState(t, labAddrs...)
	_, errOut, code := runCLI(t, t.TempDir(), "", "state", "force-unlock", "--force", "--state", p, "some-id")
	if code != 1 || !strings.Contains(errOut, "does not support force-unlock") || !strings.Contains(errOut, "ends when the holding process exits") {
		t.Fatalf("got exit %d %q", code, errOut)
	}
}

func TestStateSnapshotsAndRestore(t *testing.T) {
	p, _ := seedState(t, labAddrs...)
	if _, errOut, code := runCLI(t, t.TempDir(), "", "state", "rm", "--state", p, "sysbox_node.web[0]", "sysbox_network.lan"); code != 0 {
		t.Fatalf("rm: %s", errOut)
	}
	out, errOut, code := runCLI(t, t.TempDir(), "", "state", "snapshots", "--state", p, "--json")
	var list []backend.SnapshotInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list) != 1 || list[0].Serial != 1 || list[0].Reason != "state-rm" {
		t.Fatalf("snapshots --json: exit %d %v %q %q", code, err, out, errOut)
	}
	out, _, _ = runCLI(t, t.TempDir(), "", "state", "snapshots", "--state", p)
	if !strings.HasPrefix(out, "ID") || !strings.Contains(out, list[0].ID) {
		t.Fatalf("snapshots: got %q", out)
	}
	// Damage the current state, then restore the snapshot taken before rm.
	data, _ := os.ReadFile(p)
	os.WriteFile(p, data[:len(data)-40], 0o600)
	if _, errOut, code := runCLI(t, t.TempDir(), "", "state", "list", "--state", p); code != 1 || !strings.Contains(errOut, "corrupt") {
		t.Fatalf("list of a damaged state: exit %d %q, want a corrupt-state error", code, errOut)
	}
	out, errOut, code = runCLI(t, t.TempDir(), "", "state", "restore", "--state", p, list[0].ID)
	if code != 0 || !strings.Contains(out, "as state serial 3 (4 resources)") {
		t.Fatalf("restore: exit %d %q %q", code, out, errOut)
	}
	if st := readState(t, p); st.Serial != 3 || len(st.Resources) != 4 {
		t.Fatalf("after restore: serial %d, %d resources; want 3 and 4", st.Serial, len(st.Resources))
	}
	if _, errOut, code := runCLI(t, t.TempDir(), "", "state", "restore", "--state", p, "s9-20260101T000000.000000000Z-x"); code != 1 || !strings.Contains(errOut, "snapshot") {
		t.Fatalf("missing snapshot: exit %d %q", code, errOut)
	}
}
