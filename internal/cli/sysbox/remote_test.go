package sysbox

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/plans"
)

// TestProjectionsDuringRun: an apply run with the agent's executor-event hook sends
// projections while it goes on (in the background, so the test waits for the hook's done): the
// first resource operation that ends is projected (present, with its external id), and every
// projection sent is one the state holds at that moment.
func TestProjectionsDuringRun(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out, Environ: []string{EnvTestFakeWorld + "=" + filepath.Join(dir, "world.json"), "WEB_TOKEN=x"},
		Version: "test", Drivers: func() (plans.CapabilityChecker, error) { return caps, nil }}
	env.LookupEnv = lookupIn(env.Environ)
	app := &App{Env: env}
	var calls [][]client.Projection
	ended := false
	job := agent.Job{Project: func(ps ...client.Projection) error {
		if ended {
			t.Error("a projection sent after the run ended")
		}
		calls = append(calls, ps)
		return nil
	}}
	hook, done := app.projectOnEvents(context.Background(), dir, job)
	defer done()
	env.Events = hook
	if code := Main(context.Background(), env, []string{"apply", "-auto-approve", "--chdir", dir}); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out.String())
	}
	done() // the hook's sends are in the background: wait for them
	ended = true
	if len(calls) == 0 {
		t.Fatalf("no projection sent by the hook:\n%s", out.String())
	}
	for _, p := range calls[0] {
		if p.Observation != "present" || p.ExternalID == "" || !strings.Contains(out.String(), p.Address+": Creation complete") {
			t.Fatalf("first projections %+v: want resources present with an external id, whose creation completed", calls[0])
		}
	}
	// At the end the agent sends every resource once more; the state has them all.
	if all := app.projections(context.Background(), dir); len(all) < len(calls[0]) || len(all) == 0 {
		t.Fatalf("projections at the end: %+v", all)
	}
}
