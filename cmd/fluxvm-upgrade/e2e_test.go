package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/testenv"
)

// e2eHook re-creates the one test map the way an apply/rollback hook does, adds a "new" entry on
// apply, and fails health when told to.
const e2eHook = `#!/bin/sh
set -eu
pin=$1 order=$2 failhealth=${3:-}
echo "$FLUXVM_COMPONENT/$FLUXVM_STEP" >> "$order"
case $FLUXVM_STEP in
apply)
	rm -f "$pin"
	bpftool map create "$pin" type hash key 4 value 8 entries 64 name fxu_e2e
	bpftool map update pinned "$pin" key 100 0 0 0 value 1 0 0 0 0 0 0 0
	;;
rollback)
	rm -f "$pin"
	bpftool map create "$pin" type hash key 4 value 8 entries 32 name fxu_e2e
	;;
health)
	bpftool map lookup pinned "$pin" key 1 0 0 0 >/dev/null
	[ -z "$failhealth" ]
	;;
esac
`

// TestRealBPFFSRoundTrip runs the binary with the kernel map store on one explicitly named
// pinned map under /sys/fs/bpf/fluxvm (F19): a committed upgrade merges the old entries into
// the re-created map, a failing one rolls back and restores them, and a SIGKILL after apply is
// recovered by resume. Gated: FLUXVM_UPGRADE_DESTRUCTIVE_E2E=1 and /etc/fluxvm/ALLOW_DESTRUCTIVE_E2E.
func TestRealBPFFSRoundTrip(t *testing.T) {
	bpftool := requireDestructiveBPFFS(t)
	bin := testBinary(t) // fluxvmtest build: failpoints; without FLUXVM_UPGRADE_TEST_FAKE_BPF it uses the kernel store

	if err := os.MkdirAll("/sys/fs/bpf/fluxvm", 0o755); err != nil {
		t.Fatal(err)
	}
	pin := fmt.Sprintf("/sys/fs/bpf/fluxvm/fluxvm_upgrade_e2e_%d", os.Getpid())
	t.Cleanup(func() { os.Remove(pin) }) // the shared /sys/fs/bpf/fluxvm directory stays
	dir := t.TempDir()
	hook := filepath.Join(dir, "hook.sh")
	os.WriteFile(hook, []byte(e2eHook), 0o755)
	order := filepath.Join(dir, "order.log")

	seed := func() {
		os.Remove(pin)
		mustRun(t, bpftool, "map", "create", pin, "type", "hash", "key", "4", "value", "8", "entries", "32", "name", "fxu_e2e")
		for k := 1; k <= 3; k++ {
			mustRun(t, bpftool, "map", "update", "pinned", pin, "key", fmt.Sprint(k), "0", "0", "0", "value", fmt.Sprint(k*10), "0", "0", "0", "0", "0", "0", "0")
		}
	}
	entries := func() map[int]int { return bpfDump(t, bpftool, pin) }
	writePlan := func(tx string, failHealth bool) string {
		args := []string{hook, pin, order}
		if failHealth {
			args = append(args, "fail")
		}
		argv, _ := json.Marshal(args)
		plan := fmt.Sprintf(`{"transaction_id":%q,"state_dir":%q,"components":[{"name":"e2e","hooks":{"preflight":%[3]s,"apply":%[3]s,"health":%[3]s,"rollback":%[3]s},
			"maps":[{"name":"m","pin":%q,"policy":"merge","type":"hash","key_size":4,"value_size":8,"max_entries":32}]}]}`,
			tx, filepath.Join(dir, "state"), argv, strings.TrimPrefix(pin, "/sys/fs/bpf/"))
		p := filepath.Join(dir, tx+".json")
		os.WriteFile(p, []byte(plan), 0o644)
		return p
	}
	run := func(failpoint string, args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		if failpoint != "" {
			cmd.Env = append(cmd.Env, "FLUXVM_UPGRADE_TEST_FAILPOINT="+failpoint)
		}
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	old := map[int]int{1: 10, 2: 20, 3: 30}

	t.Run("commit merges old entries into the re-created map", func(t *testing.T) {
		seed()
		p := writePlan("e2e-commit", false)
		if code, out := run("", "probe", p); code != 0 {
			t.Fatalf("probe: exit %d\n%s", code, out)
		}
		if code, out := run("", "run", p); code != 0 {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		got := entries()
		want := map[int]int{1: 10, 2: 20, 3: 30, 100: 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("entries: got %v, want %v", got, want)
		}
		if code, out := run("", "verify-evidence", filepath.Join(dir, "state", "e2e-commit")); code != 0 {
			t.Errorf("verify-evidence: exit %d\n%s", code, out)
		}
	})
	t.Run("failing health rolls back and restores entries", func(t *testing.T) {
		seed()
		p := writePlan("e2e-rollback", true)
		if code, out := run("", "run", p); code != exitRolledBack {
			t.Fatalf("run: exit %d, want %d\n%s", code, exitRolledBack, out)
		}
		if got := entries(); fmt.Sprint(got) != fmt.Sprint(old) {
			t.Errorf("entries after rollback: got %v, want %v", got, old)
		}
	})
	t.Run("SIGKILL after apply, resume", func(t *testing.T) {
		seed()
		p := writePlan("e2e-crash", false)
		if code, _ := run("step-done:e2e:apply", "run", p); code != -1 {
			t.Fatalf("run with failpoint: exit %d, want killed", code)
		}
		if code, out := run("", "resume", p); code != 0 {
			t.Fatalf("resume: exit %d\n%s", code, out)
		}
		if got := entries(); got[1] != 10 || got[2] != 20 || got[3] != 30 {
			t.Errorf("entries after crash + resume: got %v, want old entries kept", got)
		}
	})
}

// requireDestructiveBPFFS gates a test that creates maps under /sys/fs/bpf/fluxvm (F19): root,
// FLUXVM_UPGRADE_DESTRUCTIVE_E2E=1, /etc/fluxvm/ALLOW_DESTRUCTIVE_E2E, bpffs and bpftool, whose
// path it returns.
func requireDestructiveBPFFS(t *testing.T) string {
	t.Helper()
	_, gateErr := os.Stat("/etc/fluxvm/ALLOW_DESTRUCTIVE_E2E")
	testenv.Require(t, os.Getenv("FLUXVM_UPGRADE_DESTRUCTIVE_E2E") == "1" && gateErr == nil,
		"destructive bpffs test needs FLUXVM_UPGRADE_DESTRUCTIVE_E2E=1 and /etc/fluxvm/ALLOW_DESTRUCTIVE_E2E (throwaway lab node only)")
	testenv.RequireRoot(t)
	bpftool := testenv.RequireBinary(t, "bpftool")
	testenv.Require(t, upgrade.IsBPFFS("/sys/fs/bpf") == nil, "no bpf filesystem mounted at /sys/fs/bpf")
	return bpftool
}

// bpfDump reads a pinned map with 4-byte keys and 8-byte values as key → value.
func bpfDump(t *testing.T, bpftool, pin string) map[int]int {
	t.Helper()
	out := mustRun(t, bpftool, "-j", "map", "dump", "pinned", pin)
	var dump []struct {
		Key   []string `json:"key"`
		Value []string `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatalf("bpftool dump %s: %v\n%s", pin, err, out)
	}
	m := map[int]int{}
	for _, e := range dump {
		m[leInt(t, e.Key)] = leInt(t, e.Value)
	}
	return m
}

// leInt decodes bpftool's little-endian byte list ("0x01", …).
func leInt(t *testing.T, bs []string) int {
	n := 0
	for i := len(bs) - 1; i >= 0; i-- {
		var b int
		if _, err := fmt.Sscanf(bs[i], "0x%x", &b); err != nil {
			t.Fatalf("bpftool byte %q: %v", bs[i], err)
		}
		n = n<<8 | b
	}
	return n
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
