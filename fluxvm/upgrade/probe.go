package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/internal/durable"
)

// Check is one live check of `probe` (F16).
type Check struct {
	Path   string `json:"path"` // JSON path or subject, e.g. $.components[0].maps[1]
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// MapPlan is what `plan` and `probe` say about one declared map.
type MapPlan struct {
	Component string        `json:"component"`
	Map       string        `json:"map"`
	Pin       string        `json:"pin"`
	Policy    bpfmap.Policy `json:"policy"`
	Live      *bpfmap.Info  `json:"live,omitempty"`
	// Headroom is max_entries minus current entries (capacity left for a same-size replacement).
	Headroom *int64 `json:"headroom,omitempty"`
	Action   string `json:"action"`
	Refusal  string `json:"refusal,omitempty"`
}

// ProbeReport is the result of live checks; OK only when every check passed.
type ProbeReport struct {
	TransactionID string    `json:"transaction_id"`
	PlanSHA256    string    `json:"plan_sha256"`
	OK            bool      `json:"ok"`
	Checks        []Check   `json:"checks"`
	Maps          []MapPlan `json:"maps"`
}

// Problems lists failed checks, one per line.
func (r ProbeReport) Problems() string {
	var b strings.Builder
	for _, c := range r.Checks {
		if !c.OK {
			fmt.Fprintf(&b, "  %s: %s: %s\n", c.Path, c.What, c.Detail)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func (r *ProbeReport) add(path, what string, err error) {
	c := Check{Path: path, What: what, OK: err == nil}
	if err != nil {
		c.Detail = err.Error()
	}
	r.Checks = append(r.Checks, c)
}

const bpfFSMagic = 0xcafe4a11

// IsBPFFS reports whether path is on a bpf filesystem.
func IsBPFFS(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if uint32(st.Type) != bpfFSMagic {
		return fmt.Errorf("%s: %w (filesystem magic %#x)", path, bpfmap.ErrNotBPFFS, st.Type)
	}
	return nil
}

// Probe runs the live checks: state dir usable, lock free, hooks executable, map pins present with
// the declared ABI and restorable under their policy, and ssh-keygen + key when signing. When
// CheckBPFFS is set the bpffs root must be a bpf filesystem (the real store checks each pin too).
func (e *Engine) Probe(ctx context.Context, p *Plan) ProbeReport {
	return e.probe(ctx, p, false)
}

// probe skips the lock check when the caller already holds the lock (Run). Run also skips
// counting map entries (a full read of each map): it uses the checks, not the headroom.
func (e *Engine) probe(ctx context.Context, p *Plan, inRun bool) ProbeReport {
	r := ProbeReport{TransactionID: p.TransactionID, PlanSHA256: p.SHA256, Checks: []Check{}, Maps: []MapPlan{}}
	if e.CheckBPFFS && hasMaps(p) {
		r.add("$.bpffs_root", "bpffs mounted at "+p.BPFFSRoot, IsBPFFS(p.BPFFSRoot))
	}
	if inRun {
		// the caller holds it
	} else if locked, err := lockHeld(LockPath(p.StateDir, p.TransactionID)); err != nil {
		r.add("$.transaction_id", "transaction lock free", fmt.Errorf("cannot tell: %w", err))
	} else if locked {
		r.add("$.transaction_id", "transaction lock free", fmt.Errorf("%w: %s", durable.ErrLocked, durable.HolderOf(LockPath(p.StateDir, p.TransactionID))))
	}
	for ci := range p.Components {
		c := &p.Components[ci]
		for _, h := range []struct {
			name string
			hook *Hook
		}{{"preflight", c.Hooks.Preflight}, {"apply", c.Hooks.Apply}, {"health", c.Hooks.Health}, {"rollback", c.Hooks.Rollback}, {"rollback_health", c.Hooks.RollbackHealth}} {
			if h.hook == nil {
				continue
			}
			path := fmt.Sprintf("$.components[%d].hooks.%s[0]", ci, h.name)
			r.add(path, "hook executable "+h.hook.Argv[0], executable(h.hook.Argv[0]))
		}
		for fi, f := range c.Files {
			path := fmt.Sprintf("$.components[%d].files[%d]", ci, fi)
			r.add(path, "file snapshot-able "+f, snapshotable(f))
		}
		if err := c.StateABI.Check(); err != nil {
			r.add(fmt.Sprintf("$.components[%d].state_abi", ci), "logical state ABI gate", err)
		}
		for mi := range c.Maps {
			m := &c.Maps[mi]
			path := fmt.Sprintf("$.components[%d].maps[%d]", ci, mi)
			mp := MapPlan{Component: c.Name, Map: m.Name, Pin: m.Pin, Policy: m.Policy, Action: mapAction(m.Policy)}
			spec := p.Spec(c, m)
			spec.NoCount = inRun
			info, err := e.Store.Probe(ctx, spec)
			if info.ID != 0 || info.Type != "" {
				mp.Live = &info
				if info.MaxEntries > 0 && info.Entries >= 0 {
					h := int64(info.MaxEntries) - info.Entries
					mp.Headroom = &h
				}
			}
			if err == nil {
				if perr := bpfmap.CheckPolicy(info.Type, m.Policy); perr != nil {
					err = fmt.Errorf("component %s: map %s: %w", c.Name, m.Name, perr)
				}
			}
			if err != nil {
				mp.Refusal = err.Error()
			}
			r.add(path, fmt.Sprintf("map %s pinned at %s", m.Name, m.Pin), err)
			r.Maps = append(r.Maps, mp)
		}
	}
	if p.Signing != nil {
		_, err := exec.LookPath("ssh-keygen")
		if err != nil {
			_, err = os.Stat(sshKeygenPath())
		}
		r.add("$.signing", "ssh-keygen present", err)
		r.add("$.signing.ssh_private_key", "signing key readable "+p.Signing.SSHPrivateKey, readable(p.Signing.SSHPrivateKey))
	}
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.OK
	}
	return r
}

func sshKeygenPath() string { return "/usr/bin/ssh-keygen" }

func hasMaps(p *Plan) bool {
	for _, c := range p.Components {
		if len(c.Maps) > 0 {
			return true
		}
	}
	return false
}

func mapAction(p bpfmap.Policy) string {
	switch p {
	case bpfmap.MetadataOnly:
		return "record metadata, check ABI; entries not copied"
	case bpfmap.Merge:
		return "snapshot entries; after apply, replay them into the replacement map keeping new entries"
	case bpfmap.Replace:
		return "snapshot entries; after apply, delete the replacement map's keys and replay the snapshot"
	}
	return ""
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: not executable (mode %v)", path, fi.Mode())
	}
	return nil
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func snapshotable(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // recorded as absent
	}
	if err != nil {
		return err
	}
	if fi.Mode().IsRegular() || fi.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	return fmt.Errorf("%s: is a %s; only regular files and symlinks are snapshotted", path, fi.Mode().Type())
}

// PlanStep is one step `plan` shows, in the order `run` would execute it.
type PlanStep struct {
	Component string    `json:"component"`
	Step      string    `json:"step"`
	Argv      []string  `json:"argv,omitempty"`
	Timeout   string    `json:"timeout,omitempty"`
	Files     []string  `json:"files,omitempty"`
	Maps      []MapPlan `json:"maps,omitempty"`
	Note      string    `json:"note,omitempty"`
}

// PlanReport is the output of `plan`: the exact ordered steps, the rollback order and per map
// policy, entry counts, headroom and refusals. It mutates nothing.
type PlanReport struct {
	TransactionID string      `json:"transaction_id"`
	PlanSHA256    string      `json:"plan_sha256"`
	TxDir         string      `json:"transaction_dir"`
	Existing      string      `json:"existing_state,omitempty"`
	Steps         []PlanStep  `json:"steps"`
	RollbackOrder []string    `json:"rollback_order"`
	Probe         ProbeReport `json:"probe"`
}

// Plan describes what Run would do.
func (e *Engine) Plan(ctx context.Context, p *Plan) PlanReport {
	probe := e.Probe(ctx, p)
	rep := PlanReport{TransactionID: p.TransactionID, PlanSHA256: p.SHA256, TxDir: TxDir(p), Probe: probe, Steps: []PlanStep{}}
	if s, err := ReadStatus(TxDir(p)); err == nil {
		rep.Existing = s.State
	}
	maps := map[string][]MapPlan{}
	for _, m := range probe.Maps {
		maps[m.Component] = append(maps[m.Component], m)
	}
	hookStep := func(c *Component, step string, h *Hook) PlanStep {
		ps := PlanStep{Component: c.Name, Step: step}
		if h != nil {
			ps.Argv, ps.Timeout = h.Argv, h.Timeout.String()
		}
		return ps
	}
	for ci := range p.Components {
		c := &p.Components[ci]
		rep.Steps = append(rep.Steps, hookStep(c, StepPreflight, c.Hooks.Preflight))
		rep.Steps = append(rep.Steps, PlanStep{Component: c.Name, Step: StepSnapshot, Files: c.Files, Maps: maps[c.Name], Note: "files are rollback-only snapshots"})
		rep.Steps = append(rep.Steps, hookStep(c, StepApply, c.Hooks.Apply))
		var restore []MapPlan
		for _, m := range maps[c.Name] {
			if m.Policy != bpfmap.MetadataOnly {
				restore = append(restore, m)
			}
		}
		rep.Steps = append(rep.Steps, PlanStep{Component: c.Name, Step: StepRestore, Maps: restore})
		rep.Steps = append(rep.Steps, hookStep(c, StepHealth, c.Hooks.Health))
	}
	for ci := len(p.Components) - 1; ci >= 0; ci-- {
		rep.RollbackOrder = append(rep.RollbackOrder, p.Components[ci].Name)
	}
	return rep
}

// lockHeld reports whether some process holds a flock on path, by reading /proc/locks: probe is
// read-only and never takes the lock itself, not even for a moment, so a transaction starting at
// the same time never sees contention from a probe.
func lockHeld(path string) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("%s: no inode information", path)
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false, fmt.Errorf("lock of %s: %w", path, err)
	}
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		// "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"; "N: -> ..." lines are waiters.
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == id {
			return true, nil
		}
	}
	return false, nil
}
