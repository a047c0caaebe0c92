package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

func testOwner(addr string) substrate.Owner {
	return substrate.Owner{Topology: "topo-1", Address: "sysbox_node." + addr, Type: "sysbox_node", Generation: 1}
}

func TestProbeDomainType(t *testing.T) {
	dir := t.TempDir()
	kvm := filepath.Join(dir, "kvm")
	pvm := filepath.Join(dir, "kvm_pvm")
	if err := os.WriteFile(kvm, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		dev, mod  string
		wantType  string
		createMod bool
	}{
		{"no /dev/kvm", filepath.Join(dir, "absent"), pvm, TypeQEMU, false},
		{"usable /dev/kvm", kvm, pvm, TypeKVM, false},
		{"/dev/kvm of KVM_PVM", kvm, pvm, TypeQEMU, true},
	} {
		if tc.createMod {
			if err := os.Mkdir(pvm, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if got := probeDomainType(tc.dev, tc.mod); got != tc.wantType {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.wantType)
		}
	}
	if _, err := New(Options{DomainType: "xen"}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("New with domain type xen: got %v, want ErrInvalid", err)
	}
	d, err := New(Options{DomainType: TypeQEMU})
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Descriptor().Version; !strings.HasSuffix(v, "+qemu") {
		t.Errorf("Descriptor().Version = %q, want the domain type in it (…+qemu)", v)
	}
}

func TestDomainXMLAndMetadata(t *testing.T) {
	o := testOwner("vm")
	meta := newOwnerMeta(o)
	meta.Overlay = "/x/o.qcow2"
	doc, err := buildDomain(domainSpec{Type: TypeQEMU, Name: domainName(o), UUID: newUUID(), Meta: meta,
		Overlay: "/x/o.qcow2", Kernel: "/k/vmlinux", Initrd: "/k/initrd.img", Console: "/x/c.log"})
	if err != nil {
		t.Fatal(err)
	}
	x, err := parseDomain(doc)
	if err != nil {
		t.Fatal(err)
	}
	if x.Type != TypeQEMU || x.OS.Kernel != "/k/vmlinux" || x.OS.Initrd != "/k/initrd.img" || x.OS.Cmdline != defaultCmdline {
		t.Errorf("domain type %q kernel %q initrd %q cmdline %q; want qemu, the kernel, the initrd, the default command line", x.Type, x.OS.Kernel, x.OS.Initrd, x.OS.Cmdline)
	}
	if len(x.Devices.Channels) != 1 || x.Devices.Channels[0].Target.VirtIO.Name != agentChannel {
		t.Errorf("channels %+v: want the guest agent channel %s", x.Devices.Channels, agentChannel)
	}
	if _, err := checkOwned("d", x, o); err != nil {
		t.Errorf("checkOwned by its owner: %v", err)
	}
	for name, other := range map[string]substrate.Owner{"next generation": {Topology: o.Topology, Address: o.Address, Type: o.Type, Generation: 2},
		"other address": testOwner("other"), "incomplete": {Address: o.Address}} {
		if _, err := checkOwned("d", x, other); !errors.Is(err, driver.ErrNotOwned) {
			t.Errorf("checkOwned as %s: got %v, want ErrNotOwned", name, err)
		}
	}
	// Another tool's metadata beside ours is ignored; a forged marker disproves ownership.
	x.Metadata.XML = `<other:x xmlns:other="urn:other"><y/></other:x>` + x.Metadata.XML
	if _, err := checkOwned("d", x, o); err != nil {
		t.Errorf("checkOwned with foreign metadata beside ours: %v", err)
	}
	x.Metadata.XML = strings.Replace(x.Metadata.XML, `generation="1"`, `generation="7"`, 1)
	if _, err := checkOwned("d", x, substrate.Owner{Topology: o.Topology, Address: o.Address, Type: o.Type, Generation: 7}); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("checkOwned with a generation attribute that disagrees with the marker: got %v, want ErrNotOwned", err)
	}
	// Disk boot without a kernel.
	doc, _ = buildDomain(domainSpec{Type: TypeQEMU, Name: "n", UUID: newUUID(), Meta: meta, Overlay: "/o"})
	x, _ = parseDomain(doc)
	if x.OS.Kernel != "" || len(x.OS.BootDevices) != 1 || x.OS.BootDevices[0].Dev != "hd" {
		t.Errorf("disk boot: kernel %q boot %+v; want no kernel, boot from hd", x.OS.Kernel, x.OS.BootDevices)
	}
}

func TestNodeLifecycleOnFakeConnection(t *testing.T) {
	ctx := context.Background()
	d, fc := fakeDriver(t)
	h, spec := fakeNode(t, d, "vm")
	base, o := *spec.Artifact, spec.Owner
	if err := d.CheckPrivate(h.Private); err != nil {
		t.Errorf("CheckPrivate of a fresh handle: %v", err)
	}
	overlay := d.overlayPath(o)
	if _, err := os.Stat(overlay); err != nil {
		t.Fatalf("overlay: %v", err)
	}
	again, err := d.CreateNode(ctx, spec)
	if err != nil || again.ExternalID != h.ExternalID || fc.defines != 1 {
		t.Fatalf("CreateNode again: %q, %v (%d defines); want the same domain %q, one define", again.ExternalID, err, fc.defines, h.ExternalID)
	}
	obs, err := d.ObserveNode(ctx, h, o)
	if err != nil || obs.Status != substrate.Degraded {
		t.Fatalf("ObserveNode before start: %s (%s), %v; want degraded", obs.Status, obs.Reason, err)
	}
	if err := d.StartNode(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	obs, err = d.ObserveNode(ctx, h, o)
	if err != nil || obs.Status != substrate.Present || obs.Attributes["domain_type"] != TypeQEMU {
		t.Fatalf("ObserveNode after start: %s (%s) %v, %v; want present, domain type qemu", obs.Status, obs.Reason, obs.Attributes, err)
	}
	other := o
	other.Generation = 2
	if err := d.DeleteNode(ctx, h, other); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("DeleteNode as the next generation: %v, want ErrNotOwned", err)
	}
	if err := d.StopNode(ctx, h, other); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("StopNode as the next generation: %v, want ErrNotOwned", err)
	}
	if obs, _ := d.ObserveNode(ctx, h, other); obs.Status != substrate.Drifted {
		t.Errorf("ObserveNode as the next generation: %s, want drifted", obs.Status)
	}
	if _, err := os.Stat(overlay); err != nil {
		t.Fatalf("overlay after refused deletes: %v", err)
	}
	if res, err := d.Residue(ctx, o.Topology); err != nil || len(res) != 2 {
		t.Errorf("Residue: %+v, %v; want the domain and the overlay", res, err)
	}
	// What a process killed inside a durable write leaves: the directory still goes.
	if err := os.WriteFile(filepath.Join(d.overlayDir(o.Topology), "."+filepath.Base(ownerRecord(overlay))+".tmp-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, h, o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(overlay); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("overlay after delete: %v, want gone", err)
	}
	obs, err = d.ObserveNode(ctx, h, o)
	if err != nil || obs.Status != substrate.Absent {
		t.Fatalf("ObserveNode after delete: %s, %v; want absent", obs.Status, err)
	}
	if err := d.DeleteNode(ctx, h, o); err != nil {
		t.Errorf("DeleteNode again: %v, want nil", err)
	}
	if res, err := d.Residue(ctx, o.Topology); err != nil || len(res) != 0 {
		t.Errorf("Residue after delete: %+v, %v; want none", res, err)
	}
	if _, err := os.Stat(d.overlayDir(o.Topology)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("overlay directory after deleting the last node: %v, want gone", err)
	}
	if _, err := os.Stat(filepath.Join(base.Ref, fileDisk)); err != nil {
		t.Errorf("baseline after delete: %v; it must stay", err)
	}
}

func TestForeignDomainWithOurName(t *testing.T) {
	ctx := context.Background()
	d, fc := fakeDriver(t)
	base := storedDisk(t, d)
	o := testOwner("vm")
	foreign := fmt.Sprintf(`<domain type="qemu"><name>%s</name><uuid>%s</uuid><memory>65536</memory></domain>`, domainName(o), newUUID())
	fdom, err := fc.DomainDefineXML(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateNode(ctx, substrate.NodeSpec{Owner: o, Artifact: &base}); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("CreateNode over a foreign domain: %v, want ErrNotOwned", err)
	}
	h := nodeHandle(nodePrivate{UUID: formatUUID(fdom.UUID), Name: fdom.Name, Marker: o.Marker()})
	if err := d.DeleteNode(ctx, h, o); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("DeleteNode of a foreign domain: %v, want ErrNotOwned", err)
	}
	if got, _ := fc.DomainGetXMLDesc(fdom, 0); got != foreign {
		t.Errorf("the foreign domain was changed: %s", got)
	}
	if res, err := d.Residue(ctx, o.Topology); err != nil || len(res) != 0 {
		t.Errorf("Residue lists a foreign domain: %+v, %v", res, err)
	}
}

func TestUnreachableIsUnknown(t *testing.T) {
	ctx := context.Background()
	d, fc := fakeDriver(t)
	base := storedDisk(t, d)
	o := testOwner("vm")
	h, err := d.CreateNode(ctx, substrate.NodeSpec{Owner: o, Artifact: &base})
	if err != nil {
		t.Fatal(err)
	}
	fc.down = true
	obs, err := d.ObserveNode(ctx, h, o)
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ObserveNode with libvirtd dropping calls: %s, %v; want unknown, ErrUnavailable", obs.Status, err)
	}
	for what, err := range map[string]error{"DeleteNode": d.DeleteNode(ctx, h, o), "StopNode": d.StopNode(ctx, h, o)} {
		if err == nil || errors.Is(err, driver.ErrNotFound) {
			t.Errorf("%s with libvirtd dropping calls: %v; want an error, not success or not-found", what, err)
		}
	}
	if _, err := d.Residue(ctx, o.Topology); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Residue with libvirtd dropping calls: %v, want ErrUnavailable", err)
	}
	// A daemon that cannot be dialled at all.
	u, err := New(Options{Socket: filepath.Join(t.TempDir(), "no-such-socket"), DomainType: TypeQEMU})
	if err != nil {
		t.Fatal(err)
	}
	obs, err = u.ObserveNode(ctx, h, o)
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ObserveNode on a missing socket: %s, %v; want unknown, ErrUnavailable", obs.Status, err)
	}
}

func TestArtifacts(t *testing.T) {
	ctx := context.Background()
	d, _ := fakeDriver(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.qcow2", append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 64)...))
	backed := append([]byte("QFI\xfb\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x01\x00"), make([]byte, 64)...)
	for name, spec := range map[string]substrate.ArtifactSpec{
		"qcow2 with a backing file": {Kind: KindQCOW2, Source: write("backed.qcow2", backed)},
		"not qcow2":                 {Kind: KindQCOW2, Source: write("raw.img", []byte("plain bytes here"))},
		"unknown kind":              {Kind: "oci_image", Source: good},
	} {
		if _, err := d.ResolveArtifact(ctx, spec); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	id, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindQCOW2, Source: "good.qcow2", BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindQCOW2, Source: good, Digest: "sha256:" + strings.Repeat("0", 64)}); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Errorf("wrong pin: %v, want ErrDigestMismatch", err)
	}
	// The source may change after resolve; the stored copy may not.
	write("good.qcow2", append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 65)...))
	if err := d.VerifyArtifact(ctx, id); err != nil {
		t.Errorf("VerifyArtifact after the source changed: %v (the stored copy is what counts)", err)
	}
	stored := filepath.Join(id.Ref, fileDisk)
	if fi, err := os.Stat(stored); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("stored copy %s: %v, mode %v; want read-only", stored, err, fi.Mode())
	}
	if err := os.Chmod(stored, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stored, []byte("QFI\xfbtampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.VerifyArtifact(ctx, id); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Errorf("VerifyArtifact of a tampered store: %v, want ErrDigestMismatch", err)
	}
	// Resolving the (unchanged) source again replaces the tampered entry.
	write("good.qcow2", append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 64)...))
	if again, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindQCOW2, Source: good}); err != nil || again.Digest != id.Digest {
		t.Fatalf("resolve over a tampered store entry: %+v, %v; want the same digest", again, err)
	}
	if err := d.VerifyArtifact(ctx, id); err != nil {
		t.Errorf("VerifyArtifact after the store entry was replaced: %v", err)
	}
	// A kernel directory: the initrd is part of the identity.
	kdir := filepath.Join(dir, "guest")
	if err := os.Mkdir(kdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kdir, fileKernel), []byte("ELF kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	k1, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindKernel, Source: kdir})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kdir, fileInitrd), []byte("cpio"), 0o644); err != nil {
		t.Fatal(err)
	}
	k2, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindKernel, Source: kdir})
	if err != nil {
		t.Fatal(err)
	}
	if k1.Digest == k2.Digest {
		t.Errorf("kernel with and without initrd: same digest %s", k1.Digest)
	}
	if _, err := os.Stat(filepath.Join(k2.Ref, fileInitrd)); err != nil {
		t.Errorf("stored kernel lacks its initrd: %v", err)
	}
}

// scriptedAgent answers guest agent commands like a guest whose exec'd process exits at once.
func scriptedAgent(t *testing.T, seen *[]string) func(golibvirt.Domain, string) (string, error) {
	return func(_ golibvirt.Domain, cmd string) (string, error) {
		var req struct {
			Execute   string         `json:"execute"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(cmd), &req); err != nil {
			t.Errorf("agent command %q: %v", cmd, err)
		}
		*seen = append(*seen, cmd)
		switch req.Execute {
		case "guest-ping":
			return `{"return":{}}`, nil
		case "guest-exec":
			if req.Arguments["path"] == "false" {
				return `{"error":{"class":"GenericError","desc":"no such file"}}`, nil
			}
			return `{"return":{"pid":42}}`, nil
		case "guest-exec-status":
			out := base64.StdEncoding.EncodeToString([]byte("hello\n"))
			return `{"return":{"exited":true,"exitcode":3,"out-data":"` + out + `"}}`, nil
		case "guest-network-get-interfaces":
			return `{"return":[{"name":"lo","hardware-address":"00:00:00:00:00:00"},{"name":"eth0","hardware-address":"02:00:c6:33:64:0a"}]}`, nil
		}
		return `{"error":{"class":"CommandNotFound","desc":"` + req.Execute + `"}}`, nil
	}
}

func TestExecAndGuestNetworkThroughAgent(t *testing.T) {
	ctx := context.Background()
	d, fc := fakeDriver(t)
	d.readyTimeout = 30 * time.Second // wait for the agent (the fake answers at once)
	base := storedDisk(t, d)
	o := testOwner("vm")
	spec := substrate.NodeSpec{Owner: o, Artifact: &base}
	h, err := d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	fc.agent = scriptedAgent(t, &seen)
	res, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"echo", "hello"}, Env: map[string]string{"K": "v"}, Stdin: []byte("in")})
	if err == nil {
		t.Fatalf("Exec in a domain that is not running: %+v, want an error (its agent cannot answer)", res)
	}
	if err := d.StartNode(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	res, err = d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"echo", "hello"}, Env: map[string]string{"K": "v"}, Stdin: []byte("in")})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "hello\n" {
		t.Fatalf("Exec: %+v, %v; want exit 3, stdout hello", res, err)
	}
	if !slices.ContainsFunc(seen, func(s string) bool {
		return strings.Contains(s, `"env":["K=v"]`) && strings.Contains(s, `"input-data":"aW4="`) && strings.Contains(s, `"arg":["hello"]`)
	}) {
		t.Errorf("guest-exec request lacks argv, env or stdin: %q", seen)
	}
	if _, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"false"}}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Exec refused by the agent: %v, want its error", err)
	}
	seen = nil
	atts := []substrate.AttachmentState{{Name: "eth0", MAC: "02:00:C6:33:64:0A", IPv4: []string{"198.51.100.10/24"}, Gateway: "198.51.100.1"}}
	if err := d.ConfigureGuestNetwork(ctx, h, atts, []substrate.Route{{To: "203.0.113.0/24", Via: "198.51.100.2"}}); err == nil {
		t.Fatal("ConfigureGuestNetwork: the fake's ip commands exit 3, want an error naming the command")
	} else if !strings.Contains(err.Error(), `["ip" "link" "set" "dev" "lo" "up"]: exit code 3`) {
		t.Errorf("ConfigureGuestNetwork error %v: want it to name the command", err)
	}
	cfg, ok, err := guestNetConfig(atts, []substrate.Route{{To: "203.0.113.7/24", Via: "198.51.100.2"}})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	cmds, err := cfg.Commands([]guestagent.Interface{{Name: "eth0", HardwareAddress: "02:00:c6:33:64:0a"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ip link set dev lo up", "ip link set dev eth0 up", "ip addr replace 198.51.100.10/24 dev eth0", "ip -4 route replace default via 198.51.100.1", "ip route replace 203.0.113.0/24 via 198.51.100.2"}
	var got []string
	for _, c := range cmds {
		got = append(got, strings.Join(c, " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("guest network commands:\n got %q\nwant %q", got, want)
	}
	if _, err := cfg.Commands(nil); err == nil {
		t.Error("guest network commands for a MAC the guest lacks: no error")
	}
	// A route to 0.0.0.0/0 replaces the attachment's gateway; nothing to do without addresses or routes.
	if cfg, _, err := guestNetConfig(atts, []substrate.Route{{To: "0.0.0.0/0", Via: "198.51.100.3"}}); err != nil || cfg.Gateway != "198.51.100.3" {
		t.Errorf("default route: gateway %q, %v; want 198.51.100.3", cfg.Gateway, err)
	}
	if _, ok, err := guestNetConfig([]substrate.AttachmentState{{Name: "eth0", MAC: "02:00:c6:33:64:0a"}}, nil); ok || err != nil {
		t.Errorf("no addresses, no routes: ok %v, %v; want nothing to do", ok, err)
	}
	if _, _, err := guestNetConfig(atts, []substrate.Route{{To: "nowhere", Via: "198.51.100.2"}}); err == nil {
		t.Error("route to a non-prefix: no error")
	}
}

// TestKernelDirectoryArtifact: a kernel directory resolves and verifies, and the store keeps
// only vmlinux and initrd.img. (The digest itself is substrate.DigestSource, the planner's.)
func TestKernelDirectoryArtifact(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{fileKernel: "ELF kernel", fileInitrd: "cpio", "disk.qcow2": "QFI\xfb"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(fileKernel, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	d, _ := fakeDriver(t)
	id, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: KindKernel, Source: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.VerifyArtifact(context.Background(), id); err != nil {
		t.Errorf("VerifyArtifact of a kernel directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(id.Ref, "disk.qcow2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stored kernel holds more than vmlinux and initrd.img: %v", err)
	}
}

// TestAgentConnectEventEndsTheWait: a readiness wait whose ping fails (the agent is not
// connected yet) pings again as soon as libvirt reports this domain's agent connected, not a
// poll later (the poll here is an hour). Another domain's connect and this one's disconnect do
// not end the pause, and no subscription outlives the wait.
func TestAgentConnectEventEndsTheWait(t *testing.T) {
	ctx := context.Background()
	d, fc := fakeDriver(t)
	d.agentPoll = time.Hour
	h, spec := fakeNode(t, d, "vm")
	event := func(dom golibvirt.Domain, st golibvirt.ConnectDomainEventAgentLifecycleState) *golibvirt.DomainEventCallbackAgentLifecycleMsg {
		return &golibvirt.DomainEventCallbackAgentLifecycleMsg{Dom: dom, State: int32(st)}
	}
	notConnected := golibvirt.Error{Code: uint32(golibvirt.ErrAgentUnresponsive), Message: "QEMU guest agent is not connected"}
	pings, right := 0, false
	fc.agent = func(dom golibvirt.Domain, cmd string) (string, error) {
		if pings++; pings > 1 {
			return `{"return":{}}`, nil
		}
		fc.emit(event(golibvirt.Domain{Name: "another", UUID: golibvirt.UUID{1}}, golibvirt.ConnectDomainEventAgentLifecycleStateConnected))
		fc.emit(event(dom, golibvirt.ConnectDomainEventAgentLifecycleStateDisconnected))
		if right {
			fc.emit(event(dom, golibvirt.ConnectDomainEventAgentLifecycleStateConnected))
		}
		return "", notConnected
	}
	// Only events that must not count: the wait runs into its deadline after one ping.
	d.readyTimeout = 2 * time.Second
	if err := d.StartNode(ctx, h, spec); err == nil || pings != 1 {
		t.Fatalf("StartNode with only another domain's connect and a disconnect: %v after %d pings; want the wait to end at its deadline after 1", err, pings)
	}
	if n := fc.subscribers(); n != 0 {
		t.Errorf("%d event subscriptions after the wait, want 0", n)
	}
	// This domain's connect: the second ping comes at once and answers.
	d.readyTimeout, pings, right = time.Minute, 0, true
	if err := d.StartNode(ctx, h, spec); err != nil || pings != 2 {
		t.Fatalf("StartNode with the agent's connect event: %v after %d pings; want ready after 2, within the minute", err, pings)
	}
	if n := fc.subscribers(); n != 0 {
		t.Errorf("%d event subscriptions after the wait, want 0", n)
	}
}

func TestIsRecordTemp(t *testing.T) {
	for name, want := range map[string]bool{
		".n1-g1.owner.tmp-123": true,  // durable write of an owner record, killed before its rename
		".n1-g1.start.tmp-9":   true,  // of a start record
		".n1-g1.qcow2.tmp-123": false, // not a record this driver writes durably
		".n1-g1.owner.tmp-":    false, // no digits: not durable's name
		".n1-g1.owner.tmp-12x": false,
		"n1-g1.owner.tmp-123":  false, // no leading dot
		".tmp-123":             false,
		"n1-g1.owner":          false,
	} {
		if got := isRecordTemp(name); got != want {
			t.Errorf("isRecordTemp(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRemoveDirIfEmptyKeepsStrangers(t *testing.T) {
	d, _ := fakeDriver(t)
	dir := d.overlayDir("lab")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(dir, ".notes.tmp-1") // dot and ".tmp-", but no record of ours
	if err := os.WriteFile(stranger, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".n1-g1.owner.tmp-7"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.removeDirIfEmpty("lab"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stranger); err != nil {
		t.Fatalf("a stranger's file after removeDirIfEmpty: %v; it must stay, and its directory too", err)
	}
	if err := os.Remove(stranger); err != nil {
		t.Fatal(err)
	}
	if err := d.removeDirIfEmpty("lab"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory holding only a killed record write: %v, want removed", err)
	}
}
