// Package crash kills the real sysbox binary with SIGKILL at every checkpoint record, every
// state save and every driver mutation of apply (create), apply after a configuration change
// (replace), destroy (delete) and reset, running on the file-persisted fake driver (test mode,
// SYSBOX_TEST_FAKE_WORLD). After each kill it runs `sysbox recover` and checks that state and
// the fake world agree exactly (nothing leaked, nothing duplicated, every state object present
// with its markers), that a second `sysbox recover` changes nothing, and that re-running the
// command converges.
package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/states"
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
  parallelism = 1
}

variable "web_command" {
  type    = list(string)
  default = ["sleep", "infinity"]
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_network" "wan" {
  ipv4_cidr = "203.0.113.0/24"
}

resource "sysbox_node" "gw" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.1/24"]
  }
  attachment "wan" {
    network = sysbox_network.wan
    ipv4    = ["203.0.113.2/24"]
  }
}

resource "sysbox_node" "web" {
  count   = 2
  driver  = "netns"
  command = var.web_command
  environment = {
    TOKEN = env("WEB_TOKEN")
  }
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.${10 + count.index}/24"]
    gateway = "198.51.100.1"
  }
}

resource "sysbox_firewall" "web" {
  node          = sysbox_node.web[0]
  default_input = "drop"
  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    destination_port = 80
    attachment       = "lan"
  }
}
`

const secret = "crash-test-token-plaintext"

func run(t *testing.T, dir string, env []string, args ...string) exectest.Outcome {
	t.Helper()
	c := exec.Command(binary, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(dir, "world.json"), "WEB_TOKEN="+secret)
	c.Env = append(c.Env, env...)
	return exectest.Run(t, fmt.Sprintf("run %v", args), c)
}

func must(t *testing.T, r exectest.Outcome, what string) {
	t.Helper()
	if r.Killed || r.Code != 0 {
		t.Fatalf("%s: killed=%v exit=%d\n%s", what, r.Killed, r.Code, r.Out)
	}
}

func newLab(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(topology), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readState(t *testing.T, dir string) *states.State {
	t.Helper()
	b, err := local.New(filepath.Join(dir, ".sysbox", "state"))
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

// agree checks state against the fake world: every node, network and policy in state exists
// with exactly its owner's marker (nodes running, NICs up with the recorded MAC); every object
// carrying the topology's markers is referenced by state.
func agree(t *testing.T, dir, what string) {
	t.Helper()
	st := readState(t, dir)
	d, err := fake.New(fake.Options{Path: filepath.Join(dir, "world.json")})
	if err != nil {
		t.Fatal(err)
	}
	w := d.World()
	if st == nil {
		if len(w.Nodes)+len(w.Networks)+len(w.Policies)+len(w.NICs) != 0 {
			t.Fatalf("%s: no state, but the world holds objects", what)
		}
		return
	}
	refs := map[string]bool{}
	var problems []string
	nodes, nets, pols := 0, 0, 0
	kinds := handlers.Builtin()
	for _, r := range st.Resources {
		kind, _ := kinds.Kind(r.Addr.Resource.Type)
		switch kind {
		case specs.KindNode:
			nodes++
			n := w.Nodes[r.ExternalID]
			if n == nil || n.Marker != r.Owner.Marker() || !n.Running || n.Quiesced {
				problems = append(problems, fmt.Sprintf("%s: state names %s, world has %+v", r.Addr, r.ExternalID, n))
				continue
			}
			refs[n.ID] = true
			for _, at := range r.Attachments {
				c := w.NICs[n.ID+"/"+at.Name]
				if c == nil || c.MAC != at.MAC || !c.Up {
					problems = append(problems, fmt.Sprintf("%s: attachment %s: world has %+v", r.Addr, at.Name, c))
				}
				refs[n.ID+"/"+at.Name] = true
			}
		case specs.KindNetwork:
			nets++
			if n := w.Networks[r.ExternalID]; n == nil || n.Marker != r.Owner.Marker() {
				problems = append(problems, fmt.Sprintf("%s: network %s missing or foreign", r.Addr, r.ExternalID))
			}
			refs[r.ExternalID] = true
		case specs.KindPolicy:
			pols++
			if p := w.Policies[r.ExternalID]; p == nil || p.Marker != r.Owner.Marker() {
				problems = append(problems, fmt.Sprintf("%s: policy %s missing or foreign", r.Addr, r.ExternalID))
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
			problems = append(problems, fmt.Sprintf("leaked %s %s (%s gen %d)", o.Kind, o.ExternalID, o.Owner.Address, o.Owner.Generation))
		}
	}
	if len(w.Nodes) != nodes || len(w.Networks) != nets || len(w.Policies) != pols {
		problems = append(problems, fmt.Sprintf("world has %d nodes %d networks %d policies, state %d %d %d", len(w.Nodes), len(w.Networks), len(w.Policies), nodes, nets, pols))
	}
	if len(problems) > 0 {
		t.Fatalf("%s: state and world disagree:\n  %s", what, strings.Join(problems, "\n  "))
	}
}

func mutations(t *testing.T, dir string) uint64 {
	d, err := fake.New(fake.Options{Path: filepath.Join(dir, "world.json")})
	if err != nil {
		t.Fatal(err)
	}
	return d.World().Mutations
}

// recovered runs recover twice and checks agreement and idempotence.
func recovered(t *testing.T, dir, what string) {
	t.Helper()
	must(t, run(t, dir, nil, "recover"), what+": recover")
	agree(t, dir, what)
	var serial uint64
	if st := readState(t, dir); st != nil {
		serial = st.Serial
	}
	muts := mutations(t, dir)
	r := run(t, dir, nil, "recover")
	must(t, r, what+": second recover")
	if !strings.Contains(r.Out, "Nothing to recover") {
		t.Fatalf("%s: second recover did something:\n%s", what, r.Out)
	}
	var serial2 uint64
	if st := readState(t, dir); st != nil {
		serial2 = st.Serial
	}
	if serial2 != serial || mutations(t, dir) != muts {
		t.Fatalf("%s: second recover changed state (serial %d → %d) or world", what, serial, serial2)
	}
}

func TestKillRealBinaryAtEveryStep(t *testing.T) {
	applied := func(t *testing.T, dir string) {
		must(t, run(t, dir, nil, "apply", "-auto-approve"), "setup apply")
	}
	converged := func(t *testing.T, dir, what string) {
		must(t, run(t, dir, nil, "apply", "-auto-approve"), what+": converging apply")
		agree(t, dir, what+" after converging apply")
		if st := readState(t, dir); len(st.Resources) != 6 {
			t.Fatalf("%s: converged state has %v", what, st.Addresses())
		}
	}
	scenarios := []struct {
		name  string
		setup func(t *testing.T, dir string)
		args  []string
		after func(t *testing.T, dir, what string)
	}{
		{"create", func(*testing.T, string) {}, []string{"apply", "-auto-approve"}, converged},
		// A changed command forces the replacement of both web nodes (and the firewall in one).
		{"replace", applied, []string{"apply", "-auto-approve", "-var", `web_command=["sleep","600"]`},
			func(t *testing.T, dir, what string) {
				must(t, run(t, dir, nil, "apply", "-auto-approve", "-var", `web_command=["sleep","600"]`), what+": converging apply")
				agree(t, dir, what+" after converging apply")
			}},
		{"delete", applied, []string{"destroy", "-auto-approve"}, func(t *testing.T, dir, what string) {
			must(t, run(t, dir, nil, "destroy", "-auto-approve"), what+": converging destroy")
			agree(t, dir, what+" after converging destroy")
			if st := readState(t, dir); st != nil && len(st.Resources) != 0 {
				t.Fatalf("%s: state after destroy: %v", what, st.Addresses())
			}
		}},
		{"reset", applied, []string{"reset", "sysbox_node.web[0]"}, converged},
	}
	for _, sc := range scenarios {
		for _, point := range []string{executor.PointCheckpoint, executor.PointState, "mutation"} {
			t.Run(sc.name+"/"+point, func(t *testing.T) {
				base := newLab(t)
				sc.setup(t, base)
				exectest.KillLoop{Point: point, Exact: point != executor.PointState,
					Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
						dir := t.TempDir()
						copyTree(t, base, dir)
						before := mutations(t, dir)
						trace := filepath.Join(t.TempDir(), "trace")
						env := []string{failpoint.EnvTrace + "=" + trace, failpoint.EnvSpec + "=" + point + "@" + strconv.Itoa(n)}
						if point == "mutation" {
							env = []string{fake.EnvFailpoints + "=mutation@" + strconv.Itoa(n) + "=crash"}
						}
						r := run(t, dir, env, sc.args...)
						if point == "mutation" {
							passed := int(mutations(t, dir) - before)
							if r.Killed {
								passed-- // the nth mutation is persisted before its failpoint fires
							}
							return r, passed, dir
						}
						return r, exectest.Traced(t, trace, point), dir
					},
					After: func(t *testing.T, dir, what string) {
						recovered(t, dir, what)
						sc.after(t, dir, what)
					}}.Kill(t, strings.Join(sc.args, " "))
			})
		}
	}
}

// TestNoSecretInDurableFiles: after apply, reset and a killed run, no file the binary wrote
// holds the secret's plaintext.
func TestNoSecretInDurableFiles(t *testing.T) {
	dir := newLab(t)
	must(t, run(t, dir, nil, "apply", "-auto-approve"), "apply")
	must(t, run(t, dir, nil, "reset", "sysbox_node.web[1]"), "reset")
	r := run(t, dir, []string{failpoint.EnvSpec + "=" + executor.PointCheckpoint + "@6"}, "reset", "sysbox_node.web[0]")
	if !r.Killed {
		t.Fatalf("reset was not killed: %+v", r)
	}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), secret) {
				t.Errorf("secret plaintext in %s", p)
			}
		}
		return nil
	})
	must(t, run(t, dir, nil, "recover"), "recover")
}

// TestKillRealBinaryRealDrivers is the kernel tier of the matrix: examples/lab-small on the real
// netns and nftables drivers, the binary killed after every checkpoint record of apply and of
// reset. After each kill `sysbox recover` must finish the run, `sysbox refresh` must observe
// every resource present, a second recover must find nothing, and `sysbox destroy` must end
// with a clean residue audit (the drivers' own audit of this topology's markers).
func TestKillRealBinaryRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	_, file, _, _ := runtime.Caller(0)
	example := filepath.Join(filepath.Dir(file), "..", "..", "examples", "lab-small")
	sb := exectest.CLI{Bin: binary, Env: []string{"WEB_TOKEN=" + secret}}
	for _, sc := range []struct {
		name  string
		setup bool
		args  []string
	}{
		{"apply", false, []string{"apply", "-auto-approve"}},
		{"reset", true, []string{"reset", "sysbox_node.web[0]", "sysbox_node.gw"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			exectest.KillLoop{Point: executor.PointCheckpoint, Exact: true,
				Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
					dir := t.TempDir()
					copyTree(t, example, dir)
					t.Cleanup(func() { sb.Run(t, dir, nil, "destroy", "-auto-approve") })
					if sc.setup {
						sb.Must(t, dir, "setup", "apply", "-auto-approve")
					}
					r, passed := sb.KillAt(t, dir, executor.PointCheckpoint, n, sc.args...)
					return r, passed, dir
				},
				After: func(t *testing.T, dir, what string) {
					if r := sb.Run(t, dir, nil, "recover"); r.Killed || r.Code != 0 {
						// Killed while provisioners may have run: the node is tainted, never
						// provisioned twice, and the next apply replaces it.
						if r.Killed || r.Code != 1 || !strings.Contains(r.Out, "tainted") {
							t.Fatalf("%s: recover: %+v", what, r)
						}
						if out := sb.Must(t, dir, what+": apply replacing the tainted node", "apply", "-auto-approve"); !strings.Contains(out, "tainted") {
							t.Fatalf("%s: apply replacing the tainted node:\n%s", what, out)
						}
					}
					sb.Settled(t, dir, what)
					if out := sb.Must(t, dir, what+": destroy", "destroy", "-auto-approve"); !strings.Contains(out, "Residue audit: no object") {
						t.Fatalf("%s: destroy:\n%s", what, out)
					}
				}}.Kill(t, strings.Join(sc.args, " "))
		})
	}
}
