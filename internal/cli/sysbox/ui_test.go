package sysbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/ui"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestUIListenLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:8081", true},
		{"[::1]:0", true},
		{"0.0.0.0:8081", false},
		{":8081", false},
		{"192.0.2.1:8081", false},
		{"localhost:8081", false}, // a name may resolve anywhere: an IP is required
		{"127.0.0.1", false},
	} {
		if err := checkLoopback(tc.listen); (err == nil) != tc.ok {
			t.Errorf("--listen %s: got error %v, want ok %v", tc.listen, err, tc.ok)
		}
	}
}

// TestUILoaderReadsWhileLocked: the loader joins configuration and the local state file while
// another process holds the state lock (an apply in progress), and a broken configuration
// still shows what state records, with the error.
func TestUILoaderReadsWhileLocked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	hcl := `substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "client" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.10/24"]
  }
}
`
	file := filepath.Join(dir, "main.sysbox.hcl")
	if err := os.WriteFile(file, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := local.New(filepath.Join(dir, ".sysbox", "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Lock(ctx, backend.LockInfo{Operation: "apply"}); err != nil {
		t.Fatal(err)
	}
	lan, err := addrs.ParseInstance("sysbox_network.lan")
	if err != nil {
		t.Fatal(err)
	}
	st := states.New()
	st.Serial = 1
	st.Set(&states.Resource{Addr: lan, SchemaVersion: 1, Driver: "netns", ExternalID: "sbx-lan",
		Observation: states.Observation{Status: substrate.Present},
		Owner:       substrate.Owner{Topology: st.Lineage, Address: lan.String(), Type: "sysbox_network", Generation: 4}})
	if err := holder.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}

	a := &App{Env: &Env{LookupEnv: lookupIn(nil)}, ChDir: dir}
	vf := &varFlags{}
	l, err := a.loadTopology(vf)
	if err != nil || l.diags.HasErrors() {
		t.Fatalf("load: %v %v", err, l.diags)
	}
	be, err := a.openConfiguredBackend(ctx, l.top.Substrate.Backend)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	load := a.uiLoader(vf, be)
	g, err := load(ctx)
	if err != nil {
		t.Fatalf("load graph while the state is locked: %v", err)
	}
	got := map[string]string{}
	for _, e := range g.Elements {
		got[e.Address] = fmt.Sprintf("%s/%s/%d", e.Observation, e.Diff, e.Generation)
	}
	want := map[string]string{"sysbox_network.lan": "present//4", "sysbox_node.client": "absent/config-only/0"}
	if !cmp.Equal(got, want) || g.Serial != 1 || len(g.Edges) != 1 {
		t.Fatalf("graph: got %v serial %d edges %+v, want %v serial 1 and the client's attachment", got, g.Serial, g.Edges, want)
	}

	if err := os.WriteFile(file, []byte(hcl+"resource \"sysbox_network\" {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err = load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Error, "configuration: ") || len(g.Elements) != 1 || g.Elements[0].Address != "sysbox_network.lan" {
		t.Fatalf("broken configuration: got error %q elements %+v, want the error and the state's network", g.Error, g.Elements)
	}
}

// TestUICheckpointView: the run panel of `sysbox ui` shows the records of the directory's
// checkpoint log as the executor wrote them, while it is open; once the run ends and the log
// is removed, the records as last read and that the run ended; nothing before any run. No
// private envelope, handle, owner or desired spec of an operation reaches the panel, and an
// agent's checkpoint events carry the same summary.
func TestUICheckpointView(t *testing.T) {
	a := &App{Env: &Env{LookupEnv: lookupIn(nil)}, ChDir: t.TempDir()}
	v := &checkpointView{dir: a.checkpointDir()}
	if r := v.run(); r != nil {
		t.Fatalf("no log yet: got run %+v, want none", r)
	}
	l, err := executor.CreateLog(v.dir, executor.RunHeader{Run: "run-1", Command: "apply", Lineage: "PRIVATE-LINEAGE"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const private = "PRIVATE-ENVELOPE-CONTENT"
	op := &executor.OpState{Addr: "sysbox_node.web[0]", Op: plans.Create, Step: executor.StepCreated,
		Owner:  substrate.Owner{Topology: "PRIVATE-LINEAGE", Address: "sysbox_node.web[0]"},
		Handle: &substrate.Handle{Driver: "netns", ExternalID: "PRIVATE-EXTERNAL", Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(`"` + private + `"`)}},
		Action: executor.Action{Addr: addrs.MustParseInstance("sysbox_node.web[0]"), Op: plans.Create, Attributes: json.RawMessage(`{"env":"secret://env/PRIVATE_REF"}`)}}
	steps := []executor.Step{executor.StepCreated, executor.StepStarted, executor.StepDone}
	var emitted []string
	emit := checkpointEvents(agent.Job{Emit: func(kind, data string) error {
		emitted = append(emitted, kind+" "+data)
		return nil
	}})
	for i, s := range steps {
		op.Step = s
		if err := l.Checkpoint(op); err != nil {
			t.Fatal(err)
		}
		r := v.run()
		if r == nil || r.ID != "run-1" || r.Op != "apply" || r.Status != uiRunOpen || len(r.Checkpoints) != i+2 {
			t.Fatalf("after step %s: got %+v, want run-1 open with the header and %d records", s, r, i+1)
		}
		c := r.Checkpoints[i+1]
		if c.Seq != uint64(i+2) || c.Record != ui.CheckpointOp || c.Address != "sysbox_node.web[0]" || c.Action != "create" || c.Step != string(s) || c.At.IsZero() {
			t.Fatalf("after step %s: newest record %+v", s, c)
		}
		it, err := executor.ReadLog(v.dir)
		if err != nil {
			t.Fatal(err)
		}
		emit(it.Records[len(it.Records)-1])
	}
	open := v.run()
	if err := l.Finish(); err != nil {
		t.Fatal(err)
	}
	ended := v.run()
	if ended == nil || ended.Status != uiRunEnded || !cmp.Equal(ended.Checkpoints, open.Checkpoints) {
		t.Fatalf("after the log was removed: got %+v, want the records as last read and the run ended", ended)
	}
	if again := v.run(); !cmp.Equal(again, ended) {
		t.Fatalf("a second read after the end: got %+v, want %+v", again, ended)
	}
	if r := (&checkpointView{dir: v.dir}).run(); r != nil {
		t.Fatalf("a view started after the run: got %+v, want no run", r)
	}

	b, err := json.Marshal(open)
	if err != nil {
		t.Fatal(err)
	}
	shown := string(b) + strings.Join(emitted, "\n")
	for _, p := range []string{private, "PRIVATE-LINEAGE", "PRIVATE-EXTERNAL", "PRIVATE_REF", "handle", "owner"} {
		if strings.Contains(shown, p) {
			t.Errorf("the run panel or an agent's event carries %q:\n%s", p, shown)
		}
	}
	if len(emitted) != len(steps) {
		t.Fatalf("agent events: got %q, want one per record", emitted)
	}
	for i, e := range emitted {
		kind, data, _ := strings.Cut(e, " ")
		var c ui.Checkpoint
		if err := json.Unmarshal([]byte(data), &c); err != nil || kind != ui.EventCheckpoint || !cmp.Equal(c, open.Checkpoints[i+1]) {
			t.Errorf("agent event %d: %s %s (%v), want the panel's record %+v", i, kind, data, err, open.Checkpoints[i+1])
		}
	}
}
