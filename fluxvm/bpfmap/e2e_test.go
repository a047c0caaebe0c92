package bpfmap

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"zyvor.dev/sysbox/internal/testenv"
)

// buildFluxvmUpgrade builds the real command; with tags "fluxvmtest" it also honours
// FLUXVM_UPGRADE_TEST_FAILPOINT (SIGKILL after a given journal record) for the crash case.
func buildFluxvmUpgrade(t *testing.T, tags ...string) string {
	t.Helper()
	return testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/fluxvm-upgrade", tags...)
}

type e2ePlan struct {
	TransactionID string         `json:"transaction_id"`
	StateDir      string         `json:"state_dir"`
	BPFFSRoot     string         `json:"bpffs_root"`
	Components    []e2eComponent `json:"components"`
}

type e2eComponent struct {
	Name  string              `json:"name"`
	Hooks map[string][]string `json:"hooks"`
	Maps  []map[string]any    `json:"maps"`
}

func writePlan(t *testing.T, dir string, p e2ePlan) string {
	t.Helper()
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, p.TransactionID+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runTool runs the binary and returns its exit code (-1 when killed by a signal) and output.
func runTool(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("run %s %v: %v\n%s", bin, args, err, out)
	return 0, ""
}

// TestE2EFluxvmUpgradeRealMaps drives the real fluxvm-upgrade binary against a real pinned map,
// with mapctl as the component's apply and rollback hooks: a committed merge upgrade, a failed
// health check that rolls back with replace, a restore refused for a value-size change that rolls
// back, and a SIGKILL right after apply followed by `fluxvm-upgrade rollback`. Every outcome is
// checked entry by entry.
func TestE2EFluxvmUpgradeRealMaps(t *testing.T) {
	requireDestructive(t)
	pin := setupTestPin(t, "bpfmap-e2e")
	mapctl := buildMapctl(t)
	bin := buildFluxvmUpgrade(t)
	binTest := buildFluxvmUpgrade(t, "fluxvmtest")
	h := hook{t: t, path: mapctl, pin: pin}
	stateDir := t.TempDir()
	planDir := t.TempDir()
	const ks, vs = 8, 16
	old := want(ebpf.Hash, ks, vs, span{0, 1000, 1})

	mc := func(args ...string) []string { return append([]string{mapctl}, args...) }
	plan := func(id, policy string, apply, health []string) e2ePlan {
		return e2ePlan{
			TransactionID: id, StateDir: stateDir, BPFFSRoot: bpffsRoot,
			Components: []e2eComponent{{
				Name: "ct",
				Hooks: map[string][]string{
					"preflight": mc("dump", "-pin", pin),
					"apply":     apply,
					"health":    health,
					"rollback":  mc("create", "-pin", pin, "-replace", "-max", "1024"),
				},
				Maps: []map[string]any{{"name": "ct", "pin": pin, "policy": policy,
					"type": "hash", "key_size": ks, "value_size": vs, "max_entries": 1024}},
			}},
		}
	}
	upgradeApply := mc("create", "-pin", pin, "-replace", "-max", "2048", "-fill", "20", "-start", "990", "-seed", "2")
	healthy := mc("dump", "-pin", pin)

	t.Run("committed merge", func(t *testing.T) {
		h.run("create", "-replace", "-max", "1024", "-fill", "1000", "-seed", "1")
		p := writePlan(t, planDir, plan("bpfmap-e2e-commit", "merge", upgradeApply, healthy))
		if code, out := runTool(t, bin, nil, "run", p); code != 0 {
			t.Fatalf("run: exit %d, want 0\n%s", code, out)
		}
		checkEntries(t, "after committed upgrade", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{990, 20, 2}, span{0, 1000, 1}))
		si, hdr, err := VerifySnapshot(filepath.Join(stateDir, "bpfmap-e2e-commit", "snapshots", "ct", "maps", "ct.snap"))
		if err != nil || si.Entries != 1000 || !strings.HasPrefix(hdr.Tool, "fluxvm-upgrade") {
			t.Errorf("snapshot in the transaction dir: %+v tool %q, %v; want 1000 entries by fluxvm-upgrade", si, hdr.Tool, err)
		}
		code, out := runTool(t, bin, nil, "status", "--json", p)
		if code != 0 || !strings.Contains(out, "committed") {
			t.Errorf("status: exit %d, want 0 and committed\n%s", code, out)
		}
	})

	t.Run("failed health rolls back with replace", func(t *testing.T) {
		h.run("create", "-replace", "-max", "1024", "-fill", "1000", "-seed", "1")
		p := writePlan(t, planDir, plan("bpfmap-e2e-health", "replace", upgradeApply, []string{"/bin/false"}))
		if code, out := runTool(t, bin, nil, "run", p); code != 6 {
			t.Fatalf("run: exit %d, want 6 (rolled-back)\n%s", code, out)
		}
		checkEntries(t, "after rollback", dumpPin(t, pin), old)
	})

	t.Run("value size change refused, rolled back", func(t *testing.T) {
		h.run("create", "-replace", "-max", "1024", "-fill", "1000", "-seed", "1")
		badApply := mc("create", "-pin", pin, "-replace", "-max", "2048", "-value", "32", "-fill", "5", "-seed", "3")
		p := writePlan(t, planDir, plan("bpfmap-e2e-abi", "merge", badApply, healthy))
		code, out := runTool(t, bin, nil, "run", p)
		if code != 6 {
			t.Fatalf("run: exit %d, want 6 (rolled-back)\n%s", code, out)
		}
		journal, _ := os.ReadFile(filepath.Join(stateDir, "bpfmap-e2e-abi", "journal.final.json"))
		if !strings.Contains(string(journal), "value_size: snapshot 16, target 32") {
			t.Errorf("journal.final.json does not record the ABI refusal:\n%s", journal)
		}
		checkEntries(t, "after rollback", dumpPin(t, pin), old)
	})

	t.Run("killed after apply, then rollback command", func(t *testing.T) {
		h.run("create", "-replace", "-max", "1024", "-fill", "1000", "-seed", "1")
		p := writePlan(t, planDir, plan("bpfmap-e2e-crash", "merge", upgradeApply, healthy))
		code, out := runTool(t, binTest, []string{"FLUXVM_UPGRADE_TEST_FAILPOINT=step-done:ct:apply"}, "run", p)
		if code != -1 {
			t.Fatalf("run with failpoint: exit %d, want killed by SIGKILL\n%s", code, out)
		}
		// The new, empty-but-20 map is live; the old entries exist only in the snapshot.
		checkEntries(t, "after crash", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{990, 20, 2}))
		if code, out := runTool(t, bin, nil, "rollback", p); code != 6 {
			t.Fatalf("rollback: exit %d, want 6 (rolled-back)\n%s", code, out)
		}
		checkEntries(t, "after rollback command", dumpPin(t, pin), old)
	})
}
