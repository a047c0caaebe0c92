package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// fakeConn is an in-memory libvirtd for unit tests: domains by UUID with their XML and state.
type fakeConn struct {
	mu       sync.Mutex
	doms     map[golibvirt.UUID]*fakeDom
	agent    func(dom golibvirt.Domain, cmd string) (string, error)
	down     bool // every call fails like a dropped socket
	defines  int
	restores []string // the XML of each restored image
	subs     map[chan interface{}]bool
}

type fakeDom struct {
	dom     golibvirt.Domain
	xml     string
	running bool
}

var _ conn = (*fakeConn)(nil)

var errDropped = errors.New("connection reset by peer")

func newFakeConn() *fakeConn {
	return &fakeConn{doms: map[golibvirt.UUID]*fakeDom{}, subs: map[chan interface{}]bool{}}
}

func noDomain() error {
	return golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found"}
}

func (f *fakeConn) get(d golibvirt.Domain) (*fakeDom, error) {
	if f.down {
		return nil, errDropped
	}
	fd, ok := f.doms[d.UUID]
	if !ok {
		return nil, noDomain()
	}
	return fd, nil
}

func (f *fakeConn) DomainLookupByName(name string) (golibvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return golibvirt.Domain{}, errDropped
	}
	for _, fd := range f.doms {
		if fd.dom.Name == name {
			return fd.dom, nil
		}
	}
	return golibvirt.Domain{}, noDomain()
}

func (f *fakeConn) DomainLookupByUUID(u golibvirt.UUID) (golibvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(golibvirt.Domain{UUID: u})
	if err != nil {
		return golibvirt.Domain{}, err
	}
	return fd.dom, nil
}

func (f *fakeConn) DomainDefineXML(doc string) (golibvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return golibvirt.Domain{}, errDropped
	}
	x, err := parseDomain(doc)
	if err != nil {
		return golibvirt.Domain{}, err
	}
	u, err := parseUUID(x.UUID)
	if err != nil {
		return golibvirt.Domain{}, err
	}
	for _, fd := range f.doms {
		if fd.dom.Name == x.Name && fd.dom.UUID != u {
			return golibvirt.Domain{}, golibvirt.Error{Code: uint32(golibvirt.ErrOperationFailed), Message: "domain " + x.Name + " already exists with another uuid"}
		}
	}
	f.defines++
	fd := &fakeDom{dom: golibvirt.Domain{Name: x.Name, UUID: u}, xml: doc}
	f.doms[u] = fd
	return fd.dom, nil
}

func (f *fakeConn) DomainCreate(d golibvirt.Domain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return err
	}
	fd.running = true
	return nil
}

func (f *fakeConn) DomainGetState(d golibvirt.Domain, _ uint32) (int32, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return 0, 0, err
	}
	if fd.running {
		return int32(golibvirt.DomainRunning), 0, nil
	}
	return int32(golibvirt.DomainShutoff), 0, nil
}

func (f *fakeConn) DomainGetXMLDesc(d golibvirt.Domain, _ golibvirt.DomainXMLFlags) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return "", err
	}
	return fd.xml, nil
}

func (f *fakeConn) DomainDestroy(d golibvirt.Domain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return err
	}
	fd.running = false
	return nil
}

func (f *fakeConn) DomainShutdown(d golibvirt.Domain) error { return f.DomainDestroy(d) }

// DomainSave writes a save image in libvirt's format (the domain's XML, a stand-in stream) and
// stops the domain.
func (f *fakeConn) DomainSave(d golibvirt.Domain, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return err
	}
	if !fd.running {
		return golibvirt.Error{Code: uint32(golibvirt.ErrOperationInvalid), Message: "domain is not running"}
	}
	h := saveHeader{DataLen: uint32(len(fd.xml)) + 1 + 64<<10, WasRunning: 1}
	b, err := encodeSaveHeader(h, fd.xml, "")
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, append(b, "QEVM fake stream of "+fd.dom.Name...), 0o600); err != nil {
		return err
	}
	fd.running = false
	return nil
}

// DomainRestore starts the defined domain the image's XML names (by UUID and name, as libvirt
// requires of a persistent domain).
func (f *fakeConn) DomainRestore(from string) error {
	_, doc, _, err := readSaveImage(from)
	if err != nil {
		return err
	}
	x, err := parseDomain(doc)
	if err != nil {
		return err
	}
	u, err := parseUUID(x.UUID)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(golibvirt.Domain{UUID: u})
	if err != nil {
		return err
	}
	if fd.dom.Name != x.Name || fd.running {
		return golibvirt.Error{Code: uint32(golibvirt.ErrOperationInvalid), Message: "domain " + x.Name + " mismatch or active"}
	}
	fd.running = true
	f.restores = append(f.restores, doc)
	return nil
}

func (f *fakeConn) DomainUndefineFlags(d golibvirt.Domain, _ golibvirt.DomainUndefineFlagsValues) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(d); err != nil {
		return err
	}
	delete(f.doms, d.UUID)
	return nil
}

func (f *fakeConn) editNICs(d golibvirt.Domain, doc string, add bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.get(d)
	if err != nil {
		return err
	}
	var ifc libvirtxml.DomainInterface
	if err := ifc.Unmarshal(doc); err != nil {
		return err
	}
	x, err := parseDomain(fd.xml)
	if err != nil {
		return err
	}
	if add {
		x.Devices.Interfaces = append(x.Devices.Interfaces, ifc)
	} else {
		var kept []libvirtxml.DomainInterface
		for _, i := range x.Devices.Interfaces {
			if i.Target == nil || ifc.Target == nil || i.Target.Dev != ifc.Target.Dev {
				kept = append(kept, i)
			}
		}
		x.Devices.Interfaces = kept
	}
	fd.xml, err = x.Marshal()
	return err
}

func (f *fakeConn) DomainAttachDeviceFlags(d golibvirt.Domain, doc string, _ uint32) error {
	return f.editNICs(d, doc, true)
}

func (f *fakeConn) DomainDetachDeviceFlags(d golibvirt.Domain, doc string, _ uint32) error {
	return f.editNICs(d, doc, false)
}

func (f *fakeConn) ConnectListAllDomains(int32, golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, 0, errDropped
	}
	var out []golibvirt.Domain
	for _, fd := range f.doms {
		out = append(out, fd.dom)
	}
	return out, uint32(len(out)), nil
}

func (f *fakeConn) QEMUDomainAgentCommand(d golibvirt.Domain, cmd string, _ int32, _ uint32) (golibvirt.OptString, error) {
	f.mu.Lock()
	fd, err := f.get(d)
	agent := f.agent
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if agent == nil || !fd.running {
		return nil, golibvirt.Error{Code: uint32(golibvirt.ErrAgentUnresponsive), Message: "Guest agent is not responding"}
	}
	s, err := agent(d, cmd)
	if err != nil {
		return nil, err
	}
	return golibvirt.OptString{s}, nil
}

// fakeDriver is a driver on a fake connection whose qemu-img only creates the overlay file.
func fakeDriver(t *testing.T) (*Driver, *fakeConn) {
	t.Helper()
	fc := newFakeConn()
	d, err := New(Options{StateDir: t.TempDir(), DomainType: TypeQEMU, ReadyTimeout: -1,
		dial: func() (conn, error) { return fc, nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.run = &argv.Fake{Script: map[string]argv.FakeResponse{"qemu-img": {Do: func(cmd argv.Cmd) (argv.Result, error) {
		return argv.Result{}, os.WriteFile(cmd.Argv[len(cmd.Argv)-1], []byte("QFI\xfb overlay"), 0o644)
	}}}}
	return d, fc
}

// storedDisk resolves a small qcow2-looking baseline into d's store.
func storedDisk(t *testing.T, d *Driver) substrate.ArtifactIdentity {
	t.Helper()
	src := filepath.Join(t.TempDir(), "disk.qcow2")
	if err := os.WriteFile(src, append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 120)...), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: KindQCOW2, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// SubscribeEvents hands out a channel that emit sends to until ctx ends (then it is closed, as
// go-libvirt's is). Like libvirtd, it sends every domain's events: the subscriber filters.
func (f *fakeConn) SubscribeEvents(ctx context.Context, _ golibvirt.DomainEventID, _ golibvirt.OptDomain) (<-chan interface{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDropped
	}
	ch := make(chan interface{}, 16)
	f.subs[ch] = true
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, ch)
		close(ch)
	})
	return ch, nil
}

// emit sends ev to every subscriber.
func (f *fakeConn) emit(ev interface{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		ch <- ev
	}
}

// subscribers is how many subscriptions are open.
func (f *fakeConn) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// fakeNode creates (does not start) node addr on d, a driver on a fake connection, backed by a
// stored disk.
func fakeNode(t *testing.T, d *Driver, addr string) (substrate.Handle, substrate.NodeSpec) {
	t.Helper()
	base := storedDisk(t, d)
	spec := substrate.NodeSpec{Owner: testOwner(addr), Driver: Name, Artifact: &base}
	h, err := d.CreateNode(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return h, spec
}
