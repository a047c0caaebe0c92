package sysbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/ui"
)

func init() { register(newUICommand) }

// uiPoll is how often `sysbox ui` rereads configuration and state: well inside the 2 s within
// which a change must show on the page.
const uiPoll = 500 * time.Millisecond

func newUICommand(app *App) *cobra.Command {
	var vf varFlags
	var listen string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the live topology in a browser (read only)",
		Long: "ui serves the topology of this directory (configuration joined with state, coloured by observation) " +
			"on a loopback address: the page at /, the graph as JSON at /api/graph and its changes as " +
			"Server-Sent Events at /events. It only reads; it never takes the state lock.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := checkLoopback(listen); err != nil {
				return err
			}
			l, err := app.loadTopology(&vf)
			if err != nil {
				return err
			}
			if l.diags.HasErrors() || l.top == nil {
				app.printDiags(app.Env.Stderr, l)
				return &silentExit{code: ExitError}
			}
			be, err := app.openConfiguredBackend(ctx, l.top.Substrate.Backend)
			if err != nil {
				return err
			}
			defer be.Close()
			srv := ui.NewServer(app.uiLoader(&vf, be))
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("ui: listen %s: %w", listen, err)
			}
			fmt.Fprintf(app.Env.Stdout, "sysbox ui: serving http://%s/ (Ctrl-C stops)\n", ln.Addr())
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go srv.Run(ctx, uiPoll)
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
				BaseContext: func(net.Listener) context.Context { return ctx }}
			go func() {
				<-ctx.Done()
				srv.Close()
				hs.Close()
			}()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("ui: serve %s: %w", listen, err)
			}
			return nil
		},
	}
	addVarFlags(cmd, &vf)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "serve on loopback `ADDR:PORT` (port 0: any free port)")
	return cmd
}

// uiLoader rereads the configuration, the state (through be, without locking) and the
// checkpoint log on each call.
func (a *App) uiLoader(vf *varFlags, be backend.Backend) ui.Loader {
	cv := &checkpointView{dir: a.checkpointDir()}
	return func(ctx context.Context) (*ui.Graph, error) {
		g, err := a.uiGraph(ctx, vf, be)
		if g != nil {
			g.Run = cv.run()
		}
		return g, err
	}
}

// uiGraph joins the configuration and the state.
func (a *App) uiGraph(ctx context.Context, vf *varFlags, be backend.Backend) (*ui.Graph, error) {
	st, err := be.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	l, err := a.loadTopology(vf)
	if err != nil {
		return nil, err
	}
	if l.diags.HasErrors() {
		var msgs []string
		for _, d := range l.diags.Errs() {
			msgs = append(msgs, d.Error())
		}
		// Still show what state records: a broken file should not blank the picture.
		g := ui.Build(nil, st)
		g.Error = "configuration: " + strings.Join(msgs, "; ")
		return g, nil
	}
	return ui.Build(l.top, st), nil
}

// Run statuses the local view gives the run of the checkpoint log.
const (
	uiRunOpen       = "running"
	uiRunEnded      = "ended"
	uiRunUnreadable = "unreadable"
	// uiRunInterrupted: the last run's file has no end and its process is gone.
	uiRunInterrupted = "interrupted"
)

// lastRunView is the run panel of the last run's file.
func lastRunView(lr *lastRun) *ui.Run {
	r := &ui.Run{Op: lr.header.Command, Status: uiRunOpen, Seq: lr.skipped + 1, Lines: lr.lines,
		Result: fmt.Sprintf("running (pid %d, started %s)", lr.header.PID, lr.header.At.Format(time.RFC3339))}
	if r.Lines == nil {
		r.Lines = []string{}
	}
	switch {
	case lr.end != nil && lr.end.Error != "":
		r.Status, r.Result = uiRunEnded, "failed: "+lr.end.Error
	case lr.end != nil:
		r.Status, r.Result = uiRunEnded, lr.header.Command+" complete"
	case lr.interrupted:
		r.Status, r.Result = uiRunInterrupted, fmt.Sprintf("interrupted: process %d is gone without an end (`sysbox recover` finishes it)", lr.header.PID)
	}
	// Concurrent workers report records out of Seq order.
	recs := slices.SortedFunc(slices.Values(lr.records), func(a, b executor.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	cs := make([]ui.Checkpoint, 0, len(recs))
	for _, rec := range recs {
		if rec.Type == ui.CheckpointRun {
			r.ID = rec.Run
		}
		cs = append(cs, uiCheckpoint(rec))
	}
	r.Checkpoints = ui.LastCheckpoints(cs)
	return r
}

// checkpointView is the run panel of `sysbox ui`: the run whose checkpoint log is in dir, with
// its records as the executor's own reader returns them. The log exists only while a run is
// in progress (or interrupted) and is removed when it finishes, so once it is gone the run is
// shown as last read and said to have ended; before any run was seen there is none.
type checkpointView struct {
	dir  string
	mu   sync.Mutex
	last *ui.Run
}

func (v *checkpointView) run() *ui.Run {
	v.mu.Lock()
	defer v.mu.Unlock()
	// The last run's file, when there is one, has the progress lines and every record, also
	// those written just before the checkpoint log was removed.
	lr, err := readLastRun(v.dir)
	if err != nil {
		return &ui.Run{Status: uiRunUnreadable, Result: err.Error(), Lines: []string{}}
	}
	if lr != nil {
		return lastRunView(lr)
	}
	it, err := executor.ReadLog(v.dir)
	if err != nil {
		return &ui.Run{Status: uiRunUnreadable, Result: err.Error(), Lines: []string{}}
	}
	if it == nil {
		if v.last == nil {
			return nil
		}
		r := *v.last
		r.Status, r.Result = uiRunEnded, "its checkpoint log is gone: the run finished or was recovered (records as last read)"
		return &r
	}
	r := &ui.Run{ID: it.Header.Run, Op: it.Header.Command, Status: uiRunOpen, Lines: []string{},
		Result: "checkpoint log open: the run is in progress, or was interrupted (then `sysbox recover`)"}
	if it.Finished {
		r.Status, r.Result = uiRunEnded, "the run ended; its checkpoint log is being removed"
	}
	cs := make([]ui.Checkpoint, 0, len(it.Records))
	for _, rec := range it.Records {
		cs = append(cs, uiCheckpoint(rec))
	}
	r.Checkpoints = ui.LastCheckpoints(cs)
	v.last = r
	return r
}

// uiCheckpoint is the page's form of a checkpoint record (also a remote run's event data).
func uiCheckpoint(r executor.Record) ui.Checkpoint {
	return ui.Checkpoint{Seq: r.Seq, At: r.At.UTC(), Record: r.Type, Run: r.Run, Address: r.Address, Action: string(r.Action), Step: string(r.Step)}
}

// checkLoopback refuses to serve anywhere but a loopback address: the page shows the lab.
func checkLoopback(listen string) error {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("ui: --listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("ui: --listen %q: not a loopback IP address (want e.g. 127.0.0.1:8081)", listen)
	}
	return nil
}

// checkpointEvents sends each checkpoint record of an agent's run as a "checkpoint" event
// (the control plane's web view shows them beside the graph). A refused event is left out: a
// fenced refusal has already cancelled the run.
func checkpointEvents(j agent.Job) func(executor.Record) {
	if j.Emit == nil {
		return nil
	}
	return func(r executor.Record) {
		b, err := json.Marshal(uiCheckpoint(r))
		if err == nil {
			_ = j.Emit(ui.EventCheckpoint, string(b))
		}
	}
}
