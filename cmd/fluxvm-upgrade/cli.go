package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/argv"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// storeFactory builds the map store and says whether probe must see a bpf filesystem. The real
// store is the default; a fluxvmtest build may swap in a file-backed fake.
var storeFactory = func() (bpfmap.Store, bool, error) {
	return bpfmap.NewStore(bpfmap.WithTool("fluxvm-upgrade " + version)), true, nil
}

// afterRecord is the failpoint hook; only a fluxvmtest build sets it.
var afterRecord func(key string)

// extraCommands lets a fluxvmtest build add its helper commands.
var extraCommands []func() *cobra.Command

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	code           int
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, code: -1}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) || a.code == -1 && isCobraUsage(err) {
			fmt.Fprintf(stderr, "fluxvm-upgrade: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stderr, "fluxvm-upgrade: %v\n", err)
		if a.code > 0 {
			return a.code
		}
		return exitFor(err)
	}
	if a.code > 0 {
		return a.code
	}
	return exitOK
}

type usageError struct{ error }

func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.Contains(s, "accepts ") ||
		strings.HasPrefix(s, "invalid argument") || strings.HasPrefix(s, "flag needs an argument") ||
		strings.HasPrefix(s, "required flag")
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fluxvm-upgrade",
		Short: "Crash-safe transactional upgrades of eBPF components with pinned-map state",
		Long: `fluxvm-upgrade runs an upgrade plan (JSON) component by component:
preflight -> snapshot declared files and maps -> apply -> restore declared map state -> health,
rolling back applied components in reverse order on failure. Every step is journaled durably,
so resume, rollback or reconcile converge after a crash. Terminal transactions leave
journal.final.json and EVIDENCE.sha256 (optionally signed with ssh-keygen -Y sign).

Exit codes: 0 ok/committed, 1 error, 2 usage, 3 invalid plan, 4 lock held, 5 plan modified since
the transaction began, 6 rolled-back, 7 manual-intervention, 8 probe failed, 9 evidence does not
verify, 10 journal corrupt, 11 transaction exists / missing / already committed, 12 interrupted by a
signal (transaction still running: resume or rollback it), 13 status: evidence pending.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(a.validateCmd(), a.probeCmd(), a.planCmd(), a.runCmd(), a.resumeCmd(), a.rollbackCmd(),
		a.statusCmd(), a.reconcileCmd(), a.verifyCmd())
	for _, f := range extraCommands {
		root.AddCommand(f())
	}
	return root
}

func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (a *app) engine(jsonOut bool) (*upgrade.Engine, error) {
	store, checkFS, err := storeFactory()
	if err != nil {
		return nil, err
	}
	e := &upgrade.Engine{Store: store, Runner: argv.Exec{}, CheckBPFFS: checkFS, AfterRecord: afterRecord, ToolVersion: "fluxvm-upgrade " + version}
	if !jsonOut && isTTY(a.stderr) {
		e.Progress = a.stderr
	}
	return e, nil
}

func (a *app) loadPlan(path string, jsonOut bool) (*upgrade.Plan, error) {
	p, err := upgrade.LoadPlan(path)
	if err != nil && jsonOut {
		var ve *upgrade.ValidationError
		if errors.As(err, &ve) {
			_ = a.writeJSON(map[string]any{"file": ve.File, "valid": false, "problems": ve.Problems})
			a.code = exitInvalidPlan
		}
	}
	return p, err
}

// loadPlanAndEngine loads the plan at path (see loadPlan) and builds the engine that acts on it.
func (a *app) loadPlanAndEngine(path string, jsonOut bool) (*upgrade.Plan, *upgrade.Engine, error) {
	p, err := a.loadPlan(path, jsonOut)
	if err != nil {
		return nil, nil, err
	}
	e, err := a.engine(jsonOut)
	if err != nil {
		return nil, nil, err
	}
	return p, e, nil
}

func (a *app) validateCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "validate PLAN",
		Short: "Decode and check a plan strictly, reporting every problem with its JSON path",
		Long: `validate decodes PLAN strictly (unknown fields are errors) and checks it without touching the
host beyond resolving map pin paths (symlink escape). Every problem is reported at once as
file:line:col: JSON path: message. Exit code 3 when invalid.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.loadPlan(args[0], jsonOut)
			if err != nil {
				return err
			}
			if jsonOut {
				return a.writeJSON(map[string]any{"file": args[0], "valid": true, "transaction_id": p.TransactionID, "plan_sha256": p.SHA256, "components": len(p.Components)})
			}
			fmt.Fprintf(a.stdout, "%s: valid plan for transaction %s (%d components), canonical sha256 %s\n", args[0], p.TransactionID, len(p.Components), p.SHA256)
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	return c
}

func (a *app) probeCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "probe PLAN",
		Short: "Live checks: bpffs, pins and their ABI, policies, hooks executable, signing tools",
		Long: `probe checks the live host against PLAN without changing it: bpffs mounted at bpffs_root,
every declared pin present beneath it with the declared ABI and a policy its encoding allows
(merge/replace only on generic byte-array maps), hooks executable, the transaction lock free,
ssh-keygen and the signing key readable when signing. Exit code 8 when a check fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, e, err := a.loadPlanAndEngine(args[0], jsonOut)
			if err != nil {
				return err
			}
			rep := e.Probe(cmd.Context(), p)
			if jsonOut {
				if err := a.writeJSON(rep); err != nil {
					return err
				}
			} else {
				renderProbe(a.stdout, rep)
			}
			if !rep.OK {
				a.code = exitProbeFailed
				if jsonOut {
					return nil
				}
				return fmt.Errorf("%w: %d check(s) failed", upgrade.ErrProbeFailed, countFailed(rep))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	return c
}

func countFailed(r upgrade.ProbeReport) int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

func renderProbe(w io.Writer, r upgrade.ProbeReport) {
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s %s: %s", mark, c.Path, c.What)
		if c.Detail != "" {
			fmt.Fprintf(w, ": %s", c.Detail)
		}
		fmt.Fprintln(w)
	}
	renderMaps(w, r.Maps, "")
}

func renderMaps(w io.Writer, maps []upgrade.MapPlan, indent string) {
	for _, m := range maps {
		fmt.Fprintf(w, "%smap %s/%s %s policy=%s", indent, m.Component, m.Map, m.Pin, m.Policy)
		if m.Live != nil {
			fmt.Fprintf(w, " type=%s key=%d value=%d max_entries=%d entries=%d", m.Live.Type, m.Live.KeySize, m.Live.ValueSize, m.Live.MaxEntries, m.Live.Entries)
		}
		if m.Headroom != nil {
			fmt.Fprintf(w, " headroom=%d", *m.Headroom)
		}
		if m.Refusal != "" {
			fmt.Fprintf(w, "\n%s  REFUSED: %s", indent, m.Refusal)
		}
		fmt.Fprintln(w)
	}
}

func (a *app) planCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "plan PLAN",
		Short: "Show the exact ordered steps, per-map policy, entries, headroom and refusals; changes nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, e, err := a.loadPlanAndEngine(args[0], jsonOut)
			if err != nil {
				return err
			}
			rep := e.Plan(cmd.Context(), p)
			if !rep.Probe.OK {
				a.code = exitProbeFailed
			}
			if jsonOut {
				return a.writeJSON(rep)
			}
			renderPlan(a.stdout, rep)
			if !rep.Probe.OK {
				return fmt.Errorf("%w: %d check(s) failed; run would refuse", upgrade.ErrProbeFailed, countFailed(rep.Probe))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the plan as JSON")
	return c
}

func renderPlan(w io.Writer, r upgrade.PlanReport) {
	fmt.Fprintf(w, "transaction %s  plan sha256 %s\ndirectory   %s\n", r.TransactionID, r.PlanSHA256, r.TxDir)
	if r.Existing != "" {
		fmt.Fprintf(w, "existing    %s (run would refuse; use status/resume/rollback)\n", r.Existing)
	}
	for i, s := range r.Steps {
		fmt.Fprintf(w, "%3d. %-12s %-10s", i+1, s.Component, s.Step)
		if len(s.Argv) > 0 {
			fmt.Fprintf(w, " %s (timeout %s)", argv.Quote(s.Argv), s.Timeout)
		}
		if len(s.Files) > 0 {
			fmt.Fprintf(w, " files: %s", strings.Join(s.Files, ", "))
		}
		if s.Step == upgrade.StepRestore && len(s.Maps) == 0 {
			fmt.Fprint(w, " (no merge/replace maps)")
		}
		fmt.Fprintln(w)
		renderMaps(w, s.Maps, "       ")
	}
	fmt.Fprintf(w, "on failure: roll back applied components in order %s (rollback hook, files, maps, rollback_health)\n", strings.Join(r.RollbackOrder, ", "))
	if !r.Probe.OK {
		fmt.Fprintln(w, "probe problems:")
		fmt.Fprintln(w, r.Probe.Problems())
	}
}

func (a *app) txCmd(use, short, long string, do func(ctx context.Context, e *upgrade.Engine, p *upgrade.Plan) (upgrade.Result, error), flags func(c *cobra.Command)) *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, e, err := a.loadPlanAndEngine(args[0], jsonOut)
			if err != nil {
				return err
			}
			res, err := do(cmd.Context(), e, p)
			if err != nil {
				var pm *upgrade.PlanModifiedError
				if errors.As(err, &pm) {
					fmt.Fprintf(a.stderr, "plan sha256 when the transaction began: %s\nplan sha256 now:                      %s\n", pm.Begun, pm.Now)
				}
				if jsonOut && res.State != "" {
					_ = a.writeJSON(map[string]any{"result": res, "error": err.Error()})
				}
				return err
			}
			a.code = exitForState(res.State)
			if jsonOut {
				return a.writeJSON(res)
			}
			fmt.Fprintf(a.stdout, "transaction %s: %s\n", res.TransactionID, res.State)
			if res.Reason != "" {
				fmt.Fprintf(a.stdout, "reason: %s\n", res.Reason)
			}
			fmt.Fprintf(a.stdout, "directory: %s\n", res.Dir)
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	if flags != nil {
		flags(c)
	}
	return c
}

func (a *app) runCmd() *cobra.Command {
	return a.txCmd("run PLAN", "Begin the transaction and drive it to committed, rolled-back or manual-intervention",
		`run probes the host, records the plan's canonical SHA-256, and runs each component in order:
preflight, snapshot of declared files and maps, apply, restore of merge/replace map state, health.
On a failure the applied components are rolled back in reverse order. Exit code 0 committed,
6 rolled-back, 7 manual-intervention, 8 probe failed (nothing changed), 4 lock held, 11 exists.`,
		func(ctx context.Context, e *upgrade.Engine, p *upgrade.Plan) (upgrade.Result, error) {
			return e.Run(ctx, p)
		}, nil)
}

const repairHelp = "drop an unterminated last journal record (an append cut by a power loss, never acknowledged), keeping its bytes as journal.torn-*; other corruption is still refused"

func (a *app) resumeCmd() *cobra.Command {
	var repair bool
	return a.txCmd("resume PLAN", "Continue a transaction exactly where its journal stops",
		`resume reads the journal and continues from the first unfinished step. A step that was
interrupted is re-run when it is idempotent (preflight, snapshot, restore, health, every rollback
step); an interrupted apply is not re-run: it is marked failed and the transaction rolls back.
Refuses (exit 5) a plan whose canonical hash differs from the one the transaction began with,
and (exit 10) a torn or corrupt journal unless --repair-torn-tail applies.`,
		func(ctx context.Context, e *upgrade.Engine, p *upgrade.Plan) (upgrade.Result, error) {
			e.RepairTornTail = repair
			return e.Resume(ctx, p)
		}, func(c *cobra.Command) {
			c.Flags().BoolVar(&repair, "repair-torn-tail", false, repairHelp)
		})
}

func (a *app) rollbackCmd() *cobra.Command {
	var reason string
	var repair, retry bool
	return a.txCmd("rollback PLAN", "Roll back a transaction from any non-terminal point",
		`rollback rolls back every component whose apply started, in reverse order: rollback hook,
file restoration, map restoration, rollback_health. A failure ends the transaction in
manual-intervention (exit 7). Refuses (exit 5) a modified plan and (exit 11) a committed transaction.
With --retry, a manual-intervention transaction whose cause the operator fixed re-runs only its
failed rollback steps (exit 6 when it ends rolled-back, 7 when a step fails again; 11 when the
transaction is not in manual-intervention).`,
		func(ctx context.Context, e *upgrade.Engine, p *upgrade.Plan) (upgrade.Result, error) {
			e.RepairTornTail = repair
			if retry {
				return e.RetryRollback(ctx, p, reason)
			}
			return e.Rollback(ctx, p, reason)
		}, func(c *cobra.Command) {
			c.Flags().BoolVar(&retry, "retry", false, "after manual-intervention: re-run only the failed rollback steps (and those they held back), journaled as a retry; the failed attempt stays in the evidence")
			c.Flags().StringVar(&reason, "reason", "operator requested rollback", "reason recorded in the journal")
			c.Flags().BoolVar(&repair, "repair-torn-tail", false, repairHelp)
		})
}

func (a *app) statusCmd() *cobra.Command {
	var jsonOut bool
	var dir, stateDir string
	c := &cobra.Command{
		Use:   "status [PLAN | --dir TRANSACTION_DIR | --state-dir DIR]",
		Short: "Show a transaction's state and every step with outcome and UTC timestamps",
		Long: `status reads the transaction's journal (never taking the lock) and prints its state
(running, committed, rolled-back, manual-intervention), phase and every step with outcome and
RFC 3339 UTC timestamps. --json prints one object. With --state-dir alone it lists every
transaction there, one line each. Exit code 0 for any readable transaction, 13 for a terminal
one whose evidence is not written yet (EVIDENCE PENDING: resume or reconcile writes it), 10 for
a corrupt journal, 11 when there is none.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stateDir != "" {
				if dir != "" || len(args) > 0 {
					return usageError{errors.New("status takes one of PLAN, --dir or --state-dir")}
				}
				list, err := upgrade.ListStatus(stateDir)
				if err != nil {
					return err
				}
				if jsonOut {
					return a.writeJSON(list)
				}
				for _, s := range list {
					if s.Error != "" {
						fmt.Fprintf(a.stdout, "%-32s ERROR  %s\n", s.TransactionID, s.Error)
						continue
					}
					fmt.Fprintf(a.stdout, "%-32s %-20s %s  %s\n", s.TransactionID, s.State, s.UpdatedAt, s.Reason)
				}
				return nil
			}
			switch {
			case dir == "" && len(args) == 1:
				p, err := a.loadPlan(args[0], jsonOut)
				if err != nil {
					return err
				}
				dir = upgrade.TxDir(p)
			case dir != "" && len(args) == 0:
			default:
				return usageError{errors.New("status takes either PLAN or --dir TRANSACTION_DIR")}
			}
			st, err := upgrade.ReadStatus(dir)
			if err != nil {
				return err
			}
			if st.EvidencePending() {
				// Scripts must not take a terminal state without its evidence for finished.
				a.code = exitEvidencePending
			}
			if jsonOut {
				return a.writeJSON(st)
			}
			renderStatus(a.stdout, st)
			return nil
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the status as one JSON object")
	c.Flags().StringVar(&dir, "dir", "", "transaction directory (instead of PLAN)")
	c.Flags().StringVar(&stateDir, "state-dir", "", "list every transaction in this state directory")
	return c
}

func renderStatus(w io.Writer, s *upgrade.Status) {
	fmt.Fprintf(w, "transaction %s: %s", s.TransactionID, strings.ToUpper(s.State))
	if s.State == upgrade.StateRunning {
		fmt.Fprintf(w, " (%s)", s.Phase)
	}
	fmt.Fprintf(w, "\nplan sha256 %s\nbegan %s, last journal record %s (%d records)\n", s.PlanSHA256, s.BeganAt, s.UpdatedAt, s.Records)
	if s.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", s.Reason)
	}
	for _, c := range s.Components {
		fmt.Fprintf(w, "  %s\n", c.Name)
		for _, st := range c.Steps {
			ph := ""
			if st.Phase == "rollback" {
				ph = "(rollback) "
			}
			fmt.Fprintf(w, "    %-8s %-28s", st.Outcome, ph+st.Step)
			if st.StartedAt != "" {
				fmt.Fprintf(w, "  %s", st.StartedAt)
			}
			if st.FinishedAt != "" {
				fmt.Fprintf(w, " -> %s", st.FinishedAt)
			}
			if st.Attempts > 1 {
				fmt.Fprintf(w, "  attempts %d", st.Attempts)
			}
			if st.Error != "" {
				fmt.Fprintf(w, "\n             error: %s", st.Error)
			}
			fmt.Fprintln(w)
		}
	}
	if s.Evidence != nil {
		fmt.Fprintf(w, "evidence: %s (manifest %v, signature %v)\n", s.Evidence.State, s.Evidence.Manifest, s.Evidence.Signature)
		if s.EvidencePending() {
			fmt.Fprintf(w, "EVIDENCE PENDING: the transaction is %s but %s (and, when the plan signs, its signature) is not written yet; run `fluxvm-upgrade resume PLAN` or let the reconcile timer finish it\n",
				s.State, evidence.ManifestFile)
		}
	}
}

func (a *app) reconcileCmd() *cobra.Command {
	var jsonOut bool
	var stateDir string
	var staleMinutes int
	c := &cobra.Command{
		Use:   "reconcile --stale-minutes N [--state-dir DIR]",
		Short: "Roll back running transactions with no journal progress for N minutes whose lock is free",
		Long: `reconcile scans the state directory. A running transaction whose journal made no progress for
--stale-minutes and whose lock is free is rolled back with the plan as it was begun; a locked one
is left alone; a terminal one with unfinished evidence is finalized; a corrupt journal is
reported and not acted on. Meant for a timer (deploy/systemd/). Exit code 7 when a rollback it
started ended in manual-intervention, 1 when any transaction could not be handled.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if staleMinutes < 0 {
				return usageError{errors.New("--stale-minutes must be >= 0")}
			}
			e, err := a.engine(jsonOut)
			if err != nil {
				return err
			}
			res, err := e.Reconcile(cmd.Context(), stateDir, time.Duration(staleMinutes)*time.Minute)
			if jsonOut {
				if res == nil {
					res = []upgrade.ReconcileResult{}
				}
				_ = a.writeJSON(res)
			} else {
				for _, r := range res {
					fmt.Fprintf(a.stdout, "%s: %s", r.TransactionID, r.Action)
					if r.State != "" {
						fmt.Fprintf(a.stdout, " (state %s)", r.State)
					}
					if r.Detail != "" {
						fmt.Fprintf(a.stdout, ": %s", r.Detail)
					}
					fmt.Fprintln(a.stdout)
				}
			}
			for _, r := range res {
				if r.State == upgrade.StateManualIntervention && r.Action == "rolled-back" {
					a.code = exitManualIntervention
				}
			}
			if err != nil {
				a.code = exitError
			}
			return err
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the results as JSON")
	c.Flags().StringVar(&stateDir, "state-dir", upgrade.DefaultStateDir, "state directory holding transaction directories")
	c.Flags().IntVar(&staleMinutes, "stale-minutes", 15, "minutes without journal progress after which a running transaction is rolled back")
	return c
}

func (a *app) verifyCmd() *cobra.Command {
	var jsonOut bool
	var opt evidence.VerifyOptions
	c := &cobra.Command{
		Use:   "verify-evidence DIR [--allowed-signers FILE --identity ID --namespace NS]",
		Short: "Recompute EVIDENCE.sha256, report missing/modified/extra files, check the SSH signature",
		Long: `verify-evidence recomputes every hash listed in DIR/EVIDENCE.sha256 and reports missing,
modified and extra files. With --allowed-signers and --identity the signature EVIDENCE.sha256.sig
must verify with ssh-keygen -Y verify in --namespace (default fluxvm-upgrade); when the plan had
signing, a missing signature fails even without --allowed-signers. Any symlink or special file in
DIR, and any regular file the manifest does not list, fails. Exit code 9 when the evidence does
not hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opt.AllowedSigners != "" && opt.Identity == "" {
				return usageError{errors.New("--identity is required with --allowed-signers")}
			}
			if opt.AllowedSigners == "" && opt.Identity != "" {
				// Without allowed signers nothing would check the identity: refuse rather than
				// print "OK" for a check that never ran.
				return usageError{errors.New("--identity needs --allowed-signers (the keys to check it against)")}
			}
			dir := filepath.Clean(args[0])
			rep, err := evidence.Verify(cmd.Context(), dir, opt)
			if errors.Is(err, evidence.ErrNoManifest) {
				if st, serr := upgrade.ReadStatus(dir); serr == nil {
					if st.State != upgrade.StateRunning {
						err = fmt.Errorf("%w: transaction %s is %s: evidence not written yet; run resume (or wait for reconcile)", err, st.TransactionID, st.State)
					} else {
						err = fmt.Errorf("%w: transaction %s is still running: evidence is written when it ends", err, st.TransactionID)
					}
				}
			}
			if jsonOut {
				if werr := a.writeJSON(rep); werr != nil {
					return werr
				}
				if err != nil {
					a.code = exitFor(err)
				}
				return err
			}
			for _, f := range rep.Missing {
				fmt.Fprintf(a.stdout, "MISSING  %s\n", f)
			}
			for _, f := range rep.Modified {
				fmt.Fprintf(a.stdout, "MODIFIED %s\n", f)
			}
			for _, f := range rep.Extra {
				fmt.Fprintf(a.stdout, "EXTRA    %s\n", f)
			}
			if rep.Signature != "" {
				fmt.Fprintf(a.stdout, "signature: %s", rep.Signature)
				if rep.SigError != "" {
					fmt.Fprintf(a.stdout, ": %s", rep.SigError)
				}
				fmt.Fprintln(a.stdout)
			}
			if err == nil {
				fmt.Fprintf(a.stdout, "%s: evidence OK (%d files)\n", dir, rep.Files)
			}
			return err
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	c.Flags().StringVar(&opt.AllowedSigners, "allowed-signers", "", "OpenSSH allowed_signers file")
	c.Flags().StringVar(&opt.Identity, "identity", "", "signer identity (principal) to require")
	c.Flags().StringVar(&opt.Namespace, "namespace", evidence.DefaultNamespace, "signature namespace")
	return c
}
