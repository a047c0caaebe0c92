// Package microvmlab_test runs the microvm-lab topology through the real sysbox binary with the
// contract-checking Firecracker simulator as `firecracker` on PATH (kernel tier): apply, the
// API calls each microVM's VMM saw, the TAPs on the bridge, traffic both ways between the
// microVMs (the simulator's guests run sysbox-guest) and the netns router, `sysbox exec` in a
// microVM, and destroy with a clean audit.
package microvmlab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/firecracker"
	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
)

type request struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body"`
	Status int             `json:"status"`
	Fault  string          `json:"fault"`
}

func TestMicroVMLab(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox")
	sim := testenv.BuildBinary(t, "zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/firecracker")
	agent := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox-guest")
	dir := newLab(t, 4<<20)
	reqLog := filepath.Join(dir, "requests.jsonl")
	env := append(os.Environ(), "PATH="+filepath.Dir(sim)+":"+os.Getenv("PATH"), "FCSIM_REQUEST_LOG="+reqLog, "FCSIM_GUEST_AGENT="+agent)
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--chdir", dir, "--no-color"}, args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		_, _ = run("destroy", "-auto-approve")
		if lin := lineage(dir); lin != "" {
			if objs := residue(lin); len(objs) > 0 {
				t.Errorf("residue after cleanup destroy: %v", objs)
			}
		}
	})
	if out, err := run("apply", "-auto-approve"); err != nil {
		t.Fatalf("sysbox apply: %v\n%s", err, out)
	}

	// Each VMM saw the boot sequence and the network interface on a TAP; the simulator refused
	// nothing.
	b, err := os.ReadFile(reqLog)
	must(t, err)
	starts := 0
	var taps []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r request
		must(t, json.Unmarshal([]byte(line), &r))
		if r.Status >= 300 {
			t.Errorf("the VMM refused %s %s: %s", r.Method, r.Path, r.Fault)
		}
		switch {
		case r.Path == "/actions" && strings.Contains(string(r.Body), "InstanceStart"):
			starts++
		case strings.HasPrefix(r.Path, "/network-interfaces/"):
			var n struct {
				HostDevName string `json:"host_dev_name"`
			}
			must(t, json.Unmarshal(r.Body, &n))
			taps = append(taps, n.HostDevName)
		}
	}
	if starts != 2 || len(taps) != 2 {
		t.Fatalf("request log: %d InstanceStart, TAPs %v; want 2 of each\n%s", starts, taps, b)
	}
	for _, tap := range taps {
		l, err := netlink.LinkByName(tap)
		if err != nil || l.Attrs().MasterIndex == 0 || !strings.HasPrefix(l.Attrs().Alias, "sysbox1:") {
			t.Fatalf("TAP %s: %v %+v; want a marked port of the lan bridge", tap, err, l)
		}
	}
	// Traffic both ways between each microVM and the netns router on the lan bridge, and
	// between the microVMs; `sysbox exec` reaches the guest through its agent over vsock.
	bb, err := exec.LookPath("busybox")
	must(t, err)
	ping := func(from, to string) {
		t.Helper()
		if out, err := run("exec", from, "--", bb, "ping", "-c", "1", "-W", "5", to); err != nil {
			t.Fatalf("ping %s from %s: %v\n%s", to, from, err, out)
		}
	}
	for i, ip := range []string{"198.51.100.10", "198.51.100.11"} {
		vm := fmt.Sprintf("sysbox_node.vm[%d]", i)
		ping(vm, "198.51.100.1")
		ping("sysbox_node.router", ip)
		out, err := run("exec", vm, "--", "ip", "-4", "-o", "addr", "show")
		if err != nil || !strings.Contains(out, "inet "+ip+"/24") {
			t.Fatalf("sysbox exec %s -- ip addr: %v\n%s; want inet %s/24", vm, err, out, ip)
		}
		out, err = run("exec", vm, "--", "ip", "-4", "route", "show", "default")
		if err != nil || !strings.Contains(out, "default via 198.51.100.1") {
			t.Fatalf("sysbox exec %s -- ip route: %v\n%s; want default via 198.51.100.1", vm, err, out)
		}
	}
	ping("sysbox_node.vm[0]", "198.51.100.11")
	if out, err := run("exec", "sysbox_node.vm[1]", "--", "sh", "-c", "exit 7"); err == nil {
		t.Fatalf("sysbox exec of a failing command: no error\n%s", out)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("sysbox exec of `exit 7`: %v; want exit status 7\n%s", err, out)
	}

	if out, err := run("apply", "-auto-approve"); err != nil || !strings.Contains(out, "0 operation(s) done") && !strings.Contains(out, "No changes") {
		t.Fatalf("second apply: %v\n%s", err, out)
	}

	lin := lineage(dir)
	if out, err := run("destroy", "-auto-approve"); err != nil {
		t.Fatalf("sysbox destroy: %v\n%s", err, out)
	}
	if objs := residue(lin); len(objs) > 0 {
		t.Fatalf("residue after destroy: %v", objs)
	}
	for _, tap := range taps {
		if _, err := netlink.LinkByName(tap); err == nil {
			t.Fatalf("TAP %s left after destroy", tap)
		}
	}
}

// newLab is a directory holding the example's topology and stand-in artifacts (the simulator
// boots nothing): a sparse rootfs of rootfsSize bytes and a kernel.
func newLab(t *testing.T, rootfsSize int64) string {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile("main.sysbox.hcl")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), src, 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "images"), 0o755))
	rootfs := filepath.Join(dir, "images", "rootfs.ext4")
	must(t, os.WriteFile(rootfs, []byte("an ext4 image stands here"), 0o644))
	must(t, os.Truncate(rootfs, rootfsSize))
	must(t, os.WriteFile(filepath.Join(dir, "images", "vmlinux"), []byte("\x7fELF guest kernel"), 0o644))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func lineage(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ".sysbox", "state"))
	if err != nil {
		return ""
	}
	var st struct {
		Lineage string `json:"lineage"`
	}
	_ = json.Unmarshal(b, &st)
	return st.Lineage
}

func residue(topology string) []string {
	var out []string
	for _, a := range []driver.Auditor{netns.New(), firecracker.New(firecracker.Options{})} {
		objs, err := a.Residue(context.Background(), topology)
		if err != nil {
			out = append(out, "audit error: "+err.Error())
		}
		for _, o := range objs {
			out = append(out, o.Kind+" "+o.ExternalID)
		}
	}
	return out
}
