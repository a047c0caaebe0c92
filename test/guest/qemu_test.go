package guest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

func digest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cleanup runs a command in t.Cleanup and only logs a failure (the object may be gone already).
func cleanup(t *testing.T, name string, args ...string) {
	t.Cleanup(func() {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Logf("cleanup %s %s: %v %s", name, strings.Join(args, " "), err, out)
		}
	})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestQEMUGuestAgent boots the image once (TCG; never KVM, see HOST-NOTES) on a qcow2 overlay
// of the baseline, with the agent on a virtio-serial chardev socket and a virtio-net NIC on a
// TAP in a bridge shared with a network namespace; then: guest-ping, guest-exec, interfaces,
// network init, and ping both ways.
func TestQEMUGuestAgent(t *testing.T) {
	testenv.RequireRoot(t)
	qemu := testenv.RequireBinary(t, "qemu-system-x86_64")
	qemuImg := testenv.RequireBinary(t, "qemu-img")
	testenv.RequireBinary(t, "ip")
	busybox := testenv.RequireBinary(t, "busybox")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	img := testenv.GuestImage(t)
	baseline := filepath.Join(img, "disk.qcow2")
	baseDigest := digest(t, baseline)
	kver, err := os.ReadFile(filepath.Join(img, "kernel.release"))
	if err != nil {
		t.Fatal(err)
	}

	runDir, err := os.MkdirTemp("", "sysbox-guest-qemu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	overlay := filepath.Join(runDir, "overlay.qcow2")
	run(t, qemuImg, "create", "-q", "-f", "qcow2", "-b", baseline, "-F", "qcow2", overlay)

	// Network: bridge + TAP for the VM + a namespace on a veth, all named with one random tag.
	tag := randHex(3)
	br, tap, vh, vn, ns := "sbgbr"+tag, "sbgtp"+tag, "sbgvh"+tag, "sbgvn"+tag, "sbgns"+tag
	run(t, "ip", "link", "add", br, "type", "bridge")
	cleanup(t, "ip", "link", "del", br)
	run(t, "ip", "link", "set", br, "up")
	run(t, "ip", "tuntap", "add", "dev", tap, "mode", "tap")
	cleanup(t, "ip", "link", "del", tap)
	run(t, "ip", "link", "set", tap, "master", br, "up")
	run(t, "ip", "netns", "add", ns)
	cleanup(t, "ip", "netns", "del", ns)
	run(t, "ip", "link", "add", vh, "type", "veth", "peer", "name", vn)
	cleanup(t, "ip", "link", "del", vh)
	run(t, "ip", "link", "set", vn, "netns", ns)
	run(t, "ip", "link", "set", vh, "master", br, "up")
	run(t, "ip", "-n", ns, "addr", "add", "192.0.2.1/24", "dev", vn)
	run(t, "ip", "-n", ns, "link", "set", vn, "up")
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	// dockerd's FORWARD policy DROP would drop traffic bridged between our ports (HOST-NOTES).
	owner := substrate.Owner{Topology: "test-guest-" + tag, Address: "test.guest", Type: "test_bridge", Generation: 1}
	if _, err := linuxnet.EnsureForwardAccept(br, owner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := linuxnet.RemoveForwardAccept(br, owner); err != nil {
			t.Errorf("remove forward accept rule for %s: %v", br, err)
		}
	})

	sock := filepath.Join(runDir, "qga.sock")
	console := filepath.Join(runDir, "console.log")
	consoleF, err := os.Create(console)
	if err != nil {
		t.Fatal(err)
	}
	defer consoleF.Close()
	mac := "52:54:00:5b:" + tag[:2] + ":" + tag[2:4]
	marker := "sysbox.test=" + tag
	qcmd := exec.Command(qemu,
		"-accel", "tcg", "-m", "256", "-nographic", "-no-reboot", "-nodefaults",
		"-serial", "stdio", "-monitor", "none",
		"-kernel", filepath.Join(img, "vmlinux"), "-initrd", filepath.Join(img, "initrd.img"),
		"-append", "console=ttyS0 panic=-1 quiet "+marker,
		"-drive", "file="+overlay+",format=qcow2,if=virtio",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=qga0,path="+sock+",server=on,wait=off",
		"-device", "virtserialport,chardev=qga0,name="+guestagent.VirtioPortName,
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+mac,
	)
	qcmd.Stdout, qcmd.Stderr = consoleF, consoleF
	if err := qcmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = qcmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = qcmd.Process.Kill()
		<-exited
	})
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("guest console:\n%s", b)
		}
	}()

	// Readiness: one connection to the chardev; every try resyncs (0xFF + guest-sync-delimited),
	// so replies to earlier tries that the agent answers late are skipped.
	var st *guestagent.Stream
	for st == nil {
		select {
		case <-exited:
			t.Fatalf("qemu exited before its agent socket came up")
		case <-ctx.Done():
			t.Fatalf("agent socket %s never came up", sock)
		case <-time.After(100 * time.Millisecond):
		}
		st, _ = guestagent.DialUnix(ctx, sock)
	}
	defer st.Close()
	c := guestagent.NewClient(st)
	start := time.Now()
	readyCtx, readyCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer readyCancel()
	for {
		pctx, pcancel := context.WithTimeout(readyCtx, 3*time.Second)
		err := c.Ping(pctx)
		pcancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("qemu exited while waiting for guest-ping: %v", err)
		default:
		}
		if readyCtx.Err() != nil {
			t.Fatalf("no guest-ping within 5 minutes: %v", err)
		}
	}
	t.Logf("guest agent ready %.1fs after qemu start", time.Since(start).Seconds())

	info, err := c.Info(ctx)
	if err != nil || !strings.HasPrefix(info.Version, "sysbox-guest ") {
		t.Fatalf("guest-info: got %+v, %v", info, err)
	}
	out, err := c.Run(ctx, "uname", "-r")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out.OutData)), strings.TrimSpace(string(kver)); got != want {
		t.Fatalf("uname -r in the guest: got %q, want %q", got, want)
	}
	out, err = c.Run(ctx, "cat", "/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.OutData), marker) {
		t.Fatalf("/proc/cmdline in the guest: got %q, want it to hold %q", out.OutData, marker)
	}

	ifaces, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, i := range ifaces {
		if hw, err := net.ParseMAC(i.HardwareAddress); err == nil && hw.String() == mac {
			found = true
		}
	}
	if !found {
		t.Fatalf("guest-network-get-interfaces: got %+v, want a NIC with mac %s", ifaces, mac)
	}

	cfg := guestagent.NetworkConfig{
		Interfaces: []guestagent.NetInterface{{MAC: mac, Addresses: []string{"192.0.2.10/24"}}},
		Gateway:    "192.0.2.1",
		Routes:     []guestagent.Route{{Destination: "198.51.100.0/24", Via: "192.0.2.1"}},
	}
	if err := c.ConfigureNetwork(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigureNetwork(ctx, cfg); err != nil { // idempotent: a retry or reset applies it again
		t.Fatalf("network init again: %v", err)
	}
	ifaces, err = c.Interfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hasAddr(ifaces, mac, "192.0.2.10", 24) {
		t.Fatalf("after network init: got %+v, want 192.0.2.10/24 on %s", ifaces, mac)
	}
	routes, err := c.Run(ctx, "ip", "route")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"default via 192.0.2.1", "198.51.100.0/24 via 192.0.2.1"} {
		if !strings.Contains(string(routes.OutData), want) {
			t.Fatalf("guest routes: got %q, want %q", routes.OutData, want)
		}
	}

	// Traffic over the bridge, both ways.
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, busybox, "ping", "-c", "3", "-W", "5", "192.0.2.10").CombinedOutput(); err != nil {
		t.Fatalf("ping the guest from netns %s: %v\n%s", ns, err, out)
	}
	if _, err := c.Run(ctx, "ping", "-c", "2", "-W", "5", "192.0.2.1"); err != nil {
		t.Fatalf("ping the netns from the guest: %v", err)
	}

	if got := digest(t, baseline); got != baseDigest {
		t.Fatalf("baseline %s changed while the guest ran: %s, was %s", baseline, got, baseDigest)
	}
}

func hasAddr(ifaces []guestagent.Interface, mac, addr string, prefix int) bool {
	for _, i := range ifaces {
		hw, err := net.ParseMAC(i.HardwareAddress)
		if err != nil || hw.String() != mac {
			continue
		}
		for _, a := range i.IPAddresses {
			if a.Address == addr && a.Prefix == prefix {
				return true
			}
		}
	}
	return false
}
