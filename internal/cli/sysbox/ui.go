package sysbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/backend"
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

// uiLoader rereads the configuration and the state (through be, without locking) on each call.
func (a *App) uiLoader(vf *varFlags, be backend.Backend) ui.Loader {
	return func(ctx context.Context) (*ui.Graph, error) {
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
