package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"zyvor.dev/sysbox/fluxvm/upgrade"
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
// children), the peer's wall time, the ratio (issue 16 target: ≤ 0.25), then where our time went
// by the transaction journal. With base (an older build), each run also times base, the two
// alternating which goes first, so that a before/after comparison shares the host's state.
func (b *bench) timeFluxvmRun(ctx context.Context, bin, base, root, dir string) error {
	tool, err := exec.LookPath(b.bpftool)
	if err != nil {
		return err
	}
	hook := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(hook, fmt.Appendf(nil, hookScript, b.pin, tool, keySize, valueSize, b.n), 0o755); err != nil {
		return err
	}
	var ours, olds, ratios, oldRatios []float64
	for r := 0; r < b.runs; r++ {
		bins := []string{bin}
		if base != "" {
			bins = []string{base, bin}
			if r%2 == 1 {
				bins = []string{bin, base}
			}
		}
		got := map[string]runSample{}
		for i, x := range bins {
			s, err := b.fluxvmRunOnce(ctx, x, root, dir, hook, fmt.Sprintf("bench-%d-%d-%d", os.Getpid(), r, i))
			if err != nil {
				return err
			}
			got[x] = s
		}
		once := *b
		once.runs = 1
		dump, err := once.timeBpftoolDump(ctx, &result{})
		if err != nil {
			return err
		}
		d := dump[0].Seconds()
		s := got[bin]
		fmt.Printf("run %d: fluxvm-upgrade run %.3fs (cpu %.3fs, map of %d entries, merge) bpftool -j map dump %.3fs ratio %.3f\n",
			r+1, s.wall.Seconds(), s.cpu.Seconds(), b.n, d, s.wall.Seconds()/d)
		fmt.Printf("  steps: %s\n", s.steps)
		ours, ratios = append(ours, s.wall.Seconds()), append(ratios, s.wall.Seconds()/d)
		if base != "" {
			o := got[base]
			fmt.Printf("  base: fluxvm-upgrade run %.3fs (cpu %.3fs) ratio %.3f; steps: %s\n", o.wall.Seconds(), o.cpu.Seconds(), o.wall.Seconds()/d, o.steps)
			olds, oldRatios = append(olds, o.wall.Seconds()), append(oldRatios, o.wall.Seconds()/d)
		}
	}
	fmt.Printf("median of %d: fluxvm-upgrade run %.3fs ratio %.3f", b.runs, medianF(ours), medianF(ratios))
	if base != "" {
		fmt.Printf("; base %.3fs ratio %.3f", medianF(olds), medianF(oldRatios))
	}
	fmt.Println()
	return nil
}

// runSample is one timed run: wall time, CPU (user + system of the process and its hooks) and
// the journal's account of it.
type runSample struct {
	wall, cpu time.Duration
	steps     string
}

// fluxvmRunOnce runs bin on a fresh one-component plan (transaction tx) and checks afterwards
// that the new map holds every old entry.
func (b *bench) fluxvmRunOnce(ctx context.Context, bin, root, dir, hook, tx string) (runSample, error) {
	rel, err := filepath.Rel(root, b.pin)
	if err != nil {
		return runSample{}, err
	}
	h := []string{hook}
	state := filepath.Join(dir, "state")
	plan := map[string]any{
		"transaction_id": tx, "state_dir": state, "bpffs_root": root,
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
		return runSample{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "run", pf)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(t0)
	if err != nil {
		return runSample{}, fmt.Errorf("fluxvm-upgrade run %s: %w\n%s", pf, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	m, err := ebpf.LoadPinnedMap(b.pin, nil)
	if err != nil {
		return runSample{}, fmt.Errorf("map after the run: %w", err)
	}
	err = verify(m, b.keys, b.vals, int64(b.n)) // the new map holds every old entry
	m.Close()
	if err != nil {
		return runSample{}, fmt.Errorf("after fluxvm-upgrade run: %w", err)
	}
	steps, err := journalSteps(filepath.Join(state, tx), t0, wall)
	if err != nil {
		return runSample{}, err
	}
	// Each run leaves a 24 MB snapshot; keep the directory from growing over many runs.
	if err := os.RemoveAll(filepath.Join(state, tx, "snapshots")); err != nil {
		return runSample{}, err
	}
	return runSample{wall: wall, cpu: cpu, steps: steps}, nil
}

// journalSteps says where a run's wall time went, in ms, from its journal's timestamps: from the
// start of the process to the begin record (start, plan, probe, lock), each forward step from
// its start record to its outcome record (the start record's fsync included), the gaps between
// steps (outcome and next start records, hook log files), and from the end record to the exit
// (journal.final.json, evidence, exit).
func journalSteps(txDir string, t0 time.Time, wall time.Duration) (string, error) {
	evs, err := upgrade.ReadJournal(txDir)
	if err != nil {
		return "", err
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", d.Seconds()*1000) }
	var parts []string
	var begin, end, last time.Time
	var between time.Duration
	for _, ev := range evs {
		switch ev.Type {
		case upgrade.EvBegin:
			begin, last = ev.Time, ev.Time
		case upgrade.EvStepStart:
			between += ev.Time.Sub(last)
			last = ev.Time
		case upgrade.EvStepDone, upgrade.EvStepFailed:
			parts = append(parts, ev.Step+" "+ms(ev.Time.Sub(last)))
			last = ev.Time
		case upgrade.EvEnd:
			between += ev.Time.Sub(last)
			end = ev.Time
		}
	}
	if begin.IsZero() || end.IsZero() {
		return "", fmt.Errorf("journal of %s has no begin or end record", txDir)
	}
	parts = append([]string{"start to begin " + ms(begin.Sub(t0))}, parts...)
	parts = append(parts, "between steps "+ms(between), "end to exit "+ms(t0.Add(wall).Sub(end)))
	return strings.Join(parts, ", ") + " (ms)", nil
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
