package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

func fakeSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

const secretValue = "hunter2-plaintext-token"

type harness struct {
	t     *testing.T
	dir   string
	fake  *fake.Driver
	store *fileStore
	ex    *Executor
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	d, err := fake.New(fake.Options{Path: filepath.Join(dir, "world.json")})
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessWith(t, dir, d)
}

func newHarnessWith(t *testing.T, dir string, d *fake.Driver) *harness {
	reg := driver.NewRegistry()
	if err := reg.Register(d); err != nil {
		t.Fatal(err)
	}
	store := newFileStore(dir)
	ex := &Executor{Registry: reg, State: store, Dir: dir, Parallelism: 4, Resources: handlers.Builtin(),
		Resolve: func(ctx context.Context, s string) (string, error) {
			if s == "secret://env/WEB_TOKEN" {
				return secretValue, nil
			}
			return "", fmt.Errorf("resolve %s: missing", s)
		}}
	return &harness{t: t, dir: dir, fake: d, store: store, ex: ex}
}

func (h *harness) state() *states.State {
	h.t.Helper()
	st, err := h.store.Read(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) apply(desired []Action, replace ...string) (*Result, error) {
	plan := &Request{Fingerprint: "fp-test", Actions: planFor(h.state(), desired, replace...)}
	return h.ex.Apply(context.Background(), plan)
}

func (h *harness) mustApply(desired []Action, replace ...string) *Result {
	h.t.Helper()
	res, err := h.apply(desired, replace...)
	if err != nil {
		h.t.Fatalf("apply: %v", err)
	}
	return res
}

// checkAgree asserts that state and the fake world agree exactly: every state object exists
// with its markers, and every object carrying the topology's markers is in state (no leak, no
// duplicate).
func checkAgree(t *testing.T, st *states.State, d *fake.Driver) {
	t.Helper()
	w := d.World()
	refs := map[string]bool{}
	nodes, nets, pols := 0, 0, 0
	for _, r := range st.Resources {
		switch kindOf(r.Addr) {
		case specs.KindNode:
			nodes++
			n := w.Nodes[r.ExternalID]
			if n == nil || n.Marker != r.Owner.Marker() || !n.Running || n.Quiesced {
				t.Errorf("%s: state says %s, world has %+v", r.Addr, r.ExternalID, n)
				continue
			}
			refs[n.ID] = true
			for _, at := range r.Attachments {
				id := n.ID + "/" + at.Name
				c := w.NICs[id]
				if c == nil || c.MAC != at.MAC || !c.Up {
					t.Errorf("%s: attachment %s: world has %+v", r.Addr, at.Name, c)
				}
				refs[id] = true
			}
			if r.Observation.Status != substrate.Present {
				t.Errorf("%s: observation %s, want present", r.Addr, r.Observation.Status)
			}
		case specs.KindNetwork:
			nets++
			if n := w.Networks[r.ExternalID]; n == nil || n.Marker != r.Owner.Marker() {
				t.Errorf("%s: network %s missing or foreign", r.Addr, r.ExternalID)
			}
			refs[r.ExternalID] = true
		case specs.KindPolicy:
			pols++
			if p := w.Policies[r.ExternalID]; p == nil || p.Marker != r.Owner.Marker() {
				t.Errorf("%s: policy %s missing or foreign", r.Addr, r.ExternalID)
			}
			refs[r.ExternalID] = true
		}
	}
	res, err := d.Residue(context.Background(), st.Lineage)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res {
		if !refs[o.ExternalID] {
			t.Errorf("leaked %s %s (owner %s gen %d) not in state", o.Kind, o.ExternalID, o.Owner.Address, o.Owner.Generation)
		}
	}
	if len(w.Nodes) != nodes || len(w.Networks) != nets || len(w.Policies) != pols {
		t.Errorf("world has %d nodes %d networks %d policies, state %d %d %d", len(w.Nodes), len(w.Networks), len(w.Policies), nodes, nets, pols)
	}
}

func TestApplyCreatesTopologyAndConverges(t *testing.T) {
	h := newHarness(t)
	desired := topology(2, 5, true)
	res := h.mustApply(desired)
	if res.Done != len(desired) {
		t.Fatalf("done: got %d, want %d", res.Done, len(desired))
	}
	st := h.state()
	if got := len(st.Resources); got != len(desired) {
		t.Fatalf("state resources: got %d, want %d", got, len(desired))
	}
	checkAgree(t, st, h.fake)
	// The secret reached the provider call and nothing durable.
	web0 := st.Resource(mustAddr("sysbox_node.web[0]"))
	if got := h.fake.LastEnvironment(web0.ExternalID)["TOKEN"]; got != secretValue {
		t.Fatalf("resolved secret at provider: got %q, want the plaintext", got)
	}
	filepath.Walk(h.dir, func(p string, fi os.FileInfo, err error) error {
		if fi != nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(secretValue)) {
				t.Errorf("secret plaintext found in %s", p)
			}
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint log left after a finished run: %v", err)
	}
	// Second apply plans only no-ops and calls no mutating driver method.
	before := h.fake.World().Mutations
	res = h.mustApply(desired)
	if res.Noop != len(desired) || res.Done != 0 {
		t.Fatalf("no-change apply: got %d no-op %d done, want %d no-op", res.Noop, res.Done, len(desired))
	}
	if after := h.fake.World().Mutations; after != before {
		t.Fatalf("no-change apply mutated the world: %d → %d", before, after)
	}
}

func TestStalePlanAndMissingCapabilityMutateNothing(t *testing.T) {
	h := newHarness(t)
	stale := errors.New("stale plan: state serial 0, plan made at serial 7")
	plan := &Request{Actions: planFor(nil, topology(1, 2, false)), Verify: func(context.Context, *states.State) error { return stale }}
	if _, err := h.ex.Apply(context.Background(), plan); !errors.Is(err, stale) {
		t.Fatalf("stale plan: got %v", err)
	}
	acts := planFor(nil, topology(1, 2, false))
	acts[2].Driver = "docker"
	_, err := h.ex.Apply(context.Background(), &Request{Actions: acts})
	var mc *driver.MissingCapabilityError
	if !errors.As(err, &mc) || !strings.Contains(err.Error(), "sysbox_node.web[0]") {
		t.Fatalf("missing driver: got %v", err)
	}
	if w := h.fake.World(); w.Mutations != 0 {
		t.Fatalf("world mutated %d times before verification failed", w.Mutations)
	}
	if st := h.state(); st != nil {
		t.Fatalf("state saved before verification failed: serial %d", st.Serial)
	}
	unknownAct := planFor(nil, topology(1, 1, false))
	unknownAct[0].Op = plans.Unknown
	if _, err := h.ex.Apply(context.Background(), &Request{Actions: unknownAct}); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("unknown action: got %v", err)
	}
}

func TestDestroyEndsWithCleanAuditAndRefusesForeignObjects(t *testing.T) {
	h := newHarness(t)
	h.mustApply(topology(2, 4, true))
	st := h.state()
	victim := st.Resource(mustAddr("sysbox_node.web[3]"))
	// Someone replaced web[3]'s object with one carrying another owner: same id, other marker.
	foreign := substrate.Owner{Topology: "someone-else", Address: "x", Type: "sysbox_node", Generation: 1}
	if err := h.fake.SetMarker(victim.ExternalID, foreign.Marker()); err != nil {
		t.Fatal(err)
	}
	_, _, err := h.ex.Destroy(context.Background(), nil)
	if !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("destroy with a foreign object: got %v, want ErrNotOwned", err)
	}
	if h.fake.World().Nodes[victim.ExternalID] == nil {
		t.Fatal("foreign object deleted")
	}
	after := h.state()
	if after.Resource(victim.Addr) == nil {
		t.Fatal("refused resource dropped from state")
	}
	// Its dependencies were skipped (dependents go first); everything else is gone.
	if got := len(after.Resources); got != 3 {
		t.Fatalf("state after partial destroy: got %v, want web[3], its network and its artifact", after.Addresses())
	}
	// Put the marker back: destroy completes and the audit is clean.
	if err := h.fake.SetMarker(victim.ExternalID, victim.Owner.Marker()); err != nil {
		t.Fatal(err)
	}
	_, residue, err := h.ex.Destroy(context.Background(), nil)
	if err != nil || len(residue) != 0 {
		t.Fatalf("destroy: got %v residue %v", err, residue)
	}
	if st := h.state(); len(st.Resources) != 0 {
		t.Fatalf("state after destroy: %v", st.Addresses())
	}
	if h.store.snapshots == 0 {
		t.Fatal("no snapshot taken before destroy")
	}
}

func TestDestroyReportsResidue(t *testing.T) {
	h := newHarness(t)
	h.mustApply(topology(1, 1, false))
	st := h.state()
	// A leftover carrying this topology's markers that state does not know (e.g. made by a
	// crashed run of an older binary).
	ctx := context.Background()
	lost := substrate.Owner{Topology: st.Lineage, Address: "sysbox_node.lost", Type: "sysbox_node", Generation: 1}
	if _, err := h.fake.CreateNode(ctx, substrate.NodeSpec{Owner: lost}); err != nil {
		t.Fatal(err)
	}
	_, residue, err := h.ex.Destroy(ctx, nil)
	var re *ResidueError
	if !errors.As(err, &re) || len(residue) != 1 || residue[0].Owner.Address != "sysbox_node.lost" {
		t.Fatalf("destroy with residue: got %v %v", err, residue)
	}
}

func TestResetReplacesOnlyTheTargetGeneration(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 3, true)
	h.mustApply(desired)
	before := h.state()
	ctx := context.Background()
	res, err := h.ex.Reset(ctx, ResetRequest{Targets: []addrs.Instance{mustAddr("sysbox_node.web[0]")}, Desired: desired})
	if err != nil {
		t.Fatalf("reset: %v (%+v)", err, res)
	}
	after := h.state()
	checkAgree(t, after, h.fake)
	b0, a0 := before.Resource(mustAddr("sysbox_node.web[0]")), after.Resource(mustAddr("sysbox_node.web[0]"))
	if a0.ExternalID == b0.ExternalID {
		t.Fatal("external id did not change")
	}
	if a0.Owner.Generation != b0.Owner.Generation+1 {
		t.Fatalf("generation: got %d, want %d", a0.Owner.Generation, b0.Owner.Generation+1)
	}
	if a0.Attachments[0].MAC != b0.Attachments[0].MAC || strings.Join(a0.Attachments[0].IPv4, ",") != strings.Join(b0.Attachments[0].IPv4, ",") {
		t.Fatalf("attachment identity changed: %+v → %+v", b0.Attachments[0], a0.Attachments[0])
	}
	// The replacement runs the same baseline and state keeps the same artifact identity.
	if got := h.fake.World().Nodes[a0.ExternalID].Digest; got != fakeSHA("./rootfs.tar") {
		t.Fatalf("replacement artifact digest: got %s, want %s", got, fakeSHA("./rootfs.tar"))
	}
	artifactOf := func(r *states.Resource) string {
		var attrs struct {
			Artifact json.RawMessage `json:"artifact"`
		}
		if err := json.Unmarshal(r.Attributes, &attrs); err != nil || len(attrs.Artifact) == 0 {
			t.Fatalf("%s: no artifact in public attributes %s (%v)", r.Addr, r.Attributes, err)
		}
		return string(attrs.Artifact)
	}
	if b, a := artifactOf(b0), artifactOf(a0); a != b {
		t.Fatalf("artifact identity changed by reset: %s → %s", b, a)
	}
	for _, other := range []string{"sysbox_node.web[1]", "sysbox_node.web[2]", "sysbox_network.lan[0]"} {
		b, a := before.Resource(mustAddr(other)), after.Resource(mustAddr(other))
		if a.ExternalID != b.ExternalID || a.Owner != b.Owner || !a.UpdatedAt.Equal(b.UpdatedAt) {
			t.Errorf("%s touched by a targeted reset", other)
		}
	}
	// The firewall lives in the node: it was re-installed on the new generation.
	fw := after.Resource(mustAddr("sysbox_firewall.web0"))
	if p := h.fake.World().Policies[fw.ExternalID]; p == nil || p.Node != a0.ExternalID {
		t.Fatalf("firewall not re-installed on the new generation: %+v", p)
	}
}

func TestResetRefusesChangedBaseline(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 1, false)
	h.mustApply(desired)
	before := h.fake.World()
	if err := h.fake.SetArtifact("./rootfs.tar", "tampered"); err != nil {
		t.Fatal(err)
	}
	_, err := h.ex.Reset(context.Background(), ResetRequest{Targets: []addrs.Instance{mustAddr("sysbox_node.web[0]")}, Desired: desired})
	if !errors.Is(err, driver.ErrDigestMismatch) {
		t.Fatalf("reset with changed baseline: got %v, want ErrDigestMismatch", err)
	}
	if after := h.fake.World(); after.Mutations != before.Mutations {
		t.Fatalf("world mutated (%d → %d) although the baseline check failed", before.Mutations, after.Mutations)
	}
}

func TestReplaceBumpsGenerationAndLeavesNoResidue(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 2, true)
	h.mustApply(desired)
	b := h.state().Resource(mustAddr("sysbox_node.web[1]"))
	h.mustApply(desired, "sysbox_node.web[1]")
	st := h.state()
	a := st.Resource(mustAddr("sysbox_node.web[1]"))
	if a.ExternalID == b.ExternalID || a.Owner.Generation != 2 {
		t.Fatalf("replace: got %s gen %d, want a new object at gen 2", a.ExternalID, a.Owner.Generation)
	}
	checkAgree(t, st, h.fake)
}

func TestUnknownObservationStopsAndRecoveryResumes(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 2, false)
	// The driver stops answering right when the first node is observed after start.
	h.fake.SetFailpoint("ObserveNode", 1, fake.FailUnavailable)
	_, err := h.apply(desired)
	if !errors.Is(err, ErrUnknownObservation) {
		t.Fatalf("apply: got %v, want ErrUnknownObservation", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); err != nil {
		t.Fatalf("checkpoint not kept after an unknown observation: %v", err)
	}
	// Still unavailable: recovery stops too, and keeps the checkpoint.
	h.fake.SetUnavailable(true)
	if _, err := h.ex.Recover(context.Background()); !errors.Is(err, ErrUnknownObservation) {
		t.Fatalf("recover while unavailable: got %v", err)
	}
	h.fake.SetUnavailable(false)
	rep, err := h.ex.Recover(context.Background())
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if rep.Nothing {
		t.Fatal("recover found nothing")
	}
	checkAgree(t, h.state(), h.fake)
	serial := h.state().Serial
	rep, err = h.ex.Recover(context.Background())
	if err != nil || !rep.Nothing || h.state().Serial != serial {
		t.Fatalf("second recover: got %+v %v, want nothing done", rep, err)
	}
	// The next apply creates what the interrupted run never started.
	h.mustApply(desired)
	st := h.state()
	if len(st.Resources) != len(desired) {
		t.Fatalf("after re-apply: %v", st.Addresses())
	}
	checkAgree(t, st, h.fake)
}

func TestFailedCreateIsRecordedNotLeaked(t *testing.T) {
	h := newHarness(t)
	h.fake.SetFailpoint("StartNode", 1, fake.FailError)
	_, err := h.apply(topology(1, 1, false))
	if !errors.Is(err, fake.ErrInjected) {
		t.Fatalf("apply: got %v, want the injected failure", err)
	}
	st := h.state()
	n := st.Resource(mustAddr("sysbox_node.web[0]"))
	if n == nil || n.Observation.Status != substrate.Degraded {
		t.Fatalf("failed node: got %+v, want it in state as degraded", n)
	}
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a failed (not crashed) run left its checkpoint")
	}
	h.fake.ClearFailpoints()
	_, _, err = h.ex.Destroy(context.Background(), nil)
	if err != nil {
		t.Fatalf("destroy: %v", err)
	}
}

func TestRefreshNeverTurnsUnknownIntoAbsent(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 2, true)
	h.mustApply(desired)
	st := h.state()
	web1 := st.Resource(mustAddr("sysbox_node.web[1]"))
	if err := h.fake.Remove(web1.ExternalID + "/lan"); err != nil {
		t.Fatal(err)
	}
	fw := st.Resource(mustAddr("sysbox_firewall.web0"))
	h.fake.SetPolicyDigest(fw.ExternalID, "sha256:edited")
	got, err := h.ex.Refresh(context.Background(), desired)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]substrate.Status{"sysbox_node.web[0]": substrate.Present, "sysbox_node.web[1]": substrate.Degraded,
		"sysbox_firewall.web0": substrate.Drifted, "sysbox_network.lan[0]": substrate.Present}
	for a, w := range want {
		if got[a] != w {
			t.Errorf("refresh %s: got %s, want %s", a, got[a], w)
		}
	}
	h.fake.SetUnavailable(true)
	got, err = h.ex.Refresh(context.Background(), desired)
	if !errors.Is(err, ErrUnknownObservation) && !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("refresh while unavailable: got %v", err)
	}
	if got["sysbox_node.web[0]"] != substrate.Unknown {
		t.Fatalf("unavailable node: got %s, want unknown", got["sysbox_node.web[0]"])
	}
	if s := h.state().Resource(mustAddr("sysbox_node.web[0]")); s.Observation.Status != substrate.Unknown {
		t.Fatalf("stored observation: got %s, want unknown", s.Observation.Status)
	}
}

func TestImportAndExec(t *testing.T) {
	h := newHarness(t)
	h.mustApply(topology(1, 1, false))
	if err := h.fake.AddForeignNode("legacy-7"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := h.ex.Import(ctx, Action{Addr: mustAddr("sysbox_node.legacy"), Kind: specs.KindNode, Driver: "fake", Deps: []addrs.Instance{mustAddr("sysbox_network.lan[0]")},
		Node: &specs.NodeSpec{Attachments: []specs.Attachment{{Name: "lan", Network: mustAddr("sysbox_network.lan[0]")}}}}, "legacy-7")
	if err != nil {
		t.Fatal(err)
	}
	if r.ExternalID != "legacy-7" || r.Owner.Generation != 1 {
		t.Fatalf("import: got %+v", r)
	}
	if r.Observation.Status != substrate.Degraded || !strings.Contains(r.Observation.Reason, "lan") {
		t.Fatalf("import of a node lacking its configured attachment: observation %+v, want degraded", r.Observation)
	}
	if _, err := h.ex.Import(ctx, Action{Addr: mustAddr("sysbox_node.legacy"), Kind: specs.KindNode, Driver: "fake", Deps: []addrs.Instance{mustAddr("sysbox_network.lan[0]")}}, "legacy-7"); err == nil {
		t.Fatal("second import to a taken address accepted")
	}
	out, err := h.ex.Exec(ctx, mustAddr("sysbox_node.web[0]"), substrate.ExecRequest{Argv: []string{"echo", "hi"}})
	if err != nil || string(out.Stdout) != "hi\n" {
		t.Fatalf("exec: got %q %v", out.Stdout, err)
	}
	// Destroy deletes the imported node too (its markers were written on import).
	if _, _, err := h.ex.Destroy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h.fake.World().Nodes); n != 0 {
		t.Fatalf("nodes after destroy: %d", n)
	}
}

func TestCheckpointGroupCommit(t *testing.T) {
	dir := t.TempDir()
	l, err := CreateLog(dir, RunHeader{Run: "r1", Lineage: "L"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const workers, each = 16, 20
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := l.Checkpoint(testOp(fmt.Sprintf("sysbox_node.n[%d]", w), StepCreated)); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	s := l.Stats()
	if s.Records != workers*each+1 {
		t.Fatalf("records: got %d, want %d", s.Records, workers*each+1)
	}
	if s.Syncs >= s.Records {
		t.Fatalf("no group commit: %d syncs for %d records", s.Syncs, s.Records)
	}
	t.Logf("%d records in %d fsyncs", s.Records, s.Syncs)
	l.Close()
	it, err := ReadLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(it.Ops) != workers || it.Header.Run != "r1" {
		t.Fatalf("read back: got %v, %d ops", err, len(it.Ops))
	}
}

func TestReadLogTornTailAndCorruption(t *testing.T) {
	write := func(t *testing.T, extra func(p string)) (string, *Interrupted, error) {
		dir := t.TempDir()
		l, err := CreateLog(dir, RunHeader{Run: "r", Lineage: "L"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Checkpoint(testOp("sysbox_node.a", StepBegin))
		l.Checkpoint(testOp("sysbox_node.a", StepCreated))
		l.Close()
		p := filepath.Join(dir, CheckpointFile)
		extra(p)
		it, err := ReadLog(dir)
		return p, it, err
	}
	t.Run("torn last record ignored at every byte", func(t *testing.T) {
		var full []byte
		write(t, func(p string) { full, _ = os.ReadFile(p) })
		lastStart := bytes.LastIndexByte(full[:len(full)-1], '\n') + 1
		for size := lastStart + 1; size < len(full); size++ {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, CheckpointFile), full[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			it, err := ReadLog(dir)
			if err != nil || !it.TornTail || len(it.Ops) != 1 || it.Ops[0].Step != StepBegin {
				t.Fatalf("cut at byte %d of the last record: got %v %+v, want the header, the begin record and a torn tail", size-lastStart, err, it)
			}
			// Recovery reopens the log: the incomplete record is cut, appends follow the last good one.
			l, err := reopenLog(it, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(testOp("sysbox_node.a", StepDone)); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if it, err := ReadLog(dir); err != nil || it.TornTail || it.Ops[0].Step != StepDone {
				t.Fatalf("cut at byte %d, reopened and appended: got %v %+v", size-lastStart, err, it)
			}
		}
	})
	t.Run("complete last record with a bad checksum refused", func(t *testing.T) {
		_, _, err := write(t, func(p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"created"`), []byte(`"deleted"`), 1), 0o600)
		})
		if err == nil || !errors.Is(err, durable.ErrCorrupt) || !strings.Contains(err.Error(), "record 3") {
			t.Fatalf("got %v, want a corrupt record 3", err)
		}
	})
	t.Run("corrupt middle refused", func(t *testing.T) {
		_, _, err := write(t, func(p string) {
			b, _ := os.ReadFile(p)
			lines := bytes.SplitAfter(b, []byte("\n"))
			lines[1] = bytes.Replace(lines[1], []byte(`"begin"`), []byte(`"done!"`), 1)
			os.WriteFile(p, bytes.Join(lines, nil), 0o600)
		})
		if err == nil || !strings.Contains(err.Error(), "record 2") {
			t.Fatalf("got %v, want a corrupt record 2", err)
		}
	})
	t.Run("unknown version refused", func(t *testing.T) {
		_, _, err := write(t, func(p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"version":1`), []byte(`"version":9`), 1), 0o600)
		})
		var nf *durable.NewerFormatError
		if !errors.As(err, &nf) || !strings.Contains(err.Error(), "checkpoint format 9 is newer than this sysbox (1)") {
			t.Fatalf("got %v, want checkpoint format 9 is newer than this sysbox (1)", err)
		}
	})
	t.Run("second run refused while one is interrupted", func(t *testing.T) {
		p, _, _ := write(t, func(string) {})
		if _, err := CreateLog(filepath.Dir(p), RunHeader{Run: "r2"}, nil); !errors.Is(err, ErrInterrupted) {
			t.Fatalf("got %v, want ErrInterrupted", err)
		}
	})
}

// TestReadLogFormat1Fixture reads a checkpoint log written by the code before records carried
// their sequence number in the envelope (testdata/checkpoint-v1.log).
func TestReadLogFormat1Fixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "checkpoint-v1.log"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	it, err := ReadLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if it.Header.Run != "run-1" || it.Header.Lineage != "lineage-1" || it.TornTail || it.Finished || len(it.Ops) != 2 {
		t.Fatalf("got %+v", it)
	}
	if op := it.Ops[0]; op.Addr != "sysbox_node.web[0]" || op.Step != StepCreated || op.Handle == nil || op.Handle.ExternalID != "sysbox-abc" {
		t.Fatalf("first op: got %+v", op)
	}
	// Recovery appends numbered records after the unnumbered ones.
	l, err := reopenLog(it, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(testOp("sysbox_node.web[0]", StepDone)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if it, err := ReadLog(dir); err != nil || it.Ops[0].Step != StepDone {
		t.Fatalf("after appending to the old log: %v %+v", err, it)
	}
}

func TestRecoverRefusesForeignCheckpoint(t *testing.T) {
	h := newHarness(t)
	h.mustApply(topology(1, 1, false))
	l, err := CreateLog(h.dir, RunHeader{Run: "r", Lineage: "another-topology", Fingerprint: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := h.ex.Recover(context.Background()); !errors.Is(err, ErrForeignCheckpoint) {
		t.Fatalf("got %v, want ErrForeignCheckpoint", err)
	}
	if _, err := h.apply(topology(1, 1, false)); !errors.Is(err, ErrForeignCheckpoint) {
		t.Fatalf("apply over a foreign checkpoint: got %v", err)
	}
}

func testOp(addr string, step Step) *OpState {
	return &OpState{Addr: addr, Op: plans.Create, Step: step, Action: Action{Addr: mustAddr(addr), Op: plans.Create, Kind: specs.KindNode}}
}

func TestFailedResetLeavesNothingBehind(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 2, false)
	h.mustApply(desired)
	before := h.state().Resource(mustAddr("sysbox_node.web[0]"))
	h.fake.SetFailpoint("StartNode", 0, fake.FailError)
	_, err := h.ex.Reset(context.Background(), ResetRequest{Targets: []addrs.Instance{before.Addr}, Desired: desired})
	if !errors.Is(err, fake.ErrInjected) {
		t.Fatalf("reset: got %v, want the injected failure", err)
	}
	h.fake.ClearFailpoints()
	after := h.state().Resource(before.Addr)
	if after.ExternalID != before.ExternalID || after.Observation.Status != substrate.Degraded {
		t.Fatalf("after failed reset: %s %s, want the prior generation recorded as degraded", after.ExternalID, after.Observation.Status)
	}
	if n := len(h.fake.World().Nodes); n != 2 {
		t.Fatalf("nodes after failed reset: %d, want 2 (replacement deleted)", n)
	}
	// Resetting again brings the node back.
	if _, err := h.ex.Reset(context.Background(), ResetRequest{Targets: []addrs.Instance{before.Addr}, Desired: desired}); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, h.state(), h.fake)
}

func TestDestroyAuditsUsedDriversStrictly(t *testing.T) {
	destroyWith := func(h *harness, drivers ...string) (*Result, []substrate.Object, error) {
		return h.ex.Destroy(context.Background(), &Request{Drivers: drivers,
			Prepare: func(_ context.Context, st *states.State) ([]Action, error) {
				return DestroyActions(st, handlers.Builtin())
			}})
	}
	for _, tc := range []struct {
		name        string
		declared    []string // the configuration's drivers besides the topology's own
		ownDown     bool     // the topology's own driver cannot answer the audit
		wantErr     error
		wantAudited []string
		wantSkipped []string
		wantOther   int // Residue calls the unrelated driver gets
	}{
		{name: "unrelated unavailable driver is not consulted", wantAudited: []string{"fake"}},
		{name: "configured driver unavailable fails", declared: []string{"other"}, wantErr: driver.ErrUnavailable, wantOther: 1},
		{name: "own driver unavailable fails", ownDown: true, wantErr: driver.ErrUnavailable},
		{name: "declared driver this sysbox lacks is skipped", declared: []string{"qemu"}, wantAudited: []string{"fake"}, wantSkipped: []string{"qemu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			other, _ := fake.New(fake.Options{Name: "other"})
			other.SetUnavailable(true)
			if err := h.ex.Registry.Register(other); err != nil {
				t.Fatal(err)
			}
			h.mustApply(topology(1, 1, false))
			if tc.ownDown {
				h.fake.SetFailpoint("Residue", 0, fake.FailUnavailable)
			}
			res, residue, err := destroyWith(h, tc.declared...)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("destroy: got %v, want %v", err, tc.wantErr)
				}
			} else if err != nil || len(residue) != 0 {
				t.Fatalf("destroy: got %v, residue %v; want a clean audit", err, residue)
			}
			if got := other.CountCalls("Residue"); got != tc.wantOther {
				t.Errorf("Residue calls to the unrelated driver: got %d, want %d", got, tc.wantOther)
			}
			if tc.wantErr == nil {
				if !cmp.Equal(res.Audited, tc.wantAudited) || !cmp.Equal(res.AuditSkipped, tc.wantSkipped) {
					t.Errorf("audited %v skipped %v, want %v and %v", res.Audited, res.AuditSkipped, tc.wantAudited, tc.wantSkipped)
				}
			}
		})
	}
}

// TestCancelledApplyIsRecoverable: Ctrl-C (a cancelled context) mid-apply starts nothing more;
// an operation it interrupted is left unfinished (not failed) and recovery finishes it.
func TestCancelledApplyIsRecoverable(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.ex.Parallelism = 1
	h.ex.Progress = func(ev Event) {
		if ev.Addr == "sysbox_node.web[1]" && ev.Phase == "start" {
			cancel()
		}
	}
	desired := topology(1, 3, false)
	_, err := h.ex.Apply(ctx, &Request{Actions: planFor(nil, desired)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled apply: got %v", err)
	}
	// web[1] began (its checkpoint says so) but its driver call was cancelled: the run is
	// unfinished, not failed; what was not started was not touched.
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); err != nil {
		t.Fatalf("checkpoint not kept after cancel: %v", err)
	}
	if st := h.state(); len(st.Resources) == len(desired) {
		t.Fatalf("cancel had no effect: %v", st.Addresses())
	}
	h.ex.Progress = nil
	if _, err := h.ex.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	checkAgree(t, h.state(), h.fake)
	h.mustApply(desired)
	checkAgree(t, h.state(), h.fake)
}

func TestRecoverNeedsItsDrivers(t *testing.T) {
	h := newHarness(t)
	h.fake.SetFailpoint("ObserveNode", 1, fake.FailUnavailable)
	if _, err := h.apply(topology(1, 1, false)); !errors.Is(err, ErrUnknownObservation) {
		t.Fatalf("apply: %v", err)
	}
	// A sysbox without the driver the interrupted run used refuses to touch the checkpoint.
	bare := &Executor{Registry: driver.NewRegistry(), State: h.store, Dir: h.dir, Resources: handlers.Builtin()}
	_, err := bare.Recover(context.Background())
	var mc *driver.MissingCapabilityError
	if !errors.As(err, &mc) {
		t.Fatalf("recover without the driver: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); err != nil {
		t.Fatal("checkpoint lost")
	}
	if _, err := h.ex.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, h.state(), h.fake)
}

// TestRecoveryStopsOnForeignMarkers: a recorded handle whose object now carries someone
// else's markers stops recovery with the checkpoint kept, and the object is not touched.
func TestRecoveryStopsOnForeignMarkers(t *testing.T) {
	h := newHarness(t)
	h.fake.SetFailpoint("ObserveNode", 1, fake.FailUnavailable)
	if _, err := h.apply(topology(1, 1, false)); !errors.Is(err, ErrUnknownObservation) {
		t.Fatalf("apply: %v", err)
	}
	it, err := ReadLog(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	var node string
	for _, op := range it.Ops {
		if op.Handle != nil && op.Action.Kind == specs.KindNode {
			node = op.Handle.ExternalID
		}
	}
	foreign := substrate.Owner{Topology: "other", Address: "sysbox_node.x", Type: "sysbox_node", Generation: 1}
	if err := h.fake.SetMarker(node, foreign.Marker()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ex.Recover(context.Background()); !errors.Is(err, ErrInvalidObservation) {
		t.Fatalf("recover over a foreign object: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); err != nil {
		t.Fatal("checkpoint not kept")
	}
	if n := h.fake.World().Nodes[node]; n == nil || n.Marker != foreign.Marker() {
		t.Fatal("foreign object touched")
	}
}

// interruptedWithLostNIC applies one node until its observation after start fails (the run is
// left for recovery with the node checkpointed past "wired"), then removes its NIC.
func interruptedWithLostNIC(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	h.fake.SetFailpoint("ObserveNode", 1, fake.FailUnavailable)
	if _, err := h.apply(topology(1, 1, false)); !errors.Is(err, ErrUnknownObservation) {
		t.Fatalf("apply: got %v, want ErrUnknownObservation", err)
	}
	h.fake.ClearFailpoints()
	it, err := ReadLog(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	var node *OpState
	for _, op := range it.Ops {
		if op.Action.Kind == specs.KindNode {
			node = op
		}
	}
	if node == nil || node.Handle == nil || !node.Step.atLeast(StepWired) {
		t.Fatalf("node checkpoint: got %+v, want a handle past %s", node, StepWired)
	}
	removed := 0
	for id, nic := range h.fake.World().NICs {
		if nic.Node == node.Handle.ExternalID {
			if err := h.fake.Remove(id); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed != 1 {
		t.Fatalf("removed %d NICs, want 1", removed)
	}
	return h
}

// TestRecoveryReconfiguresGuestNetworkAfterReattach: a node checkpointed past "wired" whose NIC
// was lost is re-attached by recovery, and its guest network (addresses, gateway, routes) is
// configured again — a re-attached NIC comes without them. Also when recovery itself is killed
// between the re-attach and the configuration: the next recovery configures it.
func TestRecoveryReconfiguresGuestNetworkAfterReattach(t *testing.T) {
	t.Run("recover", func(t *testing.T) {
		h := interruptedWithLostNIC(t)
		attaches, configures := h.fake.CountCalls("Attach"), h.fake.CountCalls("ConfigureGuestNetwork")
		if _, err := h.ex.Recover(context.Background()); err != nil {
			t.Fatalf("recover: %v", err)
		}
		if got := h.fake.CountCalls("Attach") - attaches; got != 1 {
			t.Fatalf("recovery Attach calls: got %d, want 1", got)
		}
		if got := h.fake.CountCalls("ConfigureGuestNetwork") - configures; got != 1 {
			t.Fatalf("recovery ConfigureGuestNetwork calls after re-attach: got %d, want 1", got)
		}
		checkAgree(t, h.state(), h.fake)
	})
	t.Run("recovery killed before configuring", func(t *testing.T) {
		h := interruptedWithLostNIC(t)
		r := runHelper(t, h.dir, "recover", "SYSBOX_FAKE_FAILPOINTS=ConfigureGuestNetwork@1=crash")
		if !r.Killed {
			t.Fatalf("recover with a crash at ConfigureGuestNetwork: got %+v, want it killed", r)
		}
		h = openDir(t, h.dir)
		if got := len(h.fake.World().NICs); got != 1 {
			t.Fatalf("NICs after the killed recovery: got %d, want the re-attached one", got)
		}
		if _, err := h.ex.Recover(context.Background()); err != nil {
			t.Fatalf("recover: %v", err)
		}
		if got := h.fake.CountCalls("ConfigureGuestNetwork"); got != 1 {
			t.Fatalf("ConfigureGuestNetwork calls of the second recovery: got %d, want 1", got)
		}
		checkAgree(t, h.state(), h.fake)
	})
}

// verifyRecorder records the identities VerifyArtifact is asked about.
type verifyRecorder struct {
	*fake.Driver
	mu  sync.Mutex
	ids []substrate.ArtifactIdentity
}

func (v *verifyRecorder) VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error {
	v.mu.Lock()
	v.ids = append(v.ids, id)
	v.mu.Unlock()
	return v.Driver.VerifyArtifact(ctx, id)
}

// appliedWithVerifyRecorder applies one node whose artifact comes from the artifact resource
// sysbox_artifact.rootfs (returned as art), through a driver recording VerifyArtifact calls.
func appliedWithVerifyRecorder(t *testing.T) (h *harness, rec *verifyRecorder, desired []Action, art addrs.Instance) {
	t.Helper()
	h = newHarness(t)
	rec = &verifyRecorder{Driver: h.fake}
	reg := driver.NewRegistry()
	if err := reg.Register(rec); err != nil {
		t.Fatal(err)
	}
	h.ex.Registry = reg
	desired = topology(1, 1, false)
	art = mustAddr("sysbox_artifact.rootfs")
	for i := range desired {
		if desired[i].Node != nil {
			desired[i].Node.ArtifactFrom = &art
		}
	}
	h.mustApply(desired)
	return h, rec, desired, art
}

// TestResetVerifiesTheArtifactAsCreated: reset verifies the baseline with the same spec
// construction as create — the artifact identity carries the driver's reference (from the
// artifact resource in state), not the bare configured identity.
func TestResetVerifiesTheArtifactAsCreated(t *testing.T) {
	h, rec, desired, art := appliedWithVerifyRecorder(t)
	ref := h.state().Resource(art).ExternalID
	if ref == "" {
		t.Fatal("artifact has no driver reference in state")
	}
	node := mustAddr("sysbox_node.web[0]")
	if _, err := h.ex.Reset(context.Background(), ResetRequest{Targets: []addrs.Instance{node}, Desired: desired}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if len(rec.ids) != 1 {
		t.Fatalf("VerifyArtifact calls: got %d, want 1", len(rec.ids))
	}
	if got := rec.ids[0]; got.Ref != ref || got.Digest == "" {
		t.Fatalf("reset verified %+v, want the identity with ref %s (as the node is created)", got, ref)
	}
}

// TestReplaceVerifiesBaselineBeforeDeletingPrior: a replace verifies the new generation's
// baseline before it deletes the running node. A changed, unverifiable (daemon unavailable) or
// failing baseline check keeps the node, in the world and in state, untouched.
func TestReplaceVerifiesBaselineBeforeDeletingPrior(t *testing.T) {
	node := mustAddr("sysbox_node.web[0]")
	for _, tc := range []struct {
		name   string
		breakf func(h *harness)
		is     error
	}{
		{"changed baseline", func(h *harness) {
			if err := h.fake.SetArtifact("./rootfs.tar", "tampered"); err != nil {
				t.Fatal(err)
			}
		}, driver.ErrDigestMismatch},
		{"daemon unavailable", func(h *harness) { h.fake.SetFailpoint("VerifyArtifact", 1, fake.FailUnavailable) }, driver.ErrUnavailable},
		{"verify error", func(h *harness) { h.fake.SetFailpoint("VerifyArtifact", 1, fake.FailError) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			desired := topology(1, 1, false)
			h.mustApply(desired)
			before := h.state().Resource(node)
			mutations := h.fake.World().Mutations
			tc.breakf(h)
			_, err := h.apply(desired, node.String())
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), "verify baseline") {
				t.Fatalf("replace with a bad baseline: got %v, want a baseline refusal (%v)", err, tc.is)
			}
			w := h.fake.World()
			if n := w.Nodes[before.ExternalID]; n == nil {
				t.Fatalf("running node %s was deleted although its replacement's baseline did not verify", before.ExternalID)
			}
			if w.Mutations != mutations {
				t.Fatalf("world mutated (%d → %d) although the baseline check failed", mutations, w.Mutations)
			}
			after := h.state().Resource(node)
			if after == nil || after.ExternalID != before.ExternalID || after.Owner != before.Owner {
				t.Fatalf("state lost or changed the running node: before %+v, after %+v", before, after)
			}
		})
	}
}

// TestReplaceWithItsArtifactChangedInTheSameRun: when the node's artifact resource is itself
// resolved anew by the run (another digest than in state), the replace leaves that identity to
// the artifact's resolve instead of refusing an image that is not loaded yet; an artifact
// resource unchanged in state is verified with its driver reference.
func TestReplaceWithItsArtifactChangedInTheSameRun(t *testing.T) {
	h, rec, desired, art := appliedWithVerifyRecorder(t)
	node := mustAddr("sysbox_node.web[0]")
	h.mustApply(desired, node.String())
	if len(rec.ids) != 1 || rec.ids[0].Ref != h.state().Resource(art).ExternalID {
		t.Fatalf("replace with a settled artifact: VerifyArtifact got %+v, want one call with the state's ref", rec.ids)
	}
	// New content, new digest: the artifact is re-resolved in the same run as the node replace.
	if err := h.fake.SetArtifact("./rootfs.tar", "v2"); err != nil {
		t.Fatal(err)
	}
	for i := range desired {
		if desired[i].Node != nil {
			desired[i].Node.Spec.Artifact.Digest = fakeDigest("v2")
		}
	}
	rec.ids = nil
	h.mustApply(desired, art.String(), node.String())
	if len(rec.ids) != 0 {
		t.Fatalf("replace verified an artifact the same run resolves anew: %+v", rec.ids)
	}
	checkAgree(t, h.state(), h.fake)
}

// A checkpoint path that is a dangling symlink is not "no interrupted run": it is refused,
// naming the link, as a state path is (a directory in its place is refused too).
func TestReadLogRefusesDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	if it, err := ReadLog(dir); it != nil || err != nil {
		t.Fatalf("no log: got %v %v, want nil, nil", it, err)
	}
	link := filepath.Join(dir, CheckpointFile)
	if err := os.Symlink(filepath.Join(dir, "gone"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLog(dir); !errors.Is(err, durable.ErrDanglingSymlink) {
		t.Fatalf("dangling symlink: got %v, want ErrDanglingSymlink", err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(link, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLog(dir); err == nil {
		t.Fatal("directory in place of the log: got no error")
	}
}
