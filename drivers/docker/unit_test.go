package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestRegisterDeclaresImplementedCapabilities(t *testing.T) {
	r := driver.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatalf("Register: %v", err)
	}
	for _, c := range []driver.Capability{driver.CapArtifact, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState,
		driver.CapGuestExec, driver.CapReset, driver.CapImport, driver.CapAudit} {
		if err := r.Require("sysbox_node.x", Name, c); err != nil {
			t.Errorf("Require(%s): got %v, want nil", c, err)
		}
	}
	var mc *driver.MissingCapabilityError
	if err := r.Require("sysbox_network.n", Name, driver.CapManagedNetwork); !errors.As(err, &mc) {
		t.Errorf("Require(managed-network): got %v, want *MissingCapabilityError", err)
	}
}

func TestOwnerLabels(t *testing.T) {
	own := substrate.Owner{Topology: "t1", Address: `sysbox_node.web["a"]`, Type: "sysbox_node", Generation: 3}
	good := ownerLabels(own)
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   substrate.Owner
		ok     bool // checkOwned passes
	}{
		{"exact labels", good, own, true},
		{"older generation wanted", good, substrate.Owner{Topology: "t1", Address: own.Address, Type: own.Type, Generation: 2}, false},
		{"other topology wanted", good, substrate.Owner{Topology: "t2", Address: own.Address, Type: own.Type, Generation: 3}, false},
		{"no labels", nil, own, false},
		{"generation label missing", with(labelGeneration, ""), own, false},
		{"generation label garbage", with(labelGeneration, "x"), own, false},
		{"marker of someone else", with(labelMarker, substrate.Owner{Topology: "t1", Address: "sysbox_node.other", Type: "sysbox_node", Generation: 3}.Marker()), own, false},
		{"marker missing but anchors agree", with(labelMarker, ""), own, true},
		{"incomplete owner wanted", good, substrate.Owner{Topology: "t1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkOwned("container x", tt.labels, tt.want)
			if tt.ok && err != nil {
				t.Fatalf("checkOwned: got %v, want nil", err)
			}
			if !tt.ok && !errors.Is(err, driver.ErrNotOwned) {
				t.Fatalf("checkOwned: got %v, want ErrNotOwned", err)
			}
		})
	}
}

func TestInterfaceNames(t *testing.T) {
	o := substrate.Owner{Topology: "t", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	o2 := o
	o2.Generation = 2
	h1, h2 := hostIfName(o, "lan"), hostIfName(o2, "lan")
	if len(h1) > 15 || h1 == h2 || h1 == hostIfName(o, "wan") {
		t.Fatalf("hostIfName: got %q (gen 2 %q), want ≤15 bytes and distinct per generation and attachment", h1, h2)
	}
	for _, tt := range []struct{ in, want string }{
		{"lan", "lan"}, {"eth0", "eth0"}, {"lo", guestIfName("lo")}, {"a very long attachment", guestIfName("a very long attachment")},
	} {
		got := guestIfName(tt.in)
		if got != tt.want || len(got) > 15 || got == "lo" || !ifNameRE.MatchString(got) {
			t.Errorf("guestIfName(%q): got %q", tt.in, got)
		}
	}
	alias := nicAlias(o, "lan side")
	po, att, ok := parseNICAlias(alias)
	if !ok || !po.Equal(o) || att != "lan side" {
		t.Fatalf("parseNICAlias(nicAlias): got %+v %q %v, want %+v \"lan side\" true", po, att, ok, o)
	}
	if _, _, ok := parseNICAlias("some admin note"); ok {
		t.Fatalf("parseNICAlias(foreign alias): got ok, want not ok")
	}
}

func TestCheckPrivate(t *testing.T) {
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := substrate.Owner{Topology: "t", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	good := nodeHandle(nodePrivate{ContainerID: "abc", Name: "n", ImageID: "sha256:1", Marker: o.Marker()}).Private
	future := good
	future.Version = privateVersion + 1
	noMarker := nodeHandle(nodePrivate{ContainerID: "abc"}).Private
	noID := nodeHandle(nodePrivate{Marker: o.Marker()}).Private
	other := good
	other.Driver = "netns"
	tests := []struct {
		name     string
		env      substrate.Envelope
		wantErr  bool
		notOwned bool
	}{
		{"current envelope", good, false, false},
		{"newer version", future, true, false},
		{"other driver", other, true, false},
		{"no marker", noMarker, true, true},
		{"no container id", noID, true, true},
		{"garbage data", substrate.Envelope{Driver: Name, Version: 1, Data: json.RawMessage(`[1`)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.CheckPrivate(tt.env)
			if (err != nil) != tt.wantErr || (tt.notOwned && !errors.Is(err, driver.ErrNotOwned)) {
				t.Fatalf("CheckPrivate: got %v, want error %v (not owned %v)", err, tt.wantErr, tt.notOwned)
			}
		})
	}
}

// unreachableDriver talks to a socket nobody listens on.
func unreachableDriver(t *testing.T) *Driver {
	d, err := New(Options{Host: "unix://" + filepath.Join(t.TempDir(), "no-dockerd.sock")})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestUnreachableDaemonIsUnknownNeverAbsent(t *testing.T) {
	d := unreachableDriver(t)
	ctx := context.Background()
	o := substrate.Owner{Topology: "t", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	h := nodeHandle(nodePrivate{ContainerID: "0123456789ab", Marker: o.Marker()})
	obs, err := d.ObserveNode(ctx, h, o)
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ObserveNode: got %s, %v; want unknown, ErrUnavailable", obs.Status, err)
	}
	st := substrate.AttachmentState{Name: "lan", Private: nicEnvelope(nicPrivate{HostIf: "sdx", GuestIf: "lan"})}
	obs, err = d.ObserveAttachment(ctx, h, st, o)
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ObserveAttachment: got %s, %v; want unknown, ErrUnavailable", obs.Status, err)
	}
	if err := d.DeleteNode(ctx, h, o); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("DeleteNode: got %v, want ErrUnavailable (an unreachable daemon must never read as already deleted)", err)
	}
	if err := d.StopNode(ctx, h, o); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("StopNode: got %v, want ErrUnavailable", err)
	}
	if _, err := d.Residue(ctx, "t"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Residue: got %v, want ErrUnavailable", err)
	}
}

func TestPinnedDigestMismatchFailsBeforeTheDaemon(t *testing.T) {
	d := unreachableDriver(t)
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(p, []byte("not really a tar, but bytes to hash"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest, size, err := hashFile(p)
	if err != nil || size != 35 {
		t.Fatalf("hashFile: got %s %d %v", digest, size, err)
	}
	tests := []struct {
		name, pin string
		want      error
	}{
		{"wrong pin", "sha256:" + strings.Repeat("0", 64), driver.ErrDigestMismatch},
		{"right pin reaches the daemon", digest, driver.ErrUnavailable},
		{"no pin reaches the daemon", "", driver.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: KindRootfs, Source: "rootfs.tar", BaseDir: filepath.Dir(p), Digest: tt.pin})
			wantErrIs(t, "ResolveArtifact", err, tt.want)
		})
	}
	_, err = d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: "qcow2", Source: p})
	wantErrIs(t, "ResolveArtifact(qcow2)", err, driver.ErrInvalid)
	_, err = d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: KindRootfs, Source: p, Digest: "md5:abc"})
	if err == nil || !strings.Contains(err.Error(), `digest "md5:abc"`) {
		t.Fatalf("ResolveArtifact(bad pin): got %v, want an error naming the digest", err)
	}
}

func TestOCILayoutConversion(t *testing.T) {
	dir := t.TempDir()
	rootfs := []byte("pretend layer")
	oci, err := imagetest.OCILayout(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	ociPath := filepath.Join(dir, "oci.tar")
	if err := os.WriteFile(ociPath, oci, 0o644); err != nil {
		t.Fatal(err)
	}
	da, err := imagetest.DockerArchive(rootfs, "x:y")
	if err != nil {
		t.Fatal(err)
	}
	daPath := filepath.Join(dir, "da.tar")
	if err := os.WriteFile(daPath, da, 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.tar")
	if err := os.WriteFile(junk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want archiveKind
	}{{ociPath, formatOCILayout}, {daPath, formatDockerArchive}, {junk, 0}} {
		got, err := archiveFormat(tt.path)
		if got != tt.want || (tt.want == 0) != (err != nil) {
			t.Errorf("archiveFormat(%s): got %v, %v; want %v", filepath.Base(tt.path), got, err, tt.want)
		}
	}

	rc, err := ociToDockerArchive(ociPath, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[cleanName(h.Name)] = b
	}
	var man []dockerManifestEntry
	if err := json.Unmarshal(files["manifest.json"], &man); err != nil || len(man) != 1 {
		t.Fatalf("manifest.json: got %s (%v), want one entry", files["manifest.json"], err)
	}
	if len(man[0].Layers) != 1 || !bytes.Equal(files[man[0].Layers[0]], rootfs) {
		t.Fatalf("manifest layers: got %v, want the one layer blob holding the rootfs", man[0].Layers)
	}
	if _, ok := files[man[0].Config]; !ok {
		t.Fatalf("manifest config %s: not in the converted archive", man[0].Config)
	}
}

func TestPickManifest(t *testing.T) {
	amd := ocispec.Descriptor{Digest: "sha256:a", Platform: &ocispec.Platform{Architecture: "amd64", OS: "linux"}}
	arm := ocispec.Descriptor{Digest: "sha256:b", Platform: &ocispec.Platform{Architecture: "arm64", OS: "linux"}}
	tests := []struct {
		name   string
		idx    []ocispec.Descriptor
		arch   string
		want   string
		wantOK bool
	}{
		{"single entry", []ocispec.Descriptor{arm}, "amd64", "sha256:b", true},
		{"multi-arch picks amd64", []ocispec.Descriptor{arm, amd}, "amd64", "sha256:a", true},
		{"multi-arch without match", []ocispec.Descriptor{arm, amd}, "s390x", "", false},
		{"empty index", nil, "amd64", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pickManifest(ocispec.Index{Manifests: tt.idx}, tt.arch)
			if (err == nil) != tt.wantOK || (tt.wantOK && got.Digest.String() != tt.want) {
				t.Fatalf("pickManifest: got %s, %v; want %s (ok %v)", got.Digest, err, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRetryDump(t *testing.T) {
	other := errors.New("permission denied")
	tests := []struct {
		name      string
		errs      []error // returned by successive calls; nil = success
		wantCalls int
		wantErr   error
	}{
		{"first try", []error{nil}, 1, nil},
		{"interrupted twice", []error{netlink.ErrDumpInterrupted, netlink.ErrDumpInterrupted, nil}, 3, nil},
		{"other error at once", []error{other}, 1, other},
		{"always interrupted", nil, 10, netlink.ErrDumpInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := retryDump(func() ([]int, error) {
				calls++
				if calls <= len(tt.errs) && tt.errs[calls-1] == nil {
					return []int{1, 2}, nil
				}
				if calls <= len(tt.errs) {
					return []int{1}, tt.errs[calls-1]
				}
				return []int{1}, netlink.ErrDumpInterrupted
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) && err != tt.wantErr {
				t.Fatalf("got %d calls, %v; want %d calls, %v", calls, err, tt.wantCalls, tt.wantErr)
			}
			if tt.wantErr == nil && len(got) != 2 {
				t.Fatalf("got %v, want the complete dump", got)
			}
			if errors.Is(tt.wantErr, netlink.ErrDumpInterrupted) && got != nil {
				t.Fatalf("got partial %v, want none", got)
			}
		})
	}
}

// A NIC record the audit cannot read or decode is an error naming it (it was skipped, so the
// audit read "clean"); a good record of the topology is listed.
func TestSidecarResidueRefusesDamagedRecords(t *testing.T) {
	owner := testOwner("test-sidecar", "web")
	for _, tc := range []struct {
		name string
		bad  func(t *testing.T, path string)
	}{
		{"truncated", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(`{"kind":"sysbox-docker-nics","ver`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, path string) {
			if err := os.Symlink(path+".gone", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Driver{stateDir: t.TempDir()}
			good := strings.Repeat("a", 64)
			if err := d.updateSidecar(good, owner, func(n map[string]nicPrivate) { n["lan"] = nicPrivate{GuestIf: "eth1"} }); err != nil {
				t.Fatal(err)
			}
			if objs, err := d.sidecarResidue(owner.Topology); err != nil || len(objs) != 1 {
				t.Fatalf("sidecarResidue: got %+v, %v; want the one record", objs, err)
			}
			bad := d.sidecarPath(strings.Repeat("b", 64))
			tc.bad(t, bad)
			if objs, err := d.sidecarResidue(owner.Topology); err == nil || !strings.Contains(err.Error(), bad) {
				t.Fatalf("sidecarResidue with a %s record: got %+v, %v; want an error naming %s", tc.name, objs, err, bad)
			}
		})
	}
}

// TestBaseHosts: the lines before our section are kept; an empty file (a container without a
// hosts file of Docker's) gets the localhost lines.
func TestBaseHosts(t *testing.T) {
	docker := "127.0.0.1\tlocalhost\n10.0.0.2\tabc\n"
	for _, tc := range []struct{ name, cur, want string }{
		{"empty", "", localhostLines},
		{"blank", "\n \n", localhostLines},
		{"docker's lines", docker, docker},
		{"docker's lines and our section", docker + linuxnet.HostsMarkerPrefix + "x\n1.2.3.4\ty\n", docker},
		{"our section alone", linuxnet.HostsMarkerPrefix + "x\n1.2.3.4\ty\n", localhostLines},
	} {
		if got := string(baseHosts([]byte(tc.cur))); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReadHostsRefusesOverLimit: a hosts file up to the limit is read whole; a larger one is
// refused rather than cut off (its rewrite would drop the rest).
func TestReadHostsRefusesOverLimit(t *testing.T) {
	full := bytes.Repeat([]byte("x"), maxHostsFile)
	if got, err := readHosts(bytes.NewReader(full)); err != nil || len(got) != maxHostsFile {
		t.Fatalf("a file of exactly the limit: got %d bytes, %v; want it whole", len(got), err)
	}
	if got, err := readHosts(bytes.NewReader(append(full, '\n'))); err == nil {
		t.Fatalf("a file one byte over the limit: got %d bytes and no error; want a refusal", len(got))
	}
}
