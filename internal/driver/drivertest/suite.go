package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// T is the part of testing.TB the suite uses. *testing.T implements it; so does the recorder
// Check runs the suite with, which is how a test proves that the suite catches a broken driver.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Object kinds a harness creates behind the driver's back (Harness.Foreign).
const (
	ForeignNode    = "node"
	ForeignNetwork = "network"
	ForeignPolicy  = "policy"
)

// Harness describes one driver under test and how to reach around it.
type Harness struct {
	// Driver is the driver under test; the suite runs the cases for each capability its
	// descriptor declares.
	Driver driver.Driver
	// Topology returns a fresh topology id and arranges for its residue to be removed when the
	// case ends, also when it fails.
	Topology func(t T) string
	// NodeSpec completes a node spec for owner (artifact, a long-running command). Required when
	// the driver or NodeDriver manages nodes.
	NodeSpec func(t T, owner substrate.Owner) substrate.NodeSpec
	// NodeDriver manages the nodes a Policy driver applies to and the networks they attach to
	// (nil: Driver itself).
	NodeDriver driver.Driver
	// Network returns a network handle for attachments when the node driver manages no networks
	// (nil: the node driver's Networks capability creates one).
	Network func(t T, owner substrate.Owner, cidr string) substrate.Handle
	// Unreachable returns a driver of the same kind whose backend cannot be reached (a daemon
	// socket that refuses, a namespace directory that cannot be read) and undoes that in restore.
	// It must reach the objects Driver created: their handles are handed to it.
	Unreachable func(t T) (d driver.Driver, restore func())
	// NoBackend names capabilities whose objects live where no backend can be cut off (e.g. links
	// in the host kernel), each with the reason; the unreachable case is not run for them.
	// Any other capability without Unreachable fails the suite.
	NoBackend map[driver.Capability]string
	// Foreign creates, behind the driver's back, an unmarked object of kind (ForeignNode, …)
	// holding the name the driver would give owner's object (node is the node a policy lives in)
	// and returns a probe reporting whether that object is still there, unchanged.
	Foreign func(t T, kind string, owner substrate.Owner, node substrate.Handle) (intact func() bool)
	// AttachBeforeStart says the driver wires NICs only before a node starts (Firecracker: network
	// interfaces are pre-boot only, no hotplug), the order the executor uses: the NIC and reset
	// cases then create, attach and start, instead of attaching to a started node.
	AttachBeforeStart bool
	// Artifact returns an artifact spec whose source exists (drivers with CapArtifact).
	Artifact func(t T) substrate.ArtifactSpec
}

// Case is one conformance check.
type Case struct {
	Name string
	Caps []driver.Capability // on Harness.Driver; the case applies when it declares them all
	// Applies, when set, further limits the case to drivers it accepts (an optional interface
	// within a capability).
	Applies func(d driver.Driver) bool
	Run     func(t T, h *Harness)
}

// Cases lists every conformance case, by capability.
func Cases() []Case {
	var out []Case
	for _, group := range [][]Case{nodeCases, networkCases, nicCases, resetCases, policyCases, auditCases, artifactCases, importCases} {
		out = append(out, group...)
	}
	return out
}

// applies reports whether c applies to h's driver.
func applies(c Case, h *Harness) bool {
	declared := h.Driver.Descriptor().Capabilities
	for _, cp := range c.Caps {
		if !slices.Contains(declared, cp) {
			return false
		}
	}
	return c.Applies == nil || c.Applies(h.Driver)
}

// Run runs every case that applies to h.Driver as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	ran := 0
	for _, c := range Cases() {
		if !applies(c, &h) {
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) { c.Run(t, &h) })
	}
	if ran == 0 {
		t.Fatalf("driver %s declares no capability the conformance suite checks", h.Driver.Descriptor().Name)
	}
}

// Failure is one case's failure as Check records it.
type Failure struct {
	Case     string
	Messages []string
}

// Check runs every case that applies to h.Driver with a recording T and returns the cases that
// failed. It exists to prove that the suite can fail: tests feed it deliberately broken drivers.
func Check(h Harness) []Failure {
	var out []Failure
	for _, c := range Cases() {
		if !applies(c, &h) {
			continue
		}
		r := &recorder{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer r.runCleanups()
			c.Run(r, &h)
		}()
		<-done
		if len(r.msgs) > 0 {
			out = append(out, Failure{Case: c.Name, Messages: r.msgs})
		}
	}
	return out
}

// recorder is a T that records failures; Fatalf ends the case's goroutine as testing.T does.
type recorder struct {
	mu       sync.Mutex
	msgs     []string
	cleanups []func()
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Cleanup(f func())    { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *recorder) Errorf(f string, a ...any) {
	r.mu.Lock()
	r.msgs = append(r.msgs, fmt.Sprintf(f, a...))
	r.mu.Unlock()
}
func (r *recorder) Fatalf(f string, a ...any) {
	r.Errorf(f, a...)
	runtime.Goexit()
}

func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// ---- helpers shared by the cases ----

// caseTimeout bounds every driver call, so that a hanging backend fails the case instead of CI.
const caseTimeout = 2 * time.Minute

func ctxFor(t T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// RandomTopology returns "conform-" and 12 random hex digits, for harnesses.
func RandomTopology() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "conform-" + hex.EncodeToString(b)
}

func owner(topology, typ, name string) substrate.Owner {
	return substrate.Owner{Topology: topology, Address: typ + "." + name, Type: typ, Generation: 1}
}

// others are owners that must not prove ownership of o's object: another generation, another
// address, another topology, and incomplete evidence.
func others(o substrate.Owner) map[string]substrate.Owner {
	gen, addr, topo, incomplete := o, o, o, o
	gen.Generation++
	addr.Address += "_other"
	topo.Topology += "-other"
	incomplete.Topology = ""
	return map[string]substrate.Owner{"next generation": gen, "other address": addr, "other topology": topo, "incomplete evidence": incomplete}
}

func capOf[C any](t T, d driver.Driver, c driver.Capability) C {
	t.Helper()
	impl, ok := d.(C)
	if !ok {
		t.Fatalf("driver %s declares %s but does not implement it", d.Descriptor().Name, c)
	}
	return impl
}

// wantStatus fails unless obs has status want.
func wantStatus(t T, what string, obs substrate.Observation, err error, want substrate.Status) {
	t.Helper()
	if err != nil || obs.Status != want {
		t.Fatalf("%s: got %s (%s), %v; want %s", what, obs.Status, obs.Reason, err, want)
	}
}

// wantNotOwned fails unless err wraps driver.ErrNotOwned.
func wantNotOwned(t T, what string, err error) {
	t.Helper()
	if !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("%s: got %v, want an error wrapping driver.ErrNotOwned", what, err)
	}
}

// goneOK accepts deleting something already gone: nil or an error wrapping driver.ErrNotFound.
func goneOK(t T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("%s of an object already gone: got %v, want nil or driver.ErrNotFound", what, err)
	}
}

// wantUnknown fails unless an unreachable backend's observation is Unknown with an error
// wrapping driver.ErrUnavailable: never Absent, never Present.
func wantUnknown(t T, what string, obs substrate.Observation, err error) {
	t.Helper()
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("%s with the backend unreachable: got %s (%s), %v; want unknown wrapping driver.ErrUnavailable", what, obs.Status, obs.Reason, err)
	}
}

// wantRefusedUnreachable fails unless a mutation against an unreachable backend reports an
// error that is neither success nor "already gone".
func wantRefusedUnreachable(t T, what string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("%s with the backend unreachable: got %v, want an error (not success, not \"not found\")", what, err)
	}
}

func (h *Harness) nodeDriver() driver.Driver {
	if h.NodeDriver != nil {
		return h.NodeDriver
	}
	return h.Driver
}

// unreachable returns the harness's unreachable driver for capability c, or nil (with the case
// ended) when the harness says c has no backend to cut off.
func (h *Harness) unreachable(t T, c driver.Capability) (driver.Driver, func()) {
	t.Helper()
	if h.Unreachable == nil {
		if reason, ok := h.NoBackend[c]; ok {
			t.Logf("unreachable backend: not applicable to %s: %s", c, reason)
			return nil, nil
		}
		t.Fatalf("harness for %s has no Unreachable and names no reason in NoBackend[%s]", h.Driver.Descriptor().Name, c)
	}
	if reason, ok := h.NoBackend[c]; ok {
		t.Logf("unreachable backend: not applicable to %s: %s", c, reason)
		return nil, nil
	}
	u, restore := h.Unreachable(t)
	var once sync.Once
	undo := func() { once.Do(restore) }
	t.Cleanup(undo) // also when the case fails before restoring
	return u, undo
}

// residueOf returns the objects Residue lists for topology carrying exactly o.
func residueOf(t T, a driver.Auditor, topology string, o substrate.Owner) []substrate.Object {
	t.Helper()
	objs, err := a.Residue(ctxFor(t), topology)
	if err != nil {
		t.Fatalf("Residue(%s): %v", topology, err)
	}
	var out []substrate.Object
	for _, x := range objs {
		if x.Owner.Topology != topology {
			t.Errorf("Residue(%s) lists %s %s of topology %s", topology, x.Kind, x.ExternalID, x.Owner.Topology)
		}
		if x.Owner.Equal(o) {
			out = append(out, x)
		}
	}
	return out
}

func describe(objs []substrate.Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.Kind+" "+o.ExternalID)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// NotADirectory returns the path of a regular file, removed when the case ends, for harnesses
// whose unreachable backend is a directory that cannot be listed.
func NotADirectory(t T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drivertest-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "not-a-directory")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatalf("%v", err)
	}
	return file
}
