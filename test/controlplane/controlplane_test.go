// Package controlplane runs the real sysbox binary as a control-plane server and as agents on
// loopback (the agents in the fake world of test builds, so no root is needed) and drives them
// over the API.
package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	testenv.MainWithBinary(m, &binary, "zyvor.dev/sysbox/cmd/sysbox", "sysboxtest")
}

const topology = `
substrate "local" {
  driver "netns" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_node" "web" {
  count   = 2
  driver  = "netns"
  command = ["sleep", "infinity"]
  environment = {
    TOKEN = env("WEB_TOKEN")
  }
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.${10 + count.index}/24"]
  }
}

resource "sysbox_firewall" "web" {
  node          = sysbox_node.web[0]
  default_input = "drop"
}
`

// secret is the plaintext behind the topology's env("WEB_TOKEN"); it must reach the driver
// call on the agent and nothing of the control plane.
const secret = "cp-test-web-token-plaintext"

// proc is a running sysbox process whose output is collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string
	done chan struct{} // closed when the process exited; err is then its Wait error
	err  error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// bash marks args that are a bash script, not sysbox's arguments.
const bash = "\x00bash"

// command is sysbox with args, or bash running args[1] when args[0] is bash.
func command(args []string) *exec.Cmd {
	if len(args) == 2 && args[0] == bash {
		return exec.Command("bash", "-c", args[1])
	}
	return exec.Command(binary, args...)
}

// start runs sysbox with args and env; it is killed when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	c := command(args)
	c.Env = append(append(os.Environ(), "WEB_TOKEN="+secret), env...)
	r, w := io.Pipe()
	c.Stdout, c.Stderr = w, w
	p := &proc{cmd: c, line: make(chan string, 1000), done: make(chan struct{})}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = c.Wait()
		w.Close()
		close(p.done)
	}()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		c.Process.Kill() // a stopped process dies of SIGKILL too
		<-p.done
		if t.Failed() {
			t.Logf("sysbox %v output:\n%s", args, p.output())
		}
	})
	return p
}

// waitLine waits for a line with prefix and returns it.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l := <-p.line:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line starting %q within 60 s:\n%s", prefix, p.output())
		}
	}
}

type api struct {
	t     *testing.T
	url   string
	token string
}

func (a api) call(method, path string, body any, out any, want int) {
	a.t.Helper()
	var rd io.Reader
	ct := "application/json"
	if b, ok := body.([]byte); ok {
		rd, ct = bytes.NewReader(b), "application/octet-stream"
	} else if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", ct)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: got %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

type obj struct {
	ID     string `json:"id"`
	Token  string `json:"token"`
	Digest string `json:"digest"`
	Status string `json:"status"`
	Agent  string `json:"agent"`
	Result string `json:"result"`
	Name   string `json:"name"`
	Seen   string `json:"seen"`
	Epoch  int64  `json:"epoch"`
}

// rig is a server process with a project, a user token and a workspace.
type rig struct {
	t       *testing.T
	pg      string // the server's PostgreSQL DSN; empty: SQLite in its data directory
	srv     *proc
	work    string
	url     string
	admin   api
	user    api
	project string
	ws      string
}

func newRig(t *testing.T, leaseTTL string) *rig { return newRigOn(t, "sqlite", leaseTTL) }

// stores are the databases a server runs on in these tests.
var stores = []string{"sqlite", "postgres"}

// newRigOn starts the server on db: "sqlite" (the embedded default) or "postgres" (a fresh
// schema of SYSBOX_TEST_PG_DSN's database).
func newRigOn(t *testing.T, db, leaseTTL string) *rig {
	work := t.TempDir()
	var env []string
	pg := ""
	if db == "postgres" {
		pg = storetest.PostgresSchema(t, testenv.RequireEnv(t, "SYSBOX_TEST_PG_DSN"))
		env = append(env, "SYSBOX_SERVER_POSTGRES="+pg)
	}
	srv := start(t, env, "server", "--data", filepath.Join(work, "server"), "--listen", "127.0.0.1:0", "--lease-ttl", leaseTTL)
	url := "http://" + strings.TrimPrefix(srv.waitLine(t, "listening on "), "listening on http://")
	tok, err := os.ReadFile(filepath.Join(work, "server", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, pg: pg, srv: srv, work: work, url: url, admin: api{t, url, strings.TrimSpace(string(tok))}}
	var project, user, ws obj
	r.admin.call("POST", "/v1/projects", map[string]string{"name": "range"}, &project, 201)
	r.admin.call("POST", "/v1/projects/"+project.ID+"/tokens", map[string]string{"kind": "project", "name": "ci"}, &user, 201)
	r.user = api{t, url, user.Token}
	r.user.call("POST", "/v1/projects/"+project.ID+"/workspaces", map[string]string{"name": "lab"}, &ws, 201)
	r.project, r.ws = project.ID, ws.ID
	return r
}

// agent starts an agent named name offering drivers; env adds to its environment. A first
// start joins with a fresh join token; a restart (same name) reuses the data directory.
func (r *rig) agent(name, drivers string, env ...string) (*proc, string) {
	r.t.Helper()
	data := filepath.Join(r.work, "agent-"+name)
	if _, err := os.Stat(filepath.Join(data, "agent.json")); err != nil {
		var j obj
		r.admin.call("POST", "/v1/projects/"+r.project+"/tokens", map[string]string{"kind": "join", "name": name}, &j, 201)
		env = append(env, "SYSBOX_JOIN_TOKEN="+j.Token)
	}
	env = append(env, "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(r.work, "world-"+name+".json"))
	p := start(r.t, env, "agent", "--server", r.url, "--data", data, "--name", name, "--drivers", drivers, "--poll", "100ms")
	return p, strings.Fields(p.waitLine(r.t, "sysbox agent "))[2]
}

// queue plans the topology locally, stores bundle and plan, and queues a run.
func (r *rig) queue(sticky bool) string {
	t := r.t
	t.Helper()
	lab := filepath.Join(r.work, "lab")
	os.MkdirAll(lab, 0o755)
	os.WriteFile(filepath.Join(lab, "main.sysbox.hcl"), []byte(topology), 0o644)
	plan := exec.Command(binary, "plan", "-out", filepath.Join(r.work, "lab.plan"), "--no-color")
	plan.Dir, plan.Env = lab, append(os.Environ(), "WEB_TOKEN="+secret, "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(r.work, "world-local.json"))
	if out, err := plan.CombinedOutput(); err != nil {
		t.Fatalf("local plan: %v\n%s", err, out)
	}
	planBytes, _ := os.ReadFile(filepath.Join(r.work, "lab.plan"))
	bundle, err := agent.PackDir(lab)
	if err != nil {
		t.Fatal(err)
	}
	var rev, pl, run obj
	r.user.call("POST", "/v1/projects/"+r.project+"/revisions", bundle, &rev, 201)
	r.user.call("POST", "/v1/projects/"+r.project+"/workspaces/"+r.ws+"/plans", map[string]any{"revision": rev.Digest, "plan": planBytes}, &pl, 201)
	r.user.call("POST", "/v1/projects/"+r.project+"/runs", map[string]any{"plan": pl.ID, "op": "apply", "sticky": sticky}, &run, 201)
	return run.ID
}

func (r *rig) run(id string) obj {
	r.t.Helper()
	var run obj
	r.user.call("GET", "/v1/projects/"+r.project+"/runs/"+id, nil, &run, 200)
	return run
}

// finished waits for the run to succeed or fail.
func (r *rig) finished(id string) obj {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		run := r.run(id)
		if run.Status == "succeeded" || run.Status == "failed" {
			return run
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("run still %s after 90 s", run.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type event struct {
	Seq   int64  `json:"seq"`
	Epoch int64  `json:"epoch"`
	Kind  string `json:"kind"`
	Data  string `json:"data"`
}

// events returns the run's events, checking their sequence is dense.
func (r *rig) events(id string) ([]event, string) {
	r.t.Helper()
	var evs []event
	r.user.call("GET", "/v1/projects/"+r.project+"/runs/"+id+"/events", nil, &evs, 200)
	var lines []string
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			r.t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		lines = append(lines, e.Data)
	}
	return evs, strings.Join(lines, "\n")
}

// TestRunsLandOnCapableAgentAndApply: a server and two agents (one offering only netns, one
// netns and nftables) as real processes on loopback. A run whose plan needs nftables is left
// alone by the netns-only agent and applied by the other one with the CLI's own apply, whose
// progress lines come back as the run's events.
func TestRunsLandOnCapableAgentAndApply(t *testing.T) {
	r := newRig(t, "6s")
	r.agent("ns-only", "netns") // up before the run is queued
	id := r.queue(false)

	// Wait until the netns-only agent has heartbeated twice after the run was queued: it has
	// asked for work at least once since, and must have been given nothing.
	seen := func() string {
		var agents []obj
		r.user.call("GET", "/v1/projects/"+r.project+"/agents", nil, &agents, 200)
		return agents[0].Seen
	}
	for i, last, deadline := 0, seen(), time.Now().Add(60*time.Second); i < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the netns-only agent did not heartbeat twice within 60 s (seen %d times)", i)
		}
		time.Sleep(50 * time.Millisecond)
		if s := seen(); s != last {
			i, last = i+1, s
		}
	}
	if run := r.run(id); run.Status != "queued" {
		t.Fatalf("with only the netns agent up the run is %s (agent %q), want queued", run.Status, run.Agent)
	}

	_, fullID := r.agent("full", "netns,nftables")
	run := r.finished(id)
	_, text := r.events(id)
	if run.Status != "succeeded" || run.Agent != fullID {
		t.Fatalf("run %s by %s (%s), want succeeded by %s; events:\n%s", run.Status, run.Agent, run.Result, fullID, text)
	}
	if !strings.Contains(text, "Apply complete.") || !strings.Contains(text, "sysbox_node.web[1]") {
		t.Fatalf("events lack the apply's progress lines:\n%s", text)
	}
	// The agent's workspace holds the lab's state, as a local apply would.
	state, err := os.ReadFile(filepath.Join(r.work, "agent-full", "workspaces", r.ws, ".sysbox", "state"))
	if err != nil || !bytes.Contains(state, []byte("sysbox_node.web[1]")) {
		t.Fatalf("agent workspace state: %v\n%s", err, state)
	}
	// The workspace's projections list every resource, observed, with its external id.
	var projs []struct {
		Address     string `json:"address"`
		Observation string `json:"observation"`
		ExternalID  string `json:"external_id"`
	}
	r.user.call("GET", "/v1/projects/"+r.project+"/workspaces/"+r.ws+"/projections", nil, &projs, 200)
	var got []string
	for _, p := range projs {
		if p.ExternalID == "" || p.Observation == "" {
			t.Errorf("projection %+v lacks its observation or external id", p)
		}
		got = append(got, p.Address)
	}
	want := []string{"sysbox_firewall.web", "sysbox_network.lan", "sysbox_node.web[0]", "sysbox_node.web[1]"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("projections %v, want %v", got, want)
	}
	r.noSecrets()
}

// noSecrets greps the server's database files and log, and the agents' logs, for the
// topology's secret and for every token the server handed out in plaintext.
func (r *rig) noSecrets() {
	t := r.t
	t.Helper()
	secrets := []string{secret, r.admin.token, r.user.token}
	var places []string
	if r.pg != "" {
		places = append(places, r.dumpPostgres())
	} else {
		files, _ := filepath.Glob(filepath.Join(r.work, "server", "controlplane.db*"))
		if len(files) == 0 {
			t.Fatal("no database file to grep")
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			places = append(places, string(b))
		}
	}
	nDB := len(places)
	places = append(places, r.srv.output())
	for _, p := range places {
		for _, s := range secrets {
			if strings.Contains(p, s) {
				t.Fatalf("the control plane holds a secret (%d bytes) in plaintext", len(s))
			}
		}
	}
	// The grep looked at the right bytes: the database holds the secret's reference (in the
	// revision) and the user token's hash.
	db := strings.Join(places[:nDB], "")
	if !strings.Contains(db, `env(\"WEB_TOKEN\")`) || !strings.Contains(db, store.HashToken(r.user.token)) {
		t.Fatal("the database files hold neither the secret's reference nor the token's hash: the grep proves nothing")
	}
}

// TestKilledAgentResumesFromCheckpoint: the agent is killed (SIGKILL, by the executor's
// failpoint of test builds) in the middle of an apply; its lease lapses; restarted, the same
// agent claims the sticky run again at a higher epoch and finishes it through checkpoint
// recovery; the lab converges.
func TestKilledAgentResumesFromCheckpoint(t *testing.T) {
	r := newRig(t, "3s")
	id := r.queue(true)
	p, agentID := r.agent("host", "netns,nftables", "SYSBOX_EXEC_FAILPOINT=checkpoint@3")
	<-p.done
	if p.err == nil || !strings.Contains(p.err.Error(), "killed") {
		t.Fatalf("agent with a failpoint: got exit %v, want killed", p.err)
	}
	run := r.run(id)
	if run.Status != "running" || run.Agent != agentID {
		t.Fatalf("after the kill the run is %s by %q, want running by %s", run.Status, run.Agent, agentID)
	}
	_, restartedID := r.agent("host", "netns,nftables")
	if restartedID != agentID {
		t.Fatalf("restarted agent is %s, want the same identity %s", restartedID, agentID)
	}
	run = r.finished(id)
	evs, text := r.events(id)
	if run.Status != "succeeded" {
		t.Fatalf("resumed run %s (%s); events:\n%s", run.Status, run.Result, text)
	}
	if !strings.Contains(text, "Resuming run "+id+" at lease epoch 2") || !strings.Contains(run.Result, "resumed") {
		t.Fatalf("the run was not resumed through recovery (result %q); events:\n%s", run.Result, text)
	}
	if evs[0].Epoch != 1 || evs[len(evs)-1].Epoch != 2 {
		t.Fatalf("events span epochs %d..%d, want 1..2", evs[0].Epoch, evs[len(evs)-1].Epoch)
	}
	// Each claim is logged before its work starts (the killed attempt's other events may not
	// have left the agent).
	var claims []string
	for _, e := range evs {
		if e.Kind == "claim" {
			claims = append(claims, fmt.Sprintf("%d: %s", e.Epoch, e.Data))
		}
	}
	if want := []string{"1: claimed by agent " + agentID + " at lease epoch 1", "2: claimed by agent " + agentID + " at lease epoch 2"}; !slices.Equal(claims, want) || evs[0].Kind != "claim" {
		t.Fatalf("claim events %q (first event %s), want %q first of each epoch", claims, evs[0].Kind, want)
	}
	state, err := os.ReadFile(filepath.Join(r.work, "agent-host", "workspaces", r.ws, ".sysbox", "state"))
	if err != nil || !bytes.Contains(state, []byte("sysbox_node.web[1]")) || !bytes.Contains(state, []byte("sysbox_firewall.web")) {
		t.Fatalf("agent workspace state after resume: %v\n%s", err, state)
	}
	r.projectedAll(2)
}

// projectedAll checks every resource is projected, observed, from epoch.
func (r *rig) projectedAll(epoch int64) {
	r.t.Helper()
	ps := r.projections(r.ws)
	if len(ps) != 4 {
		r.t.Fatalf("projections %+v, want 4", ps)
	}
	for _, p := range ps {
		if p.Epoch != epoch || p.Observation != "present" || p.ExternalID == "" {
			r.t.Fatalf("projection %+v: want present with an external id from epoch %d", p, epoch)
		}
	}
}

// cli runs sysbox to its end in dir and returns its stdout, stderr and exit code.
func cli(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	c := command(args)
	c.Dir = dir
	c.Env = append(append(os.Environ(), "WEB_TOKEN="+secret), env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sysbox %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// labDir writes the topology into a new directory under the rig's work directory.
func (r *rig) labDir(name string) string {
	dir := filepath.Join(r.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(topology), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return dir
}

// TestRemoteCommandsMatchLocal: the same topology, once with the local CLI and once with
// --remote through a server and an agent (real processes), gives the same plan output, the
// same plan fingerprint, the same exit codes and, applied, the same state; reset and destroy
// run remotely too, and the projections follow.
func TestRemoteCommandsMatchLocal(t *testing.T) {
	r := newRig(t, "6s")
	r.agent("full", "netns,nftables")
	local, remote := r.labDir("local"), r.labDir("remote")
	lenv := []string{"SYSBOX_TEST_FAKE_WORLD=" + filepath.Join(r.work, "world-cli.json")}
	renv := []string{"SYSBOX_TOKEN=" + r.user.token}
	rem := func(args ...string) []string { return append(args, "--remote", r.url, "--workspace", "lab-remote") }
	same := func(what string, largs, rargs []string) (string, int) {
		t.Helper()
		lo, le, lc := cli(t, local, lenv, largs...)
		ro, re, rc := cli(t, remote, renv, rargs...)
		lo, ro = elapsed.ReplaceAllString(lo, "after T"), elapsed.ReplaceAllString(ro, "after T") // timings are each run's own
		if lo != ro || le != re || lc != rc {
			t.Fatalf("%s: local and remote differ:\nlocal (exit %d):\n%s%s\nremote (exit %d):\n%s%s", what, lc, lo, le, rc, ro, re)
		}
		return lo, lc
	}

	out, code := same("plan", []string{"plan", "-out", "lab.plan", "-detailed-exitcode"}, rem("plan", "-out", "lab.plan", "-detailed-exitcode"))
	if code != 2 || !strings.Contains(out, "Saved the plan to lab.plan") {
		t.Fatalf("plan: exit %d, want 2 (changes); output:\n%s", code, out)
	}
	lp, err := plans.ReadFile(filepath.Join(local, "lab.plan"))
	if err != nil {
		t.Fatal(err)
	}
	rp, err := plans.ReadFile(filepath.Join(remote, "lab.plan"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lp.Fingerprint, rp.Fingerprint) {
		t.Fatalf("plan fingerprints differ:\nlocal  %+v\nremote %+v", lp.Fingerprint, rp.Fingerprint)
	}

	// Applied (each its stored plan), both labs hold the same resources with the same
	// attributes.
	if _, le, lc := cli(t, local, lenv, "apply", "lab.plan"); lc != 0 {
		t.Fatalf("local apply: exit %d\n%s", lc, le)
	}
	ro, re, rc := cli(t, remote, renv, rem("apply", "lab.plan")...)
	if rc != 0 || !strings.Contains(ro, "Apply complete.") || !strings.Contains(ro, "sysbox_node.web[1]: Creation complete") {
		t.Fatalf("remote apply: exit %d, want 0 with the apply's progress lines:\n%s%s", rc, ro, re)
	}
	list, _ := same("state list", []string{"state", "list"}, rem("state", "list"))
	addrs := strings.Fields(list)
	if len(addrs) != 4 {
		t.Fatalf("state list: %q, want 4 resources", list)
	}
	for _, a := range addrs {
		lo, _, _ := cli(t, local, lenv, "state", "show", a, "--json")
		ro, re, rc := cli(t, remote, renv, rem("state", "show", a, "--json")...)
		if rc != 0 {
			t.Fatalf("remote state show %s: exit %d\n%s", a, rc, re)
		}
		if l, r := attributes(t, lo), attributes(t, ro); !reflect.DeepEqual(l, r) {
			t.Fatalf("state show %s: attributes differ:\nlocal  %v\nremote %v", a, l, r)
		}
	}
	same("output", []string{"output"}, rem("output"))
	same("a failing command", []string{"state", "show", "sysbox_node.nope"}, rem("state", "show", "sysbox_node.nope"))
	if _, _, code := cli(t, remote, renv, rem("apply")...); code != 1 {
		t.Fatalf("remote apply without -auto-approve or a plan: exit %d, want 1", code)
	}

	// Reset runs on the agent: the node's generation goes up, in the projections too.
	ws := r.workspace("lab-remote")
	gen := func(addr string) int64 {
		for _, p := range r.projections(ws) {
			if p.Address == addr {
				return p.Generation
			}
		}
		t.Fatalf("no projection of %s", addr)
		return 0
	}
	before := gen("sysbox_node.web[0]")
	same("reset", []string{"reset", "sysbox_node.web[0]"}, rem("reset", "sysbox_node.web[0]"))
	if after := gen("sysbox_node.web[0]"); after != before+1 {
		t.Fatalf("after a remote reset sysbox_node.web[0] is at generation %d, want %d", after, before+1)
	}
	// refresh runs on the agent too, with the same per-op flag rules.
	if out, _ := same("refresh", []string{"refresh"}, rem("refresh")); !strings.Contains(out, "sysbox_node.web[0]: present") {
		t.Fatalf("refresh: %q, want sysbox_node.web[0] present", out)
	}
	if _, re, rc := cli(t, remote, renv, rem("refresh", "-var", "x=1")...); rc != 1 || !strings.Contains(re, "is not allowed") {
		t.Fatalf("remote refresh with -var: exit %d, want 1 refusing the flag:\n%s", rc, re)
	}

	// destroy asks for approval locally; remotely it needs -auto-approve.
	if _, re, rc := cli(t, remote, renv, rem("destroy", "-auto-approve")...); rc != 0 {
		t.Fatalf("remote destroy: exit %d\n%s", rc, re)
	}
	if out, _, _ := cli(t, remote, renv, rem("state", "list")...); out != "" {
		t.Fatalf("after the remote destroy the state lists %q", out)
	}
	r.noSecrets()
}

var elapsed = regexp.MustCompile(`after [0-9.]+(ns|µs|ms|s|m[0-9.]+s)\b`)

// attributes is a `state show --json` document without what differs between two states by
// nature.
func attributes(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("state show --json: %v\n%s", err, doc)
	}
	// Times, the external id and the topology's lineage (a random id per state) are each
	// host's own; everything else (attributes, status, dependencies, generation) must match.
	for _, k := range []string{"created_at", "observed_at", "updated_at", "external_id"} {
		delete(m, k)
	}
	if o, ok := m["owner"].(map[string]any); ok {
		delete(o, "topology")
	}
	return m
}

// workspace returns the id of the project's workspace called name.
func (r *rig) workspace(name string) string {
	r.t.Helper()
	var ws []obj
	r.user.call("GET", "/v1/projects/"+r.project+"/workspaces", nil, &ws, 200)
	for _, w := range ws {
		if w.Name == name {
			return w.ID
		}
	}
	r.t.Fatalf("no workspace %s", name)
	return ""
}

type projection struct {
	Address     string `json:"address"`
	Observation string `json:"observation"`
	ExternalID  string `json:"external_id"`
	Generation  int64  `json:"generation"`
	Epoch       int64  `json:"epoch"`
}

func (r *rig) projections(ws string) []projection {
	r.t.Helper()
	var ps []projection
	r.user.call("GET", "/v1/projects/"+r.project+"/workspaces/"+ws+"/projections", nil, &ps, 200)
	return ps
}

// dumpPostgres is every row of the server's PostgreSQL tables as text.
func (r *rig) dumpPostgres() string {
	r.t.Helper()
	st, err := store.OpenPostgres(context.Background(), r.pg)
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.DB().Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'cp_%'`)
	if err != nil {
		r.t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	if len(tables) < 10 {
		r.t.Fatalf("postgres schema holds tables %v: not the control plane's", tables)
	}
	// Raw column bytes (bytea as stored, not its hex text form), as the SQLite grep sees them.
	var b strings.Builder
	for _, n := range tables {
		rows, err := st.DB().Query(`SELECT * FROM ` + n)
		if err != nil {
			r.t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				r.t.Fatal(err)
			}
			for _, v := range vals {
				b.Write(v)
				b.WriteByte('\n')
			}
		}
		if err := rows.Err(); err != nil {
			r.t.Fatal(err)
		}
		rows.Close()
	}
	return b.String()
}

// TestStoppedAgentIsFenced: an agent is stopped (a real SIGSTOP, by the executor's failpoint
// of test builds) in the middle of a run on a shared backend; its lease lapses; another agent
// claims the run at epoch 2 and finishes it. Continued (SIGCONT), the stopped agent's late
// writes are refused as fenced, and the run, its events and the projections stay the new
// holder's. On SQLite and on PostgreSQL.
func TestStoppedAgentIsFenced(t *testing.T) {
	for _, db := range stores {
		t.Run(db, func(t *testing.T) {
			r := newRigOn(t, db, "2s")
			id := r.queue(false)
			zombie, zombieID := r.agent("zombie", "netns,nftables", "SYSBOX_EXEC_FAILPOINT=checkpoint@10", "SYSBOX_EXEC_FAILPOINT_ACTION=stop")
			if !testenv.WaitStopped(t, zombie.cmd.Process.Pid, zombie.done) {
				t.Fatalf("agent with a stop failpoint exited (%v) instead of stopping", zombie.err)
			}
			if run := r.run(id); run.Status != "running" || run.Agent != zombieID {
				t.Fatalf("stopped agent's run is %s by %q, want running by %s", run.Status, run.Agent, zombieID)
			}

			_, holderID := r.agent("holder", "netns,nftables")
			run := r.finished(id)
			if run.Status != "succeeded" || run.Agent != holderID || run.Epoch != 2 {
				t.Fatalf("run %s by %s at epoch %d (%s), want succeeded by %s at epoch 2", run.Status, run.Agent, run.Epoch, run.Result, holderID)
			}

			if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			zombie.waitOutput(t, "run abandoned: lease lost", "complete refused")
			if out := r.srv.output(); !strings.Contains(out, "fenced write refused") || !strings.Contains(out, zombieID) {
				t.Fatalf("the server logged no fenced write of %s:\n%s", zombieID, out)
			}
			after := r.run(id)
			if after.Status != "succeeded" || after.Agent != holderID || after.Epoch != 2 || after.Result != run.Result {
				t.Fatalf("after the zombie woke the run is %+v, want it as the holder left it (%+v)", after, run)
			}
			evs, text := r.events(id)
			for i := 1; i < len(evs); i++ {
				if evs[i].Epoch < evs[i-1].Epoch {
					t.Fatalf("event %d is from epoch %d after one from epoch %d: a late write was accepted\n%s", evs[i].Seq, evs[i].Epoch, evs[i-1].Epoch, text)
				}
			}
			r.projectedAll(2)
			r.noSecrets()
		})
	}
}

// waitOutput waits until the process printed one of subs.
func (p *proc) waitOutput(t *testing.T, subs ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := p.output()
		for _, s := range subs {
			if strings.Contains(out, s) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 60 s:\n%s", subs, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadmeQuickstart runs the README's control-plane block as written (binary, data
// directories, port and example path substituted; the agent in the fake world): five
// commands, a server, an agent, the remote apply and the remote destroy.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## Control plane: `sysbox server`")
	if ok {
		_, block, ok = strings.Cut(block, "```sh\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if !ok || len(lines) != 5 {
		t.Fatalf("README's control-plane block: %d commands, want 5:\n%s", len(lines), block)
	}
	work := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().String()
	ln.Close() // the server takes it next
	if err := os.CopyFS(filepath.Join(work, "quickstart"), os.DirFS("../../examples/quickstart")); err != nil {
		t.Fatal(err)
	}
	sub := strings.NewReplacer("/tmp/sysbox-server", filepath.Join(work, "server"), "/tmp/sysbox-agent", filepath.Join(work, "agent"),
		"127.0.0.1:8787", port, "examples/quickstart", filepath.Join(work, "quickstart"))
	cmd := regexp.MustCompile(`(^|\) )sysbox `)
	for i := range lines {
		lines[i] = cmd.ReplaceAllString(sub.Replace(lines[i]), "${1}"+binary+" ")
	}
	world := "SYSBOX_TEST_FAKE_WORLD=" + filepath.Join(work, "world.json")
	bg := func(line, ready string) {
		t.Helper()
		l, isBG := strings.CutSuffix(strings.TrimSpace(line), "&")
		if !isBG {
			t.Fatalf("README command %q: want it in the background", line)
		}
		p := start(t, []string{world}, bash, l)
		p.waitLine(t, ready)
	}
	bg(lines[0], "listening on ")
	bg(lines[1], "sysbox agent ")
	script := "set -e\n" + strings.Join(lines[2:], "\n")
	out, errOut, code := cli(t, work, nil, bash, script)
	if code != 0 || !strings.Contains(out, "Apply complete.") || !strings.Contains(out, "Destroy complete") {
		t.Fatalf("README quickstart: exit %d\n%s%s", code, out, errOut)
	}
}
