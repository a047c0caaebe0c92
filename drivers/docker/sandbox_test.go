package docker

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonContainerWithoutNetworkSandbox: a node's container has a network namespace of its
// own (only lo) but no Docker network sandbox (NetworkDisabled: no endpoint, no namespace
// mount, no hosts file of Docker's), and SetHosts writes its /etc/hosts from the host: localhost
// lines, then one sysbox section — inside the container even when the container has made
// /etc/hosts a symlink to an absolute path (resolved in the container's root, never the host's).
func TestDaemonContainerWithoutNetworkSandbox(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	o := testOwner(topo, "a")
	h, _ := mustNode(t, d, o, art, "sleep", "3600")
	t.Cleanup(func() { _ = d.DeleteNode(ctx, h, o) })

	ins, err := d.cli.ContainerInspect(ctx, h.ExternalID)
	if err != nil {
		t.Fatal(err)
	}
	if !ins.Config.NetworkDisabled || ins.HostConfig.NetworkMode != "none" || ins.HostsPath != "" ||
		ins.NetworkSettings.SandboxKey != "" || len(ins.NetworkSettings.Networks) != 0 {
		t.Fatalf("container: NetworkDisabled %v, network mode %q, hosts path %q, sandbox %q, networks %v; want true, none, no hosts file, no sandbox, no networks",
			ins.Config.NetworkDisabled, ins.HostConfig.NetworkMode, ins.HostsPath, ins.NetworkSettings.SandboxKey, ins.NetworkSettings.Networks)
	}
	own, err := os.Readlink("/proc/" + strconv.Itoa(ins.State.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if host, _ := os.Readlink("/proc/self/ns/net"); own == host {
		t.Fatalf("container shares the host's network namespace %s", host)
	}
	exec := func(argv ...string) string {
		t.Helper()
		res, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: argv, Timeout: 10 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %v: exit %d stderr %q, %v", argv, res.ExitCode, res.Stderr, err)
		}
		return string(res.Stdout)
	}
	if links := exec("ip", "-o", "link"); strings.Count(links, "\n") != 1 || !strings.Contains(links, ": lo:") {
		t.Fatalf("links in the container: got %q, want lo alone", links)
	}

	entries := []driver.HostEntry{{Address: "198.51.100.7", Names: []string{"peer"}}}
	for i := 0; i < 2; i++ { // again: replaces, never appends
		if err := d.SetHosts(ctx, h, o, entries); err != nil {
			t.Fatalf("SetHosts: %v", err)
		}
	}
	hosts := exec("cat", "/etc/hosts")
	if !strings.HasPrefix(hosts, "127.0.0.1\tlocalhost\n") || strings.Count(hosts, "# sysbox owner ") != 1 ||
		!strings.HasSuffix(hosts, "198.51.100.7\tpeer\n") {
		t.Fatalf("/etc/hosts in the container:\n%s\nwant localhost lines, then one sysbox section ending in the entry", hosts)
	}

	// The container points /etc/hosts at an absolute path: the write lands at that path inside
	// the container, never on the host.
	escape := "/sysbox-escape-" + randHex(6)
	exec("/bin/busybox", "ln", "-sf", escape, "/etc/hosts")
	t.Cleanup(func() { _ = os.Remove(escape) })
	if err := d.SetHosts(ctx, h, o, entries); err != nil {
		t.Fatalf("SetHosts through a symlink: %v", err)
	}
	if _, err := os.Lstat(escape); err == nil {
		t.Fatalf("SetHosts wrote %s on the host through the container's symlink", escape)
	}
	if got := exec("cat", escape); !strings.Contains(got, "198.51.100.7\tpeer\n") {
		t.Fatalf("%s in the container: got %q, want the sysbox section", escape, got)
	}
}
