package sysbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

func init() { register(newStateCommand) }

// stateFlags choose the backend and how to treat it; shared by every `state` subcommand.
type stateFlags struct {
	statePath   string
	lockTimeout time.Duration
	allowUnsafe bool
	vf          varFlags
}

func addStateFlags(cmd *cobra.Command, sf *stateFlags, mutates bool) {
	cmd.Flags().StringVar(&sf.statePath, "state", "", "use the local state file `PATH` instead of the topology's backend")
	addVarFlags(cmd, &sf.vf)
	if mutates {
		cmd.Flags().DurationVar(&sf.lockTimeout, "lock-timeout", 0, "wait up to `DURATION` for a held state lock (0: fail at once)")
		cmd.Flags().BoolVar(&sf.allowUnsafe, "allow-unsafe-state", false, "change state through a backend without locking or compare-and-swap (only if nothing else writes it)")
	}
}

func newStateCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect and change the durable state",
		Long: "state list|show read the state; state mv|rm change it under the state lock by compare-and-swap, " +
			"after snapshotting it, and never touch external objects; state force-unlock removes a stale lock.",
	}
	cmd.AddCommand(newStateListCommand(app), newStateShowCommand(app), newStateMvCommand(app),
		newStateRmCommand(app), newStateForceUnlockCommand(app))
	for _, sub := range stateSubcommands {
		cmd.AddCommand(sub(app))
	}
	return cmd
}

// stateSubcommands are further `state` subcommands registered by other files.
var stateSubcommands []func(*App) *cobra.Command

// openStateBackend opens the backend named by --state or by the topology's substrate block.
func (a *App) openStateBackend(ctx context.Context, sf *stateFlags) (backend.Backend, error) {
	if sf.statePath != "" {
		p := sf.statePath
		if !filepath.IsAbs(p) {
			p = filepath.Join(a.dir(), p)
		}
		return local.New(p)
	}
	l, err := a.loadTopology(&sf.vf)
	if err != nil {
		return nil, err
	}
	if l.diags.HasErrors() || l.top == nil {
		a.printDiags(a.Env.Stderr, l)
		return nil, &silentExit{code: ExitError}
	}
	return a.openConfiguredBackend(ctx, l.top.Substrate.Backend)
}

func (a *App) stateManager(ctx context.Context, sf *stateFlags) (*backend.Manager, error) {
	be, err := a.openStateBackend(ctx, sf)
	if err != nil {
		return nil, err
	}
	return backend.NewManager(be, backend.Options{AllowUnsafe: sf.allowUnsafe, LockTimeout: sf.lockTimeout}), nil
}

// readState reads the state through the backend sf selects (no lock: reads need none).
func (a *App) readState(ctx context.Context, sf *stateFlags) (*states.State, error) {
	m, err := a.stateManager(ctx, sf)
	if err != nil {
		return nil, err
	}
	defer m.Backend().Close()
	return m.Read(ctx)
}

// mutateState changes the state through the backend sf selects: fn runs under the state lock,
// after a snapshot, and its result is saved by compare-and-swap (backend.Manager.Mutate).
func (a *App) mutateState(ctx context.Context, sf *stateFlags, op string, fn func(*states.State) error) (*states.State, error) {
	m, err := a.stateManager(ctx, sf)
	if err != nil {
		return nil, err
	}
	defer m.Backend().Close()
	return m.Mutate(ctx, op, true, fn)
}

func parseAddrArg(what, s string) (addrs.Instance, error) {
	a, err := addrs.ParseInstance(s)
	if err != nil {
		return addrs.Instance{}, fmt.Errorf("%s %q: %w", what, s, err)
	}
	return a, nil
}

// ---- state list ------------------------------------------------------------------------------

func newStateListCommand(app *App) *cobra.Command {
	var sf stateFlags
	var asJSON bool
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "list [TARGET...]",
		Short: "List resource addresses in the state, one per line",
		Long:  "list prints the canonical address of every resource in the state (or of those within the given targets, e.g. module.lab or sysbox_node.web).",
		RunE: func(cmd *cobra.Command, args []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "state list", args, "")
			}
			targets, err := parseTargets(args)
			if err != nil {
				return err
			}
			st, err := app.readState(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			rs := selectResources(st, targets)
			if asJSON {
				return writeJSON(app.Env.Stdout, listJSON(st, rs))
			}
			for _, r := range rs {
				fmt.Fprintln(app.Env.Stdout, r.Addr)
			}
			return nil
		},
	}
	addStateFlags(cmd, &sf, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addRemoteFlags(cmd, &rf)
	return cmd
}

func selectResources(st *states.State, targets []addrs.Target) []*states.Resource {
	if len(targets) == 0 {
		return st.Resources
	}
	var out []*states.Resource
	for _, r := range st.Resources {
		for _, t := range targets {
			if t.Contains(r.Addr) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

type stateListJSON struct {
	Lineage   string              `json:"lineage"`
	Serial    uint64              `json:"serial"`
	Resources []stateListResource `json:"resources"`
}

type stateListResource struct {
	Address    string `json:"address"`
	Type       string `json:"type"`
	Driver     string `json:"driver,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	Status     string `json:"status"`
}

func listJSON(st *states.State, rs []*states.Resource) stateListJSON {
	out := stateListJSON{Lineage: st.Lineage, Serial: st.Serial, Resources: []stateListResource{}}
	for _, r := range rs {
		out.Resources = append(out.Resources, stateListResource{Address: r.Addr.String(), Type: r.Addr.Resource.Type,
			Driver: r.Driver, ExternalID: r.ExternalID, Status: string(r.Observation.Status)})
	}
	return out
}

// ---- state show ------------------------------------------------------------------------------

func newStateShowCommand(app *App) *cobra.Command {
	var sf stateFlags
	var asJSON bool
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "show ADDRESS",
		Short: "Show one resource's state",
		Long:  "show prints one resource's public state. The driver's private envelope is shown only as its driver, version and size: sysbox does not interpret it.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "state show", args, "")
			}
			addr, err := parseAddrArg("address", args[0])
			if err != nil {
				return err
			}
			st, err := app.readState(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			r := st.Resource(addr)
			if r == nil {
				return &states.NotFoundError{Addr: addr}
			}
			v := showView(r)
			if asJSON {
				return writeJSON(app.Env.Stdout, v)
			}
			renderShow(app.Env.Stdout, v)
			return nil
		},
	}
	addStateFlags(cmd, &sf, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addRemoteFlags(cmd, &rf)
	return cmd
}

// stateShowJSON is a resource as `state show` presents it: everything public; private
// envelopes reduced to what they are.
type stateShowJSON struct {
	Address       string                     `json:"address"`
	Type          string                     `json:"type"`
	SchemaVersion int                        `json:"schema_version"`
	Driver        string                     `json:"driver,omitempty"`
	ExternalID    string                     `json:"external_id,omitempty"`
	Status        string                     `json:"status"`
	StatusReason  string                     `json:"status_reason,omitempty"`
	ObservedAt    *time.Time                 `json:"observed_at,omitempty"`
	Owner         substrate.Owner            `json:"owner"`
	Dependencies  []string                   `json:"dependencies"`
	Attachments   []attachmentJSON           `json:"attachments"`
	Attributes    any                        `json:"attributes"`
	Private       *substrate.EnvelopeSummary `json:"private,omitempty"`
	CreatedAt     time.Time                  `json:"created_at"`
	UpdatedAt     time.Time                  `json:"updated_at"`
}

type attachmentJSON struct {
	Name    string                     `json:"name"`
	MAC     string                     `json:"mac"`
	IPv4    []string                   `json:"ipv4"`
	Gateway string                     `json:"gateway,omitempty"`
	Private *substrate.EnvelopeSummary `json:"private,omitempty"`
}

func showView(r *states.Resource) stateShowJSON {
	v := stateShowJSON{Address: r.Addr.String(), Type: r.Addr.Resource.Type, SchemaVersion: r.SchemaVersion,
		Driver: r.Driver, ExternalID: r.ExternalID, Status: string(r.Observation.Status), StatusReason: r.Observation.Reason,
		Owner: r.Owner, Dependencies: []string{}, Attachments: []attachmentJSON{}, Attributes: rawOrNull(r.Attributes),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	if !r.Observation.At.IsZero() {
		at := r.Observation.At.UTC()
		v.ObservedAt = &at
	}
	for _, d := range r.Dependencies {
		v.Dependencies = append(v.Dependencies, d.String())
	}
	for _, a := range r.Attachments {
		j := attachmentJSON{Name: a.Name, MAC: a.MAC, IPv4: append([]string{}, a.IPv4...), Gateway: a.Gateway}
		if a.Private.Driver != "" || len(a.Private.Data) > 0 {
			sum := a.Private.Summary()
			j.Private = &sum
		}
		v.Attachments = append(v.Attachments, j)
	}
	if r.Private != nil {
		sum := r.Private.Summary()
		v.Private = &sum
	}
	return v
}

type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

func rawOrNull(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return rawJSON(b)
}

func renderShow(w io.Writer, v stateShowJSON) {
	fmt.Fprintf(w, "# %s\n", v.Address)
	row := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "%-15s %s\n", k, val)
		}
	}
	row("type", v.Type)
	row("schema version", fmt.Sprint(v.SchemaVersion))
	row("driver", v.Driver)
	row("external id", v.ExternalID)
	status := v.Status
	if v.StatusReason != "" {
		status += " (" + v.StatusReason + ")"
	}
	if v.ObservedAt != nil {
		status += " at " + v.ObservedAt.Format(time.RFC3339)
	}
	row("observation", status)
	row("owner", fmt.Sprintf("topology %s, address %s, type %s, generation %d", v.Owner.Topology, v.Owner.Address, v.Owner.Type, v.Owner.Generation))
	if len(v.Dependencies) > 0 {
		row("depends on", strings.Join(v.Dependencies, ", "))
	}
	for _, a := range v.Attachments {
		desc := a.MAC
		if len(a.IPv4) > 0 {
			desc += " " + strings.Join(a.IPv4, ", ")
		}
		if a.Gateway != "" {
			desc += " via " + a.Gateway
		}
		row("attachment "+a.Name, desc)
	}
	if v.Private != nil {
		row("private", fmt.Sprintf("%s envelope v%d, %d bytes (opaque)", v.Private.Driver, v.Private.Version, v.Private.Bytes))
	}
	row("created", v.CreatedAt.Format(time.RFC3339))
	row("updated", v.UpdatedAt.Format(time.RFC3339))
	if v.Attributes != nil {
		b, _ := jsonIndent(v.Attributes)
		fmt.Fprintf(w, "attributes\n%s\n", b)
	}
}

// ---- state mv --------------------------------------------------------------------------------

func newStateMvCommand(app *App) *cobra.Command {
	var sf stateFlags
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "mv OLD NEW",
		Short: "Give resources or modules a new address, keeping their objects",
		Long: "mv re-addresses resources in the state without deleting or creating anything: external objects, " +
			"ownership markers, private state and fixed computed values (MAC addresses) stay. OLD and NEW are instances " +
			"(sysbox_node.web[0] to sysbox_node.web[\"a\"]), resources with all their instances (sysbox_node.foo to " +
			"sysbox_node.bar) or modules with everything in them (module.a to module.b, module.a[\"x\"] to module.b). " +
			"An ill-formed move (resource to one instance, onto an existing address, a type change) is refused before " +
			"anything is written. -dry-run prints what would move. The state is snapshotted first and saved by " +
			"compare-and-swap under the state lock.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseTargetArg("source address", args[0])
			if err != nil {
				return err
			}
			to, err := parseTargetArg("destination address", args[1])
			if err != nil {
				return err
			}
			// Judge the move on a copy first: a refused move writes nothing, not even the
			// snapshot Mutate takes; under the lock it is judged again on the current state.
			st, err := app.readState(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			pairs, err := st.Clone().Move(from, to, time.Now())
			if err != nil {
				return err
			}
			serial := st.Serial
			if !dryRun {
				st, err := app.mutateState(cmd.Context(), &sf, "state mv", func(st *states.State) error {
					var err error
					pairs, err = st.Move(from, to, time.Now())
					return err
				})
				if err != nil {
					return err
				}
				serial = st.Serial
			}
			if asJSON {
				return writeJSON(app.Env.Stdout, moveJSON(pairs, dryRun, serial))
			}
			renderMove(app.Env.Stdout, pairs, dryRun, serial)
			return nil
		},
	}
	addStateFlags(cmd, &sf, true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would move; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func parseTargetArg(what, s string) (addrs.Target, error) {
	t, err := addrs.ParseTarget(s)
	if err != nil {
		return addrs.Target{}, fmt.Errorf("%s %q: %w", what, s, err)
	}
	return t, nil
}

type stateMvJSON struct {
	DryRun bool         `json:"dry_run"`
	Serial uint64       `json:"serial"`
	Moves  []stateMvRow `json:"moves"`
}

type stateMvRow struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func moveJSON(pairs []addrs.MovePair, dryRun bool, serial uint64) stateMvJSON {
	out := stateMvJSON{DryRun: dryRun, Serial: serial, Moves: []stateMvRow{}}
	for _, p := range pairs {
		out.Moves = append(out.Moves, stateMvRow{From: p.From.String(), To: p.To.String()})
	}
	return out
}

func renderMove(w io.Writer, pairs []addrs.MovePair, dryRun bool, serial uint64) {
	verb := "Moved"
	if dryRun {
		verb = "Would move"
	}
	for _, p := range pairs {
		fmt.Fprintf(w, "%s %s to %s\n", verb, p.From, p.To)
	}
	if dryRun {
		fmt.Fprintf(w, "Dry run: %d resource(s) would move; the state (serial %d) was not changed.\n", len(pairs), serial)
		return
	}
	fmt.Fprintf(w, "Moved %d resource(s) (state serial %d). No external object was touched.\n", len(pairs), serial)
}

// ---- state rm --------------------------------------------------------------------------------

func newStateRmCommand(app *App) *cobra.Command {
	var sf stateFlags
	cmd := &cobra.Command{
		Use:   "rm ADDRESS...",
		Short: "Forget resources without touching their objects",
		Long: "rm removes resources from the state only: their external objects keep running and are no longer managed " +
			"(an audit may report them as residue). Every address must exist, or nothing is removed.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var targets []addrs.Instance
			for _, s := range args {
				a, err := parseAddrArg("address", s)
				if err != nil {
					return err
				}
				targets = append(targets, a)
			}
			st, err := app.mutateState(cmd.Context(), &sf, "state rm", func(st *states.State) error {
				var missing []error
				for _, a := range targets {
					if !st.Remove(a) {
						missing = append(missing, &states.NotFoundError{Addr: a})
					}
				}
				if len(missing) > 0 {
					return fmt.Errorf("nothing removed: %w", errors.Join(missing...))
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, a := range targets {
				fmt.Fprintf(app.Env.Stdout, "Removed %s\n", a)
			}
			fmt.Fprintf(app.Env.Stdout, "Forgot %d resource(s) (state serial %d). Their external objects were not touched.\n", len(targets), st.Serial)
			return nil
		},
	}
	addStateFlags(cmd, &sf, true)
	return cmd
}

// ---- state force-unlock ----------------------------------------------------------------------

func newStateForceUnlockCommand(app *App) *cobra.Command {
	var sf stateFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "force-unlock LOCK_ID",
		Short: "Remove a state lock left by a crashed process",
		Long: "force-unlock removes the state lock with this ID, whoever holds it. Use it only when the holder is gone: " +
			"two writers at once can corrupt the topology. Backends whose locks end with their holder (local) have nothing to force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			m, err := app.stateManager(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			defer m.Backend().Close()
			if !force {
				fmt.Fprintf(app.Env.Stdout, "Remove state lock %s? Only do this if the process holding it is gone. Type \"yes\": ", id)
				line, _ := bufio.NewReader(app.Env.Stdin).ReadString('\n')
				if strings.TrimSpace(line) != "yes" {
					return fmt.Errorf("force-unlock %s: not confirmed; nothing changed", id)
				}
			}
			if err := m.ForceUnlock(cmd.Context(), id); err != nil {
				return err
			}
			fmt.Fprintf(app.Env.Stdout, "State lock %s removed.\n", id)
			return nil
		},
	}
	addStateFlags(cmd, &sf, false)
	cmd.Flags().BoolVar(&force, "force", false, "do not ask for confirmation")
	return cmd
}
