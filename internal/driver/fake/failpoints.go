package fake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
)

// FailAction is what a failpoint does.
type FailAction string

const (
	FailError       FailAction = "error"       // return an error, mutate nothing
	FailUnavailable FailAction = "unavailable" // return an error wrapping driver.ErrUnavailable
	FailCrash       FailAction = "crash"       // SIGKILL this process
)

// Failpoint fires at Point ("CreateNode" before the mutation, "CreateNode.after" after it is
// persisted, or "mutation" after every persisted mutation), on the Nth hit (0 = every hit).
type Failpoint struct {
	Point  string
	Nth    int
	Action FailAction
}

// ErrInjected is wrapped by errors a failpoint returns.
var ErrInjected = errors.New("injected failure")

// methods are the driver calls a failpoint may name (the points enter and commit pass).
var methods = []string{"ApplyPolicy", "Attach", "ConfigureGuestNetwork", "CreateNetwork", "CreateNode",
	"DeleteNetwork", "DeleteNode", "DeletePolicy", "Detach", "Exec", "ImportNode", "NewGeneration",
	"ObserveAttachment", "ObserveNetwork", "ObserveNode", "ObservePolicy", "Residue", "ResolveArtifact",
	"SetHosts", "StartNode", "StopNode", "VerifyArtifact"}

// ParseFailpoints parses "Point[@N]=action,…", e.g. "CreateNode.after@2=crash,Attach=error".
// An unknown point or action is an error.
func ParseFailpoints(s string) ([]*Failpoint, error) {
	var out []*Failpoint
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lhs, act, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want POINT[@N]=error|unavailable|crash", part)
		}
		fp := &Failpoint{Point: lhs, Action: FailAction(act)}
		if p, n, ok := strings.Cut(lhs, "@"); ok {
			nth, err := strconv.Atoi(n)
			if err != nil || nth < 1 {
				return nil, fmt.Errorf("failpoint %q: bad hit number %q", part, n)
			}
			fp.Point, fp.Nth = p, nth
		}
		switch fp.Action {
		case FailError, FailUnavailable, FailCrash:
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q", part, act)
		}
		// A misspelled point would never fire, and a crash test would pass without a crash.
		if m := strings.TrimSuffix(fp.Point, ".after"); m != "mutation" && !slices.Contains(methods, m) {
			return nil, fmt.Errorf("failpoint %q: unknown point %q (known: mutation, %s, each also as METHOD.after)", part, fp.Point, strings.Join(methods, ", "))
		}
		out = append(out, fp)
	}
	return out, nil
}

// SetFailpoint adds a failpoint.
func (d *Driver) SetFailpoint(point string, nth int, action FailAction) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fps = append(d.fps, &Failpoint{Point: point, Nth: nth, Action: action})
}

// ClearFailpoints removes every failpoint.
func (d *Driver) ClearFailpoints() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fps = nil
}

// SetUnavailable makes every call fail with driver.ErrUnavailable (observations return Unknown).
func (d *Driver) SetUnavailable(v bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unavailable = v
}

// hit is called with d.mu held.
func (d *Driver) hit(point string) error {
	d.hits[point]++
	n := d.hits[point]
	for _, fp := range d.fps {
		if fp.Point != point || (fp.Nth != 0 && fp.Nth != n) {
			continue
		}
		switch fp.Action {
		case FailCrash:
			crash()
		case FailUnavailable:
			return fmt.Errorf("fake %s: %w (failpoint)", point, driver.ErrUnavailable)
		default:
			return fmt.Errorf("fake %s: %w", point, ErrInjected)
		}
	}
	return nil
}

func crash() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously; never return into the caller
}

// enter records a call, refuses a cancelled context and runs the before-failpoint. Called
// with d.mu held.
func (d *Driver) enter(ctx context.Context, method string) error {
	d.calls = append(d.calls, method)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake %s: %w", method, err)
	}
	if d.unavailable {
		return fmt.Errorf("fake %s: %w", method, driver.ErrUnavailable)
	}
	return d.hit(method)
}

// commit persists a mutation and runs the after-failpoints. Called with d.mu held.
func (d *Driver) commit(method string) error {
	d.world.Mutations++
	if err := d.persist(); err != nil {
		return fmt.Errorf("fake %s: %w", method, err)
	}
	if err := d.hit("mutation"); err != nil {
		return err
	}
	return d.hit(method + ".after")
}

func (d *Driver) persist() error {
	if d.path == "" {
		return nil
	}
	b, err := durable.EncodeRecord(worldKind, worldVersion, &d.world)
	if err != nil {
		return err
	}
	return durable.WriteFile(d.path, b, 0o600)
}
