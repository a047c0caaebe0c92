// Package controlplane runs the real sysbox binary as a control-plane server and as agents on
// loopback (the agents in the fake world of test builds, so no root is needed) and drives them
// over the API.
package controlplane

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/agent"
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

// proc is a running sysbox process whose output is collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start runs sysbox with args and env; it is killed when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	c := exec.Command(binary, args...)
	c.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	c.Stdout, c.Stderr = w, w
	p := &proc{cmd: c, line: make(chan string, 1000)}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
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
		c.Process.Kill()
		c.Wait()
		w.Close()
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
}

// TestRunsLandOnCapableAgentAndApply: a server and two agents (one offering only netns, one
// netns and nftables) as real processes on loopback. A run whose plan needs nftables is left
// alone by the netns-only agent and applied by the other one with the CLI's own apply, whose
// progress lines come back as the run's events.
func TestRunsLandOnCapableAgentAndApply(t *testing.T) {
	work := t.TempDir()
	srv := start(t, nil, "server", "--data", filepath.Join(work, "server"), "--listen", "127.0.0.1:0", "--lease-ttl", "6s")
	url := "http://" + strings.TrimPrefix(srv.waitLine(t, "listening on "), "listening on http://")
	tok, err := os.ReadFile(filepath.Join(work, "server", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := api{t, url, strings.TrimSpace(string(tok))}
	var project, ws obj
	admin.call("POST", "/v1/projects", map[string]string{"name": "range"}, &project, 201)
	var user obj
	admin.call("POST", "/v1/projects/"+project.ID+"/tokens", map[string]string{"kind": "project", "name": "ci"}, &user, 201)
	u := api{t, url, user.Token}
	u.call("POST", "/v1/projects/"+project.ID+"/workspaces", map[string]string{"name": "lab"}, &ws, 201)
	join := func() string {
		var j obj
		admin.call("POST", "/v1/projects/"+project.ID+"/tokens", map[string]string{"kind": "join", "name": "host"}, &j, 201)
		return j.Token
	}

	// The netns-only agent is up before the run is queued.
	nsOnly := start(t, []string{"SYSBOX_JOIN_TOKEN=" + join(), "SYSBOX_TEST_FAKE_WORLD=" + filepath.Join(work, "world-ns.json")},
		"agent", "--server", url, "--data", filepath.Join(work, "agent-ns"), "--name", "ns-only", "--drivers", "netns", "--poll", "100ms", "--renew-every", "2s")
	nsOnly.waitLine(t, "sysbox agent ")

	// The user plans locally, then stores the bundle and the plan and queues the run.
	lab := filepath.Join(work, "lab")
	os.MkdirAll(lab, 0o755)
	os.WriteFile(filepath.Join(lab, "main.sysbox.hcl"), []byte(topology), 0o644)
	plan := exec.Command(binary, "plan", "-out", "lab.plan", "--no-color")
	plan.Dir, plan.Env = lab, append(os.Environ(), "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(work, "world-local.json"))
	if out, err := plan.CombinedOutput(); err != nil {
		t.Fatalf("local plan: %v\n%s", err, out)
	}
	planBytes, _ := os.ReadFile(filepath.Join(lab, "lab.plan"))
	os.Remove(filepath.Join(lab, "lab.plan"))
	bundle, err := agent.PackDir(lab)
	if err != nil {
		t.Fatal(err)
	}
	var rev, pl, run obj
	u.call("POST", "/v1/projects/"+project.ID+"/revisions", bundle, &rev, 201)
	u.call("POST", "/v1/projects/"+project.ID+"/workspaces/"+ws.ID+"/plans", map[string]any{"revision": rev.Digest, "plan": planBytes}, &pl, 201)
	u.call("POST", "/v1/projects/"+project.ID+"/runs", map[string]any{"plan": pl.ID, "op": "apply"}, &run, 201)

	// Wait until the netns-only agent has heartbeated twice after the run was queued: it has
	// asked for work at least once since, and must have been given nothing.
	seen := func() string {
		var agents []obj
		u.call("GET", "/v1/projects/"+project.ID+"/agents", nil, &agents, 200)
		return agents[0].Seen
	}
	for i, last := 0, seen(); i < 2; {
		time.Sleep(50 * time.Millisecond)
		if s := seen(); s != last {
			i, last = i+1, s
		}
	}
	u.call("GET", "/v1/projects/"+project.ID+"/runs/"+run.ID, nil, &run, 200)
	if run.Status != "queued" {
		t.Fatalf("with only the netns agent up the run is %s (agent %q), want queued", run.Status, run.Agent)
	}

	full := start(t, []string{"SYSBOX_JOIN_TOKEN=" + join(), "SYSBOX_TEST_FAKE_WORLD=" + filepath.Join(work, "world-full.json")},
		"agent", "--server", url, "--data", filepath.Join(work, "agent-full"), "--name", "full", "--drivers", "netns,nftables", "--poll", "100ms", "--renew-every", "2s")
	agentLine := full.waitLine(t, "sysbox agent ")
	fullID := strings.Fields(agentLine)[2]

	deadline := time.Now().Add(90 * time.Second)
	for run.Status != "succeeded" && run.Status != "failed" {
		if time.Now().After(deadline) {
			t.Fatalf("run still %s after 90 s", run.Status)
		}
		time.Sleep(200 * time.Millisecond)
		u.call("GET", "/v1/projects/"+project.ID+"/runs/"+run.ID, nil, &run, 200)
	}
	var events []struct {
		Seq  int64  `json:"seq"`
		Data string `json:"data"`
	}
	u.call("GET", "/v1/projects/"+project.ID+"/runs/"+run.ID+"/events", nil, &events, 200)
	var lines []string
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		lines = append(lines, e.Data)
	}
	text := strings.Join(lines, "\n")
	if run.Status != "succeeded" || run.Agent != fullID {
		t.Fatalf("run %s by %s (%s), want succeeded by %s; events:\n%s", run.Status, run.Agent, run.Result, fullID, text)
	}
	if !strings.Contains(text, "Apply complete.") || !strings.Contains(text, "sysbox_node.web[1]") {
		t.Fatalf("events lack the apply's progress lines:\n%s", text)
	}
	// The agent's workspace holds the lab's state, as a local apply would.
	state, err := os.ReadFile(filepath.Join(work, "agent-full", "workspaces", ws.ID, ".sysbox", "state"))
	if err != nil || !bytes.Contains(state, []byte("sysbox_node.web[1]")) {
		t.Fatalf("agent workspace state: %v\n%s", err, state)
	}
}
