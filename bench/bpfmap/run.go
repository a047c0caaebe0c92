package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
)

// hookScript is the component's one hook. apply upgrades the way a datapath release does:
// it re-creates the pinned map empty (as the sentinel hook of examples/fluxvm-upgrade does),
// and fluxvm-upgrade then merges the snapshot back. Every other step succeeds.
// fluxvm-upgrade gives hooks a clean environment, so the values are written into the script.
const hookScript = `#!/bin/sh
set -eu
if [ "$FLUXVM_STEP" = apply ]; then
	rm -f '%[1]s'
	'%[2]s' map create '%[1]s' type hash key %[3]d value %[4]d entries %[5]d name fluxvm_bench
fi
`

// timeFluxvmRun times whole `fluxvm-upgrade run`s (one component, the full map, policy merge:
// snapshot, apply hook, restore, health, evidence, journal) against `bpftool -j map dump` of the
// same map, runs times each, and prints one line per run: ours (wall, CPU of the process and its
// children), the peer's wall time, the ratio (issue 16 target: ≤ 0.25).
func (b *bench) timeFluxvmRun(ctx context.Context, bin, root, dir string) error {
	tool, err := exec.LookPath(b.bpftool)
	if err != nil {
		return err
	}
	hook := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(hook, fmt.Appendf(nil, hookScript, b.pin, tool, keySize, valueSize, b.n), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(root, b.pin)
	if err != nil {
		return err
	}
	h := []string{hook}
	for r := 0; r < b.runs; r++ {
		tx := fmt.Sprintf("bench-%d-%d", os.Getpid(), r)
		plan := map[string]any{
			"transaction_id": tx, "state_dir": filepath.Join(dir, "state"), "bpffs_root": root,
			"components": []any{map[string]any{
				"name":  "bench",
				"hooks": map[string]any{"preflight": h, "apply": h, "health": h, "rollback": h},
				"maps": []any{map[string]any{"name": "hash", "pin": rel, "policy": "merge",
					"type": "hash", "key_size": keySize, "value_size": valueSize}},
			}},
		}
		pf := filepath.Join(dir, tx+".json")
		data, _ := json.Marshal(plan)
		if err := os.WriteFile(pf, data, 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, bin, "run", pf)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		wall := time.Since(t0)
		if err != nil {
			return fmt.Errorf("fluxvm-upgrade run %s: %w\n%s", pf, err, out)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		m, err := ebpf.LoadPinnedMap(b.pin, nil)
		if err != nil {
			return fmt.Errorf("map after the run: %w", err)
		}
		err = verify(m, b.keys, b.vals, int64(b.n)) // the new map holds every old entry
		m.Close()
		if err != nil {
			return fmt.Errorf("after fluxvm-upgrade run: %w", err)
		}
		once := *b
		once.runs = 1
		dump, err := once.timeBpftoolDump(ctx, &result{})
		if err != nil {
			return err
		}
		fmt.Printf("run %d: fluxvm-upgrade run %.3fs (cpu %.3fs, map of %d entries, merge) bpftool -j map dump %.3fs ratio %.3f\n",
			r+1, wall.Seconds(), cpu.Seconds(), b.n, dump[0].Seconds(), wall.Seconds()/dump[0].Seconds())
	}
	return nil
}
