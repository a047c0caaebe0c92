// Package storetest is the conformance suite of the control plane's store, run against every
// database it supports (SQLite in the unit tier, PostgreSQL in the daemon tier). Imported only
// by tests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/store"
)

// Harness says how to get databases.
type Harness struct {
	// Fresh makes a new, empty database that lives as long as t and returns how to open it;
	// each call of open is a new handle (its own connections).
	Fresh func(t *testing.T) (open func() (*store.Store, error))
}

// Clock is a test clock shared by every handle of one test.
type Clock struct{ ns atomic.Int64 }

// NewClock starts at a fixed time.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Run runs every case.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e env)
	}{
		{"ProjectsAndWorkspaces", testProjects},
		{"RevisionsAreContentAddressed", testRevisions},
		{"ObjectsOfOtherProjectsAreNotFound", testScope},
		{"ClaimMatchesCapabilities", testClaimCapabilities},
		{"EpochFencesEveryWrite", testFencing},
		{"StickyRunReclaimedOnlyByItsAgent", testSticky},
		{"CommandRunsPlanOutputAffinity", testCommandRuns},
		{"ConcurrentClaimersOneWinner", testConcurrentClaim},
		{"ClaimLooksPastRunsItCannotTake", testClaimPastUnclaimable},
		{"RevokedAgentsStickyRunsFail", testRevokedStickyHolder},
		{"ReadsCheckTheLease", testHeld},
		{"ConcurrentAppendsDenseSequence", testConcurrentAppend},
		{"TokensStoredHashedJoinOnce", testTokens},
		{"AgentsRevokeAndNonces", testAgents},
		{"MigrationIdempotentNewerRefused", testMigrate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := h.Fresh(t)
			clock := NewClock()
			open := func(t *testing.T) *store.Store {
				t.Helper()
				s, err := raw()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				s.Now = clock.Now
				return s
			}
			tc.fn(t, env{open, raw, clock})
		})
	}
}

// env is one case's database: open gives a handle closed at the test's end that uses clock;
// raw opens one as it is.
type env struct {
	open  func(t *testing.T) *store.Store
	raw   func() (*store.Store, error)
	clock *Clock
}

var ctx = context.Background()

// ok(f())(t) is f's value; f's error fails t.
func ok[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// fixture is a project with a workspace and a plan requiring caps.
type fixture struct {
	project store.Project
	ws      store.Workspace
	plan    store.Plan
}

func newFixture(t *testing.T, s *store.Store, name string, caps ...string) fixture {
	t.Helper()
	p := ok(s.CreateProject(ctx, name))(t)
	w := ok(s.CreateWorkspace(ctx, p.ID, "lab"))(t)
	rev, _ := must2(t)(s.PutRevision(ctx, p.ID, []byte("bundle of "+name)))
	pl := ok(s.PutPlan(ctx, p.ID, w.ID, rev.Digest, []byte(`{"plan":"`+name+`"}`), caps))(t)
	return fixture{p, w, pl}
}

// must2 is ok for PutRevision's two values.
func must2(t *testing.T) func(store.Revision, bool, error) (store.Revision, bool) {
	return func(r store.Revision, c bool, err error) (store.Revision, bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r, c
	}
}

func testProjects(t *testing.T, e env) {
	open := e.open
	s := open(t)
	p := ok(s.CreateProject(ctx, "red"))(t)
	_, err := s.CreateProject(ctx, "red")
	wantErr(t, "second project red", err, store.ErrExists)
	w := ok(s.CreateWorkspace(ctx, p.ID, "lab"))(t)
	_, err = s.CreateWorkspace(ctx, p.ID, "lab")
	wantErr(t, "second workspace lab", err, store.ErrExists)
	q := ok(s.CreateProject(ctx, "blue"))(t)
	ok(s.CreateWorkspace(ctx, q.ID, "lab"))(t) // names are per project
	got := ok(s.Workspace(ctx, p.ID, w.ID))(t)
	if got.Name != "lab" || got.Project != p.ID {
		t.Fatalf("got workspace %+v, want lab of %s", got, p.ID)
	}
	if ps := ok(s.Projects(ctx))(t); len(ps) != 2 || ps[0].Name != "blue" || ps[1].Name != "red" {
		t.Fatalf("got projects %+v, want blue, red", ps)
	}
	_, err = s.CreateWorkspace(ctx, "prj_missing", "lab")
	wantErr(t, "workspace of a missing project", err, store.ErrNotFound)
}

func testRevisions(t *testing.T, e env) {
	open := e.open
	s := open(t)
	p := ok(s.CreateProject(ctx, "red"))(t)
	bundle := []byte("resource \"netns\" \"a\" {}\n")
	r1, created := must2(t)(s.PutRevision(ctx, p.ID, bundle))
	if !created || r1.Digest != store.Digest(bundle) || !strings.HasPrefix(r1.Digest, "sha256:") {
		t.Fatalf("got %+v created=%v, want a new revision named by its sha256", r1, created)
	}
	r2, created := must2(t)(s.PutRevision(ctx, p.ID, bundle))
	if created || r2.Digest != r1.Digest || !r2.Created.Equal(r1.Created) {
		t.Fatalf("second put: got %+v created=%v, want the first revision %+v unchanged", r2, created, r1)
	}
	if got := ok(s.RevisionBundle(ctx, p.ID, r1.Digest))(t); string(got) != string(bundle) {
		t.Fatalf("got bundle %q, want %q", got, bundle)
	}
	// A row altered behind the store's back is detected, not served.
	if _, err := s.DB().Exec(`UPDATE cp_revisions SET bundle = `+param(s, 1)+` WHERE digest = `+param(s, 2), []byte("tampered"), r1.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevisionBundle(ctx, p.ID, r1.Digest); err == nil || !strings.Contains(err.Error(), "altered") {
		t.Fatalf("tampered revision: got %v, want an error saying the database was altered", err)
	}
}

func param(s *store.Store, n int) string {
	if s.Kind() == "postgres" {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

func testScope(t *testing.T, e env) {
	open := e.open
	s := open(t)
	a := newFixture(t, s, "red")
	b := newFixture(t, s, "blue")
	run := ok(s.CreateRun(ctx, a.project.ID, a.plan.ID, "apply", false))(t)
	for what, err := range map[string]error{
		"workspace": func() error { _, err := s.Workspace(ctx, b.project.ID, a.ws.ID); return err }(),
		"plan":      func() error { _, _, err := s.PlanData(ctx, b.project.ID, a.plan.ID); return err }(),
		"run":       func() error { _, err := s.Run(ctx, b.project.ID, run.ID); return err }(),
		"events":    func() error { _, err := s.Events(ctx, b.project.ID, run.ID, 0, 10); return err }(),
		"revision":  func() error { _, err := s.RevisionBundle(ctx, b.project.ID, a.plan.Revision); return err }(),
		"new run":   func() error { _, err := s.CreateRun(ctx, b.project.ID, a.plan.ID, "apply", false); return err }(),
		"plan in":   func() error { _, err := s.PutPlan(ctx, b.project.ID, a.ws.ID, "", []byte("x"), nil); return err }(),
		"projs":     func() error { _, err := s.Projections(ctx, b.project.ID, a.ws.ID); return err }(),
		"revoke":    func() error { return s.RevokeAgent(ctx, b.project.ID, "agt_x") }(),
	} {
		wantErr(t, "project blue reading red's "+what, err, store.ErrNotFound)
	}
	// An agent of another project never claims the run.
	_, err := s.ClaimRun(ctx, b.project.ID, "agt_blue", nil, time.Minute)
	wantErr(t, "claim from project blue", err, store.ErrNoRun)
	if rs := ok(s.Runs(ctx, a.project.ID, a.ws.ID))(t); len(rs) != 1 || rs[0].ID != run.ID {
		t.Fatalf("got runs %+v, want [%s]", rs, run.ID)
	}
}

func testClaimCapabilities(t *testing.T, e env) {
	open := e.open
	s := open(t)
	f := newFixture(t, s, "red", "docker", "netns")
	run := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	_, err := s.ClaimRun(ctx, f.project.ID, "agt_ns", []string{"netns", "nftables"}, time.Minute)
	wantErr(t, "netns-only agent claiming a docker run", err, store.ErrNoRun)
	l := ok(s.ClaimRun(ctx, f.project.ID, "agt_dk", []string{"netns", "docker"}, time.Minute))(t)
	if l.Run.ID != run.ID || l.Epoch != 1 || l.Agent != "agt_dk" {
		t.Fatalf("got lease %+v, want run %s epoch 1 for agt_dk", l, run.ID)
	}
	_, err = s.ClaimRun(ctx, f.project.ID, "agt_dk2", []string{"netns", "docker"}, time.Minute)
	wantErr(t, "claiming a run with a live lease", err, store.ErrNoRun)
	_, err = s.ClaimRun(ctx, f.project.ID, "agt_dk2", []string{"netns", "docker"}, 0)
	if err == nil {
		t.Fatal("claim with TTL 0: got nil error, want one")
	}
}

func testFencing(t *testing.T, e env) {
	open, clock := e.open, e.clock
	s := open(t)
	f := newFixture(t, s, "red")
	run := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	a := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", nil, 30*time.Second))(t)
	seqs := ok(s.AppendEvents(ctx, run.ID, "agt_a", a.Epoch, []store.Event{{Kind: "start", Data: "{}"}, {Kind: "step", Data: `{"n":1}`}}))(t)
	if !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("got seqs %v, want [1 2]", seqs)
	}
	ok(s.RenewLease(ctx, run.ID, "agt_a", a.Epoch, 30*time.Second))(t)
	if err := s.PutProjections(ctx, run.ID, "agt_a", a.Epoch, []store.Projection{{Address: "netns.a", Observation: "present", ExternalID: "sbx-a"}}); err != nil {
		t.Fatal(err)
	}
	// The wrong agent with the right epoch is refused too.
	_, err := s.AppendEvents(ctx, run.ID, "agt_b", a.Epoch, []store.Event{{Kind: "x"}})
	wantErr(t, "agent b writing with a's epoch", err, store.ErrFenced)

	clock.Advance(31 * time.Second) // a pauses; its lease lapses
	_, err = s.AppendEvents(ctx, run.ID, "agt_a", a.Epoch, []store.Event{{Kind: "late"}})
	wantErr(t, "write after the lease lapsed", err, store.ErrFenced)
	_, err = s.RenewLease(ctx, run.ID, "agt_a", a.Epoch, 30*time.Second)
	wantErr(t, "renewing a lapsed lease", err, store.ErrFenced)

	b := ok(s.ClaimRun(ctx, f.project.ID, "agt_b", nil, 30*time.Second))(t)
	if b.Run.ID != run.ID || b.Epoch != a.Epoch+1 || b.Run.NextSeq != 3 {
		t.Fatalf("reclaim: got %+v, want run %s at epoch %d, next seq 3", b, run.ID, a.Epoch+1)
	}
	// The zombie wakes up: every kind of write with its old epoch is refused.
	_, err = s.AppendEvents(ctx, run.ID, "agt_a", a.Epoch, []store.Event{{Kind: "zombie"}})
	wantErr(t, "zombie event", err, store.ErrFenced)
	var fe *store.FencedError
	if !errors.As(err, &fe) || fe.Current != b.Epoch || fe.Reason != "stale epoch" {
		t.Fatalf("zombie event: got %v, want a FencedError naming the current epoch %d", err, b.Epoch)
	}
	wantErr(t, "zombie projection", s.PutProjections(ctx, run.ID, "agt_a", a.Epoch, []store.Projection{{Address: "netns.a", Observation: "absent"}}), store.ErrFenced)
	wantErr(t, "zombie completion", s.CompleteRun(ctx, run.ID, "agt_a", a.Epoch, store.RunFailed, "zombie", 1), store.ErrFenced)
	_, err = s.RenewLease(ctx, run.ID, "agt_a", a.Epoch, 30*time.Second)
	wantErr(t, "zombie renewal", err, store.ErrFenced)

	ok(s.AppendEvents(ctx, run.ID, "agt_b", b.Epoch, []store.Event{{Kind: "resume"}}))(t)
	if err := s.CompleteRun(ctx, run.ID, "agt_b", b.Epoch, store.RunSucceeded, "ok", 0); err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendEvents(ctx, run.ID, "agt_b", b.Epoch, []store.Event{{Kind: "after"}})
	wantErr(t, "event after completion", err, store.ErrFenced)
	clock.Advance(time.Hour)
	_, err = s.ClaimRun(ctx, f.project.ID, "agt_c", nil, time.Minute)
	wantErr(t, "claiming a finished run", err, store.ErrNoRun)

	evs := ok(s.Events(ctx, f.project.ID, run.ID, 0, 100))(t)
	var got []string
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap", i, e.Seq)
		}
		got = append(got, fmt.Sprintf("%d:%s@%d", e.Seq, e.Kind, e.Epoch))
	}
	if want := []string{"1:start@1", "2:step@1", "3:resume@2"}; !slices.Equal(got, want) {
		t.Fatalf("got events %v, want %v", got, want)
	}
	ps := ok(s.Projections(ctx, f.project.ID, f.ws.ID))(t)
	if len(ps) != 1 || ps[0].Observation != "present" || ps[0].Epoch != a.Epoch {
		t.Fatalf("got projections %+v, want netns.a present from epoch %d (the zombie's write refused)", ps, a.Epoch)
	}
	r := ok(s.Run(ctx, f.project.ID, run.ID))(t)
	if r.Status != store.RunSucceeded || r.Result != "ok" || r.Epoch != b.Epoch {
		t.Fatalf("got run %+v, want succeeded at epoch %d", r, b.Epoch)
	}
}

func testSticky(t *testing.T, e env) {
	open, clock := e.open, e.clock
	s := open(t)
	f := newFixture(t, s, "red")
	run := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", true))(t)
	a := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", nil, 10*time.Second))(t)
	clock.Advance(11 * time.Second)
	_, err := s.ClaimRun(ctx, f.project.ID, "agt_b", nil, 10*time.Second)
	wantErr(t, "another agent claiming a lapsed sticky run", err, store.ErrNoRun)
	again := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", nil, 10*time.Second))(t)
	if again.Run.ID != run.ID || again.Epoch != a.Epoch+1 {
		t.Fatalf("restarted agent: got %+v, want run %s at epoch %d", again, run.ID, a.Epoch+1)
	}
}

func testConcurrentClaim(t *testing.T, e env) {
	open, clock := e.open, e.clock
	s := open(t)
	f := newFixture(t, s, "red")
	const runs, claimers = 6, 8
	for range runs {
		ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	}
	handles := make([]*store.Store, claimers)
	for i := range handles {
		handles[i] = open(t)
	}
	claimAll := func() map[string][]int64 {
		var mu sync.Mutex
		won := map[string][]int64{}
		var wg sync.WaitGroup
		errs := make(chan error, claimers)
		for i, h := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					l, err := h.ClaimRun(ctx, f.project.ID, fmt.Sprintf("agt_%d", i), nil, time.Minute)
					if errors.Is(err, store.ErrNoRun) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					won[l.Run.ID] = append(won[l.Run.ID], l.Epoch)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return won
	}
	won := claimAll()
	if len(won) != runs {
		t.Fatalf("got %d runs claimed, want %d", len(won), runs)
	}
	for id, epochs := range won {
		if !slices.Equal(epochs, []int64{1}) {
			t.Fatalf("run %s claimed at epochs %v, want exactly once at epoch 1", id, epochs)
		}
	}
	clock.Advance(2 * time.Minute) // every lease lapses
	won = claimAll()
	for id, epochs := range won {
		if !slices.Equal(epochs, []int64{2}) {
			t.Fatalf("after the lapse run %s claimed at epochs %v, want exactly once at epoch 2", id, epochs)
		}
	}
	if len(won) != runs {
		t.Fatalf("after the lapse got %d runs claimed, want %d", len(won), runs)
	}
}

// A run an agent can take is claimed even behind more than a page of older runs it cannot
// take (the claim once read only the 200 oldest).
func testClaimPastUnclaimable(t *testing.T, e env) {
	s := e.open(t)
	f := newFixture(t, s, "red", "driver:kvm")
	for range 201 {
		ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	}
	e.clock.Advance(time.Second) // queued strictly after them (ids do not order runs of one instant)
	plain := ok(s.PutPlan(ctx, f.project.ID, f.ws.ID, f.plan.Revision, []byte(`{"plan":"plain"}`), []string{"driver:netns"}))(t)
	want := ok(s.CreateRun(ctx, f.project.ID, plain.ID, "apply", false))(t)
	l := ok(s.ClaimRun(ctx, f.project.ID, "agt_ns", []string{"driver:netns"}, time.Minute))(t)
	if l.Run.ID != want.ID {
		t.Fatalf("netns agent behind 201 kvm runs: got run %s, want %s", l.Run.ID, want.ID)
	}
	_, err := s.ClaimRun(ctx, f.project.ID, "agt_ns", []string{"driver:netns"}, time.Minute)
	wantErr(t, "nothing else the netns agent can take", err, store.ErrNoRun)
}

// A workspace whose state lives with a revoked agent can never run its sticky runs: they
// fail with the reason, new ones are refused, and other runs are not held up.
func testRevokedStickyHolder(t *testing.T, e env) {
	s := e.open(t)
	f := newFixture(t, s, "red")
	a := ok(s.CreateAgent(ctx, f.project.ID, "host-a", []byte("0123456789abcdef0123456789abcdef"), nil))(t)
	first := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", true))(t)
	ok(s.ClaimRun(ctx, f.project.ID, a.ID, nil, time.Minute))(t) // a keeps the workspace's state now
	queued := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", true))(t)
	other := newFixture(t, s, "blue")
	if err := s.RevokeAgent(ctx, f.project.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first.ID, queued.ID} {
		r := ok(s.Run(ctx, f.project.ID, id))(t)
		if r.Status != store.RunFailed || !strings.Contains(r.Result, a.ID) || !strings.Contains(r.Result, "revoked") {
			t.Fatalf("run %s of the revoked agent's workspace: got %s %q, want failed naming the agent and the revocation", id, r.Status, r.Result)
		}
	}
	_, err := s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", true)
	wantErr(t, "a sticky run for the revoked agent's workspace", err, store.ErrHolderRevoked)
	free := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	if l := ok(s.ClaimRun(ctx, f.project.ID, "agt_b", nil, time.Minute))(t); l.Run.ID != free.ID {
		t.Fatalf("another agent: got run %s, want the non-sticky %s", l.Run.ID, free.ID)
	}
	// Another project's sticky workspace is untouched.
	ok(s.CreateRun(ctx, other.project.ID, other.plan.ID, "apply", true))(t)
	ok(s.ClaimRun(ctx, other.project.ID, "agt_c", nil, time.Minute))(t)
}

// What a run works on is read under the same rule as writes: the holder, at its epoch, with
// a live lease.
func testHeld(t *testing.T, e env) {
	s := e.open(t)
	f := newFixture(t, s, "red")
	run := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	l := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", nil, 10*time.Second))(t)
	if r := ok(s.Held(ctx, f.project.ID, run.ID, "agt_a", l.Epoch))(t); r.ID != run.ID {
		t.Fatalf("held: got run %s, want %s", r.ID, run.ID)
	}
	for what, err := range map[string]error{
		"another agent":     func() error { _, err := s.Held(ctx, f.project.ID, run.ID, "agt_b", l.Epoch); return err }(),
		"an earlier epoch":  func() error { _, err := s.Held(ctx, f.project.ID, run.ID, "agt_a", l.Epoch-1); return err }(),
		"another project's": func() error { _, err := s.Held(ctx, "prj_other", run.ID, "agt_a", l.Epoch); return err }(),
	} {
		if err == nil {
			t.Fatalf("%s: got the run, want a refusal", what)
		}
	}
	e.clock.Advance(11 * time.Second)
	_, err := s.Held(ctx, f.project.ID, run.ID, "agt_a", l.Epoch)
	wantErr(t, "reading after the lease lapsed (nobody claimed it since)", err, store.ErrFenced)
}

func testConcurrentAppend(t *testing.T, e env) {
	open := e.open
	s := open(t)
	f := newFixture(t, s, "red")
	run := ok(s.CreateRun(ctx, f.project.ID, f.plan.ID, "apply", false))(t)
	l := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", nil, time.Hour))(t)
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		h := open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := h.AppendEvents(ctx, run.ID, "agt_a", l.Epoch, []store.Event{{Kind: "e", Data: fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs := ok(s.Events(ctx, f.project.ID, run.ID, 0, 1000))(t)
	if len(evs) != writers*each {
		t.Fatalf("got %d events, want %d", len(evs), writers*each)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (dense)", i, e.Seq, i+1)
		}
	}
	tail := ok(s.Events(ctx, f.project.ID, run.ID, int64(len(evs)-2), 10))(t)
	if len(tail) != 2 || tail[0].Seq != int64(len(evs)-1) {
		t.Fatalf("events after %d: got %+v, want the last two", len(evs)-2, tail)
	}
}

func testTokens(t *testing.T, e env) {
	open := e.open
	s := open(t)
	p := ok(s.CreateProject(ctx, "red"))(t)
	admin, _, err := s.CreateToken(ctx, store.TokenAdmin, "", "bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	proj, _, err := s.CreateToken(ctx, store.TokenProject, p.ID, "ci")
	if err != nil {
		t.Fatal(err)
	}
	join, _, err := s.CreateToken(ctx, store.TokenJoin, p.ID, "host1")
	if err != nil {
		t.Fatal(err)
	}
	if tk := ok(s.LookupToken(ctx, proj))(t); tk.Kind != store.TokenProject || tk.Project != p.ID {
		t.Fatalf("got %+v, want the project token of %s", tk, p.ID)
	}
	if tk := ok(s.LookupToken(ctx, admin))(t); tk.Kind != store.TokenAdmin || tk.Project != "" {
		t.Fatalf("got %+v, want an admin token", tk)
	}
	_, err = s.LookupToken(ctx, join)
	wantErr(t, "a join token used as a bearer token", err, store.ErrNotFound)
	_, err = s.LookupToken(ctx, proj+"x")
	wantErr(t, "an unknown token", err, store.ErrNotFound)
	_, err = s.UseJoinToken(ctx, proj)
	wantErr(t, "a project token used to join", err, store.ErrNotFound)
	_, _, err = s.CreateToken(ctx, store.TokenProject, "prj_missing", "x")
	wantErr(t, "a token of a missing project", err, store.ErrNotFound)

	// Of concurrent joins with one token exactly one succeeds.
	var wins, used atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		h := open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.UseJoinToken(ctx, join)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, store.ErrTokenUsed):
				used.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || used.Load() != 5 {
		t.Fatalf("concurrent joins: %d won, %d refused as used; want 1 and 5", wins.Load(), used.Load())
	}
	// Only hashes are stored.
	rows, err := s.DB().Query(`SELECT hash, kind, project_id, name FROM cp_tokens`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var cols [4]string
		if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3]); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			for _, plain := range []string{admin, proj, join} {
				if strings.Contains(c, plain) || strings.Contains(c, plain[len(store.TokenPrefix)+2:]) {
					t.Fatalf("token table holds a token's plaintext: %q", c)
				}
			}
		}
		n++
	}
	if n != 3 {
		t.Fatalf("got %d token rows, want 3", n)
	}
}

func testAgents(t *testing.T, e env) {
	open, clock := e.open, e.clock
	s := open(t)
	p := ok(s.CreateProject(ctx, "red"))(t)
	a := ok(s.CreateAgent(ctx, p.ID, "host1", []byte("0123456789abcdef0123456789abcdef"), []string{"netns", "kvm"}))(t)
	if err := s.Heartbeat(ctx, a.ID, []string{"netns", "tcg"}); err != nil {
		t.Fatal(err)
	}
	got := ok(s.Agent(ctx, a.ID))(t)
	if !slices.Equal(got.Capabilities, []string{"netns", "tcg"}) || got.Seen.IsZero() || string(got.PublicKey) != string(a.PublicKey) {
		t.Fatalf("got agent %+v, want capabilities [netns tcg], seen, same key", got)
	}
	if err := s.RevokeAgent(ctx, p.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := ok(s.Agent(ctx, a.ID))(t); !got.Revoked {
		t.Fatalf("got %+v, want revoked", got)
	}
	wantErr(t, "heartbeat of a revoked agent", s.Heartbeat(ctx, a.ID, nil), store.ErrNotFound)
	if as := ok(s.Agents(ctx, p.ID))(t); len(as) != 1 {
		t.Fatalf("got %d agents, want 1", len(as))
	}

	exp := clock.Now().Add(time.Minute)
	if err := s.UseNonce(ctx, a.ID, "n1", exp); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a replayed nonce", s.UseNonce(ctx, a.ID, "n1", exp), store.ErrReplay)
	if err := s.UseNonce(ctx, "agt_other", "n1", exp); err != nil {
		t.Fatalf("the same nonce from another agent: %v", err)
	}
	clock.Advance(2 * time.Minute) // pruned after expiry (the timestamp check refuses such a request first)
	if err := s.UseNonce(ctx, a.ID, "n1", clock.Now().Add(time.Minute)); err != nil {
		t.Fatalf("nonce after its expiry: %v", err)
	}
}

func testMigrate(t *testing.T, e env) {
	open := e.open
	s := open(t)
	p := ok(s.CreateProject(ctx, "red"))(t)
	again := open(t) // migrating a migrated database changes nothing
	if got := ok(again.Project(ctx, p.ID))(t); got.Name != "red" {
		t.Fatalf("after a second migration got %+v, want project red", got)
	}
	if _, err := s.DB().Exec(fmt.Sprintf(`INSERT INTO cp_schema (version) VALUES (%d)`, store.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	_, err := e.raw()
	wantErr(t, "opening a database of a newer schema", err, store.ErrNewerSchema)
}

// testCommandRuns: a run without a plan names a revision and arguments; a plan run's output
// plan and exit code are stored under the fence; a workspace's sticky runs go to the agent
// that claimed its first one; projections carry generations.
func testCommandRuns(t *testing.T, e env) {
	s := e.open(t)
	f := newFixture(t, s, "red")
	pl, _, err := s.PlanData(ctx, f.project.ID, f.plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.QueueRun(ctx, f.project.ID, store.RunSpec{Workspace: f.ws.ID, Revision: "sha256:00", Op: "plan"})
	wantErr(t, "run of an unknown revision", err, store.ErrNotFound)
	run := ok(s.QueueRun(ctx, f.project.ID, store.RunSpec{Workspace: f.ws.ID, Revision: pl.Revision, Op: "plan", Args: []string{"--destroy"}, Requires: []string{"driver:netns"}, Sticky: true}))(t)
	if got := ok(s.Run(ctx, f.project.ID, run.ID))(t); got.Revision != pl.Revision || !slices.Equal(got.Args, []string{"--destroy"}) || got.Plan != "" {
		t.Fatalf("got run %+v, want revision %s and args [--destroy]", got, pl.Revision)
	}
	_, err = s.ClaimRun(ctx, f.project.ID, "agt_a", nil, time.Minute)
	wantErr(t, "claim without the run's driver", err, store.ErrNoRun)
	a := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", []string{"driver:netns"}, time.Minute))(t)
	_, err = s.PutRunPlan(ctx, run.ID, "agt_b", a.Epoch, []byte("plan"), nil)
	wantErr(t, "plan output by another agent", err, store.ErrFenced)
	out := ok(s.PutRunPlan(ctx, run.ID, "agt_a", a.Epoch, []byte(`{"plan":"out"}`), []string{"driver:netns"}))(t)
	if err := s.PutProjections(ctx, run.ID, "agt_a", a.Epoch, []store.Projection{{Address: "netns.a", Observation: "present", ExternalID: "x", Generation: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteRun(ctx, run.ID, "agt_a", a.Epoch, store.RunSucceeded, "planned", 2); err != nil {
		t.Fatal(err)
	}
	got := ok(s.Run(ctx, f.project.ID, run.ID))(t)
	if got.OutputPlan != out.ID || got.ExitCode != 2 || got.Status != store.RunSucceeded {
		t.Fatalf("got run %+v, want output plan %s and exit code 2", got, out.ID)
	}
	if p, data, err := s.PlanData(ctx, f.project.ID, out.ID); err != nil || string(data) != `{"plan":"out"}` || p.Revision != pl.Revision || p.Workspace != f.ws.ID {
		t.Fatalf("output plan: %+v %q %v", p, data, err)
	}
	if ps := ok(s.Projections(ctx, f.project.ID, f.ws.ID))(t); len(ps) != 1 || ps[0].Generation != 2 {
		t.Fatalf("got projections %+v, want netns.a at generation 2", ps)
	}
	// The workspace is agt_a's now: agt_b, though capable, is not given its next run.
	next := ok(s.CreateRun(ctx, f.project.ID, out.ID, "apply", true))(t)
	_, err = s.ClaimRun(ctx, f.project.ID, "agt_b", []string{"driver:netns"}, time.Minute)
	wantErr(t, "another agent claiming a bound workspace's run", err, store.ErrNoRun)
	if l := ok(s.ClaimRun(ctx, f.project.ID, "agt_a", []string{"driver:netns"}, time.Minute))(t); l.Run.ID != next.ID {
		t.Fatalf("got %s, want %s", l.Run.ID, next.ID)
	}
}
