package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The ids the jailed tests drop the VMM to: no account has them on a test host.
const testUID, testGID = 64123, 64124

func TestJailArgvAndLayout(t *testing.T) {
	j := &jailRecord{Jailer: "/usr/bin/jailer", Exec: "/opt/fc/firecracker-v1.17", UID: 123, GID: 100, Base: "/srv/jailer"}
	want := []string{"/usr/bin/jailer", "--id", "fc-abc-g1", "--exec-file", "/opt/fc/firecracker-v1.17",
		"--uid", "123", "--gid", "100", "--chroot-base-dir", "/srv/jailer", "--", "--api-sock", "/api.sock"}
	if got := j.argv("fc-abc-g1"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("argv:\n got %q\nwant %q", got, want)
	}
	if got, want := j.root("fc-abc-g1"), "/srv/jailer/firecracker-v1.17/fc-abc-g1/root"; got != want {
		t.Errorf("chroot: got %s, want %s", got, want)
	}
	if got, want := j.key(), "123:100@/srv/jailer/firecracker-v1.17"; got != want {
		t.Errorf("key: got %s, want %s", got, want)
	}
	if (*jailRecord)(nil).key() != "" {
		t.Errorf("an unjailed node's key is not empty")
	}
	d := New(Options{StateDir: "/run/x"})
	r := nodeRecord{Name: "fc-abc-g1", Jail: j}
	for host, want := range map[string]string{
		"/srv/jailer/firecracker-v1.17/fc-abc-g1/root/rootfs.img":     "/rootfs.img",
		"/srv/jailer/firecracker-v1.17/fc-abc-g1/root/snapshot/vm.sn": "/snapshot/vm.sn",
		"/srv/jailer/firecracker-v1.17/fc-abc-g1/rootfs.img":          "/srv/jailer/firecracker-v1.17/fc-abc-g1/rootfs.img", // outside: unchanged
	} {
		if got := d.vmmPath(r, host); got != want {
			t.Errorf("vmmPath(%s) = %s, want %s", host, got, want)
		}
	}
	if got := d.vmmPath(nodeRecord{Name: "fc-abc-g1"}, "/run/x/fc-abc-g1/rootfs.img"); got != "/run/x/fc-abc-g1/rootfs.img" {
		t.Errorf("unjailed vmmPath changed the path: %s", got)
	}
	if got, want := d.filesDir(r), j.root("fc-abc-g1"); got != want {
		t.Errorf("filesDir jailed: got %s, want %s", got, want)
	}
	if o := r.owner(); !o.set || o.uid != 123 || o.gid != 100 {
		t.Errorf("owner: got %+v, want 123:100", o)
	}
}

func TestConfigureJailer(t *testing.T) {
	d := New(Options{StateDir: t.TempDir()})
	if err := d.Configure(map[string]string{"jailer": jailerBinary, "uid": "123", "gid": "100"}); err != nil {
		t.Fatal(err)
	}
	if j, u, g, b := d.Jailer(); j != jailerBinary || u != 123 || g != 100 || b != DefaultChrootBase {
		t.Fatalf("Jailer() = %s %d %d %s; want %s 123 100 %s", j, u, g, b, jailerBinary, DefaultChrootBase)
	}
	base := t.TempDir()
	for _, tc := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{"jailer": jailerBinary, "gid": "1"}, `setting "uid": required with "jailer"`},
		{map[string]string{"jailer": jailerBinary, "uid": "1"}, `setting "gid": required with "jailer"`},
		{map[string]string{"jailer": jailerBinary, "uid": "-1", "gid": "1"}, `setting "uid": "-1": want a decimal id`},
		{map[string]string{"jailer": jailerBinary, "uid": "1", "gid": "4294967295"}, `setting "gid": "4294967295"`},
		{map[string]string{"jailer": jailerBinary, "uid": "1", "gid": "1", "chroot_base": "srv"}, `setting "chroot_base": "srv": want an absolute`},
		{map[string]string{"jailer": jailerBinary, "uid": "1", "gid": "1", "chroot_base": "/"}, `setting "chroot_base"`},
		{map[string]string{"jailer": "/nonexistent/jailer", "uid": "1", "gid": "1"}, `setting "jailer": exec: "/nonexistent/jailer"`},
		{map[string]string{"uid": "1"}, `setting "uid": only meaningful with "jailer"`},
		{map[string]string{"chroot_base": base}, `setting "chroot_base": only meaningful with "jailer"`},
		{map[string]string{"chroot": base}, `unknown setting "chroot" (known: binary, chroot_base, gid, jailer, uid)`},
	} {
		err := d.Configure(tc.settings)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.settings, err, tc.want)
		}
		if j, u, _, _ := d.Jailer(); j != jailerBinary || u != 123 {
			t.Errorf("%v: a rejected block changed the jailer to %s uid %d", tc.settings, j, u)
		}
	}
	if err := d.Configure(map[string]string{"jailer": "jailer", "uid": "0", "gid": "0", "chroot_base": base + "/"}); err == nil {
		// "jailer" on PATH is only found on a host that has one; either way base is cleaned
		if _, _, _, b := d.Jailer(); b != base {
			t.Errorf("chroot_base %s/: got %s, want it cleaned", base, b)
		}
	}
	if err := d.Configure(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if j, _, _, _ := d.Jailer(); j != "" {
		t.Errorf("a block without jailer left the jailer %s configured", j)
	}
}

// TestConfigureChrootBaseThroughSymlink: a chroot_base reached through a symlink is resolved
// when the driver is configured (also with a tail that does not exist yet), so the paths the
// driver compares with a jailed VMM's /proc/PID/root carry no symlink; a dangling symlink is
// refused naming the setting.
func TestConfigureChrootBaseThroughSymlink(t *testing.T) {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	realDir := filepath.Join(tmp, "real")
	if err := os.Mkdir(realDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(realDir, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tmp, "nothing"), filepath.Join(tmp, "dangling")); err != nil {
		t.Fatal(err)
	}
	d := New(Options{StateDir: t.TempDir()})
	for _, tc := range []struct{ base, want string }{
		{link, realDir},
		{link + "/jails/", filepath.Join(realDir, "jails")},
		{filepath.Join(tmp, "new", "jails"), filepath.Join(tmp, "new", "jails")},
		{realDir, realDir},
	} {
		if err := d.Configure(map[string]string{"jailer": jailerBinary, "uid": "1", "gid": "1", "chroot_base": tc.base}); err != nil {
			t.Fatalf("chroot_base %s: %v", tc.base, err)
		}
		if _, _, _, b := d.Jailer(); b != tc.want {
			t.Errorf("chroot_base %s: got %s, want %s", tc.base, b, tc.want)
		}
	}
	err = d.Configure(map[string]string{"jailer": jailerBinary, "uid": "1", "gid": "1", "chroot_base": filepath.Join(tmp, "dangling", "jails")})
	if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), `setting "chroot_base"`) || !strings.Contains(err.Error(), "symlink to nothing") {
		t.Errorf("chroot_base through a dangling symlink: got %v, want a chroot_base setting error", err)
	}
}

// procIDs reads the real uid and gid of pid from /proc/PID/status.
func procIDs(t *testing.T, pid int) (uid, gid string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "Uid:" {
			uid = strings.Join(f[1:5], " ")
		}
		if len(f) >= 5 && f[0] == "Gid:" {
			gid = strings.Join(f[1:5], " ")
		}
	}
	return uid, gid
}

// processesUnder lists the processes whose command line or root names a path under dir.
func processesUnder(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		root, _ := os.Readlink("/proc/" + e.Name() + "/root")
		if strings.Contains(string(cmd), dir+"/") || strings.HasPrefix(root, dir+"/") {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}

// waitNoProcessesUnder waits (a generous bound, not a speed target) until no process names
// dir: the guest helper ends when it sees its VMM's end close, just after the VMM is killed.
func waitNoProcessesUnder(dir string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := processesUnder(dir)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left under %s: %v", dir, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJailedNode runs a node's VMM under the jailer stand-in: it runs as uid:gid chrooted in
// BASE/firecracker/NAME/root, the driver names every file by its path inside the chroot, the
// guest answers exec, a reset restores the snapshot into a new jail, and delete leaves no jail,
// process or TAP. A jail directory sysbox did not make is refused and left alone.
func TestJailedNode(t *testing.T) {
	base := stateDir(t)
	// Registered before newKernelEnv's scrub, so it runs after it: whatever happened, no
	// process of the test's jails outlives it.
	t.Cleanup(func() {
		if err := waitNoProcessesUnder(base); err != nil {
			t.Error(err)
		}
	})
	e := newKernelEnv(t)
	must(t, e.d.Configure(map[string]string{"binary": simBinary, "jailer": jailerBinary,
		"uid": strconv.Itoa(testUID), "gid": strconv.Itoa(testGID), "chroot_base": base}))
	ctx := context.Background()
	o1 := e.owner("vm")
	h1 := e.startedNode(t, o1, nil, substrate.Owner{}, "198.18.9.10")
	r1, err := e.d.readRecord(h1.ExternalID)
	must(t, err)
	root1 := filepath.Join(base, "firecracker", h1.ExternalID, "root")
	if r1.Jail == nil || r1.Jail.root(r1.Name) != root1 || r1.Socket != filepath.Join(root1, apiSock) || r1.Rootfs != filepath.Join(root1, rootfsFile) {
		t.Fatalf("record: jail %+v socket %s rootfs %s; want the layout under %s", r1.Jail, r1.Socket, r1.Rootfs, root1)
	}
	want := fmt.Sprintf("%d %d %d %d", testUID, testUID, testUID, testUID)
	wantG := fmt.Sprintf("%d %d %d %d", testGID, testGID, testGID, testGID)
	if uid, gid := procIDs(t, r1.PID); uid != want || gid != wantG {
		t.Fatalf("VMM pid %d: Uid %q Gid %q; want %q %q", r1.PID, uid, gid, want, wantG)
	}
	if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", r1.PID)); err != nil || root != root1 {
		t.Fatalf("VMM pid %d: root %q, %v; want %s", r1.PID, root, err, root1)
	}
	if fi, err := os.Stat(r1.Rootfs); err != nil || !ownedBy(fi, testUID, testGID) {
		t.Fatalf("rootfs copy %s: %v; want it owned by %d:%d", r1.Rootfs, err, testUID, testGID)
	}
	link, err := netlink.LinkByName(r1.NICs["eth0"].TAP)
	must(t, err)
	if tap, ok := link.(*netlink.Tuntap); !ok || tap.Owner != testUID || tap.Group != testGID {
		t.Fatalf("TAP %s: %+v; want a tap owned by %d:%d", r1.NICs["eth0"].TAP, link, testUID, testGID)
	}
	// Every path the VMM was given is its path inside the chroot.
	paths := map[string]string{}
	for _, r := range e.requests(t) {
		if r.Status >= 300 {
			t.Errorf("the VMM refused %s %s: %s", r.Method, r.Path, r.Fault)
		}
		var body map[string]any
		_ = json.Unmarshal(r.Body, &body)
		for _, k := range []string{"kernel_image_path", "path_on_host", "uds_path", "snapshot_path", "mem_file_path"} {
			if v, ok := body[k].(string); ok {
				paths[k] = v
			}
		}
	}
	for k, v := range map[string]string{"kernel_image_path": "/vmlinux", "path_on_host": "/rootfs.img", "uds_path": "/v.sock",
		"snapshot_path": "/snapshot/vm.snap", "mem_file_path": "/snapshot/mem"} {
		if paths[k] != v {
			t.Errorf("%s: the VMM got %q, want %q", k, paths[k], v)
		}
	}
	e.guestHas(t, h1, "198.18.9.10")

	// Reset: a new generation in a new jail, restored from generation 1's snapshot.
	before := len(e.requests(t))
	o2 := gen(o1, 2)
	h2 := e.startedNode(t, o2, &h1, o1, "198.18.9.10")
	if got := strings.Join(e.ops(t, before), "\n"); !strings.Contains(got, "PUT /snapshot/load") || strings.Contains(got, "refused") {
		t.Fatalf("jailed reset requests:\n%s\nwant an accepted snapshot load", got)
	}
	e.guestHas(t, h2, "198.18.9.10")
	r2, err := e.d.readRecord(h2.ExternalID)
	must(t, err)
	if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", r2.PID)); err != nil || root != r2.Jail.root(r2.Name) {
		t.Fatalf("generation 2 VMM: root %q, %v; want %s", root, err, r2.Jail.root(r2.Name))
	}
	must(t, e.d.DeleteNode(ctx, h1, o1))
	if _, err := os.Stat(r1.Jail.dir(r1.Name)); !os.IsNotExist(err) {
		t.Fatalf("generation 1's jail after delete: %v; want it gone", err)
	}
	must(t, e.d.DeleteNode(ctx, h2, o2))
	must(t, waitNoProcessesUnder(base))
	for _, r := range []nodeRecord{r1, r2} {
		if _, err := os.Stat(r.Jail.dir(r.Name)); !os.IsNotExist(err) {
			t.Errorf("jail %s after delete: %v; want it gone", r.Jail.dir(r.Name), err)
		}
		for _, tap := range r.taps() {
			if _, err := netlink.LinkByName(tap); err == nil {
				t.Errorf("TAP %s left after delete", tap)
			}
		}
	}
	objs, err := e.d.Residue(ctx, e.topo)
	if err != nil || len(objs) != 0 {
		t.Fatalf("residue after delete: %s, %v; want none", describeObjs(objs), err)
	}

	// A jail directory at a node's name that sysbox did not make: refused, untouched.
	o3 := e.owner("other")
	foreign := filepath.Join(base, "firecracker", NodeName(o3))
	must(t, os.MkdirAll(filepath.Join(foreign, "root"), 0o755))
	must(t, os.WriteFile(filepath.Join(foreign, "root", "keep"), []byte("not sysbox's"), 0o644))
	if _, err := e.d.CreateNode(ctx, e.art.spec(o3)); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("CreateNode over a foreign jail: got %v, want ErrNotOwned", err)
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "root", "keep")); err != nil || string(b) != "not sysbox's" {
		t.Fatalf("the foreign jail was touched: %q, %v", b, err)
	}
	if objs, err := e.d.Residue(ctx, e.topo); err != nil || len(objs) != 1 || objs[0].Kind != "firecracker-vm" {
		// the refused create left its node directory (the record is the proof of ownership)
		t.Fatalf("residue after the refused create: %s, %v; want only its node record", describeObjs(objs), err)
	}
	h3 := substrate.Handle{Driver: Name, ExternalID: NodeName(o3)}
	must(t, e.d.DeleteNode(ctx, h3, o3))
	if _, err := os.Stat(filepath.Join(foreign, "root", "keep")); err != nil {
		t.Fatalf("deleting the node removed the foreign jail: %v", err)
	}
}

func ownedBy(fi os.FileInfo, uid, gid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid && int(st.Gid) == gid
}

// The kernel goes into the chroot as a hard link when world-readable, else as a copy (a link
// would share, and a chown change, the artifact itself).
func TestPlaceKernel(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		link bool
	}{{0o644, true}, {0o600, false}} {
		src, dst := filepath.Join(dir, "vmlinux-"+tc.mode.String()), filepath.Join(dir, "root-"+tc.mode.String())
		must(t, os.WriteFile(src, []byte("\x7fELF kernel"), tc.mode))
		must(t, os.Chmod(src, tc.mode))
		must(t, placeKernel(src, dst, fileOwner{}))
		must(t, placeKernel(src, dst, fileOwner{})) // again, as every spawn does
		sfi, err := os.Stat(src)
		must(t, err)
		dfi, err := os.Stat(dst)
		must(t, err)
		b, err := os.ReadFile(dst)
		if err != nil || string(b) != "\x7fELF kernel" || os.SameFile(sfi, dfi) != tc.link {
			t.Errorf("mode %v: %q, %v, same file %v; want the kernel, linked %v", tc.mode, b, err, os.SameFile(sfi, dfi), tc.link)
		}
	}
}
