package crash

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// provTopology is two web nodes with two provisioners each, one worker: the kill points are
// ordered and each provisioner runs at a known position.
const provTopology = `
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
  parallelism = 1
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
  provisioner "exec" {
    command = ["useradd", "web"]
  }
  provisioner "exec" {
    command = ["sh", "-c", "echo key >> /root/.ssh/authorized_keys"]
  }
}
`

// TestProvisionerExactlyOnceOrTainted kills apply before each provisioner starts (fake Exec
// failpoint), after each one returns (executor failpoint "provisioner") and after every
// checkpoint record. Recovery must never run a provisioner whose checkpoint says it may have
// started: it records the node degraded ("tainted …"), exits non-zero naming it, and the next
// plan replaces it with that reason. Recovery may run only the provisioners of nodes that had
// not begun them; any further guest exec kills it (fake failpoint) and fails the test.
func TestProvisionerExactlyOnceOrTainted(t *testing.T) {
	var points []string
	for k := 1; k <= 4; k++ {
		points = append(points, "exec@"+strconv.Itoa(k), "provisioner@"+strconv.Itoa(k))
	}
	for n := 1; n < 100; n++ {
		points = append(points, "checkpoint@"+strconv.Itoa(n))
	}
	tainted, kills, finished := 0, 0, false
	for _, p := range points {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(provTopology), 0o644); err != nil {
			t.Fatal(err)
		}
		var env []string
		if k, ok := strings.CutPrefix(p, "exec@"); ok {
			env = []string{fake.EnvFailpoints + "=Exec@" + k + "=crash"}
		} else {
			env = []string{failpoint.EnvSpec + "=" + p}
		}
		r := run(t, dir, env, "apply", "-auto-approve")
		if !r.Killed {
			if strings.HasPrefix(p, "checkpoint@") {
				must(t, r, "apply with "+p)
				finished = true
				break // beyond the last record
			}
			t.Fatalf("apply with %s was not killed: %+v", p, r)
		}
		kills++
		what := "apply killed at " + p
		it, err := executor.ReadLog(filepath.Join(dir, ".sysbox"))
		if err != nil || it == nil {
			t.Fatalf("%s: checkpoint log: %v (%v)", what, it, err)
		}
		var want []string // nodes whose provisioners may have run
		mayRun := 0       // provisioners recovery may run (nodes that had not begun them)
		for _, op := range it.Ops {
			if op.Action.Kind != specs.KindNode || op.Step.Terminal() || pastProvisioning[op.Step] {
				continue
			}
			if op.Step == executor.StepProvisioning {
				want = append(want, op.Addr)
			} else {
				mayRun += len(op.Action.Node.Provisioners)
			}
		}
		// Any guest exec beyond mayRun kills the recovery: a second run would go unnoticed otherwise.
		rec := run(t, dir, []string{fake.EnvFailpoints + "=Exec@" + strconv.Itoa(mayRun+1) + "=crash"}, "recover")
		if rec.Killed {
			t.Fatalf("%s: recovery ran a provisioner again (guest exec %d, %d allowed):\n%s", what, mayRun+1, mayRun, rec.Out)
		}
		if strings.HasPrefix(p, "exec@") || strings.HasPrefix(p, "provisioner@") {
			if len(want) != 1 {
				t.Fatalf("%s: %d operations at step %q in the checkpoint, want 1", what, len(want), executor.StepProvisioning)
			}
		}
		if len(want) == 0 {
			must(t, rec, what+": recover")
		} else {
			tainted++
			if rec.Code != 1 || !strings.Contains(rec.Out, "tainted") {
				t.Fatalf("%s: recover: want exit 1 naming the tainted node, got %+v", what, rec)
			}
			st := readState(t, dir)
			for _, a := range want {
				if !strings.Contains(rec.Out, a) {
					t.Errorf("%s: recover output does not name %s:\n%s", what, a, rec.Out)
				}
				res := st.Resource(mustParse(t, a))
				if res == nil || res.Observation.Status != substrate.Degraded || !strings.Contains(res.Observation.Reason, "tainted") {
					t.Fatalf("%s: %s in state: %+v, want degraded and tainted", what, a, res)
				}
			}
			pl := run(t, dir, nil, "plan")
			for _, a := range want {
				if !planReplaces(pl.Out, a) {
					t.Fatalf("%s: plan does not replace %s with the taint as reason:\n%s", what, a, pl.Out)
				}
			}
		}
		if r := run(t, dir, nil, "recover"); r.Code != 0 || !strings.Contains(r.Out, "Nothing to recover") {
			t.Fatalf("%s: second recover: %+v", what, r)
		}
		must(t, run(t, dir, nil, "apply", "-auto-approve"), what+": converging apply")
		agree(t, dir, what+" after converging apply")
		for _, res := range readState(t, dir).Resources {
			if res.Observation.Status != substrate.Present {
				t.Fatalf("%s: after converging apply %s is %s (%s)", what, res.Addr, res.Observation.Status, res.Observation.Reason)
			}
		}
	}
	if !finished {
		t.Fatalf("every checkpoint up to the bound of 99 killed the apply: the loop never reached the end of a run")
	}
	if tainted == 0 || kills < 10 {
		t.Fatalf("%d kills, %d tainted: the provisioning window was not hit", kills, tainted)
	}
	t.Logf("%d kill points, %d left a tainted node", kills, tainted)
}

// planReplaces reports whether plan output has a replace line for addr whose reason names the taint.
func planReplaces(out, addr string) bool {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		// "-/+ ADDR replace" with the reason on the next line ("# observed degraded (…tainted…)").
		if strings.Contains(line, addr+" replace") && i+1 < len(lines) && strings.Contains(lines[i+1], "tainted") {
			return true
		}
	}
	return false
}

// pastProvisioning are the node steps recorded after every provisioner returned.
var pastProvisioning = map[executor.Step]bool{executor.StepProvisioned: true, executor.StepReapplied: true,
	executor.StepStateSaved: true, executor.StepCleaned: true}

func mustParse(t *testing.T, a string) addrs.Instance {
	t.Helper()
	i, err := addrs.ParseInstance(a)
	if err != nil {
		t.Fatal(fmt.Errorf("address %s: %w", a, err))
	}
	return i
}
