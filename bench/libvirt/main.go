// Command libvirtbench compares the libvirt driver with plain virsh on the same guest image
// (scripts/guest-image: direct kernel boot, an overlay of disk.qcow2, the sysbox-guest agent),
// TCG, one round at a time, and prints ours, the peer's and the ratio (ours / peer) for:
//
//   - cold boot to agent ready: CreateNode + StartNode vs `virsh define` + `virsh start` + polling
//     `virsh qemu-agent-command guest-ping`;
//
//   - reset, cold path: NewGeneration + StartNode (snapshots off) vs destroy + undefine + a new
//     overlay + define + start + ping;
//
//   - reset, snapshot path: NewGeneration + StartNode restored from the node's snapshot vs
//     `virsh restore` of a save image + ping (the peer's save is taken outside the timing, ours
//     at the node's first start, also outside);
//
//   - 4 VMs created and started in parallel vs 1 (ours against ours; the peer's the same), each
//     timed until all of them are deleted again; the time until the last agent answered (the
//     apply's part) is printed beside it.
//
// The reset lines end when the new generation's agent answers. What `sysbox reset` does after
// that (its step 8: stop and delete the prior generation) is timed separately and printed
// beside them; the peer's cold reset destroys its old domain first, inside its time.
//
//	go run ./bench/libvirt -image /tmp/sysbox-test-all/guest-image -rounds 3
//
// -lines picks lines (boot, reset-cold, reset-snap, parallel, virsh-parallel). Beside each
// timing it prints the driver's own steps (Options.OnStep) and the CPU time (utime+stime from
// /proc) the guests' QEMU processes used until their agents answered, which bounds what
// parallel boots can gain on this host's cores; and the load average before and after.
//
// Needs root, a running libvirtd (qemu:///system), virsh and qemu-img. Everything it creates is
// removed at the end, also on failure. Never uses domain type kvm.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/drivers/libvirt"
	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/pkg/substrate"
)

func main() {
	image := flag.String("image", "/tmp/sysbox-test-all/guest-image", "scripts/guest-image output directory")
	rounds := flag.Int("rounds", 3, "rounds of each (the median is reported)")
	par := flag.Int("parallel", 4, "VMs for the parallel line")
	only := flag.String("lines", "", "comma-separated lines to run (boot, reset-cold, reset-snap, parallel, virsh-parallel); empty: all")
	flag.Parse()
	if err := run(*image, *rounds, *par, *only); err != nil {
		fmt.Fprintln(os.Stderr, "libvirtbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	image, dir, topo string
	disk, kernel     substrate.ArtifactIdentity
	cold, snap       *libvirt.Driver
	peers            []string // virsh domains to remove at the end
	mu               sync.Mutex
	steps            map[string][]string // node address → "step 1.23s" in order (OnStep)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func run(image string, rounds, par int, only string) error {
	ctx := context.Background()
	b := &bench{image: image, topo: "libvirtbench-" + randHex(4), steps: map[string][]string{}}
	fmt.Printf("load average at start: %s\n", loadavg())
	defer func() { fmt.Printf("load average at end: %s\n", loadavg()) }()
	if err := os.MkdirAll("/var/tmp/sysbox-libvirt-bench", 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("/var/tmp/sysbox-libvirt-bench", "run-")
	if err != nil {
		return err
	}
	b.dir = dir
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // QEMU runs as libvirt-qemu
		return err
	}
	if b.cold, err = libvirt.New(withSteps(libvirt.Options{StateDir: filepath.Join(dir, "cold"), DomainType: libvirt.TypeQEMU, NoSnapshot: true}, b.step)); err != nil {
		return err
	}
	defer b.cold.Close()
	if b.snap, err = libvirt.New(withSteps(libvirt.Options{StateDir: filepath.Join(dir, "snap"), DomainType: libvirt.TypeQEMU}, b.step)); err != nil {
		return err
	}
	defer b.snap.Close()
	defer b.cleanup()
	if b.disk, err = b.cold.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: libvirt.KindQCOW2, Source: filepath.Join(image, "disk.qcow2")}); err != nil {
		return err
	}
	if b.kernel, err = b.cold.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: libvirt.KindKernel, Source: image}); err != nil {
		return err
	}
	if _, err := b.snap.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: libvirt.KindQCOW2, Source: filepath.Join(image, "disk.qcow2")}); err != nil {
		return err
	}
	if _, err := b.snap.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: libvirt.KindKernel, Source: image}); err != nil {
		return err
	}
	lines := []struct {
		key, name  string
		ours, peer func(ctx context.Context, r int) (time.Duration, error)
	}{
		{"boot", "cold boot to agent ready", b.oursBoot, b.peerBoot},
		{"reset-cold", "reset, cold path", b.oursResetCold, b.peerResetCold},
		{"reset-snap", "reset, snapshot path", b.oursResetSnap, b.peerRestore},
		// These two compare n in parallel ("ours") with 1 ("peer") on the same side.
		{"parallel", fmt.Sprintf("driver: %d VMs in parallel vs 1", par), b.oursParallel(par), b.oursParallel(1)},
		{"virsh-parallel", fmt.Sprintf("virsh: %d VMs in parallel vs 1", par), b.peerParallel(par), b.peerParallel(1)},
	}
	want := map[string]bool{}
	for _, k := range strings.Split(only, ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}
	for _, l := range lines {
		if len(want) > 0 && !want[l.key] {
			continue
		}
		var os_, ps, rs []float64
		for r := 0; r < rounds; r++ {
			o, err := l.ours(ctx, r)
			if err != nil {
				return fmt.Errorf("%s: ours: %w", l.name, err)
			}
			p, err := l.peer(ctx, r)
			if err != nil {
				return fmt.Errorf("%s: peer: %w", l.name, err)
			}
			os_, ps, rs = append(os_, o.Seconds()), append(ps, p.Seconds()), append(rs, o.Seconds()/p.Seconds())
			fmt.Printf("round %d %s: ours %.2fs peer %.2fs ratio %.2f\n", r+1, l.name, o.Seconds(), p.Seconds(), o.Seconds()/p.Seconds())
		}
		fmt.Printf("median %s: ours %.2fs peer %.2fs ratio %.2f\n", l.name, median(os_), median(ps), median(rs))
	}
	return nil
}

// step records one driver step (Options.OnStep).
func (b *bench) step(addr, name string, took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.steps[addr] = append(b.steps[addr], fmt.Sprintf("%s %.2fs", name, took.Seconds()))
}

// printSteps prints and forgets the steps recorded for addr.
func (b *bench) printSteps(what, addr string) {
	b.mu.Lock()
	s := b.steps[addr]
	delete(b.steps, addr)
	b.mu.Unlock()
	if len(s) > 0 {
		fmt.Printf("  steps %s: %s\n", what, strings.Join(s, ", "))
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// qemuCPU is the CPU time (user + system) domain name's QEMU process has used so far.
func qemuCPU(name string) (time.Duration, error) {
	pid, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", name+".pid"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		return 0, fmt.Errorf("pid file of domain %s: %w", name, err)
	}
	st, err := procfs.ReadStat(n)
	if err != nil {
		return 0, fmt.Errorf("domain %s: %w", name, err)
	}
	return time.Duration(st.UTime+st.STime) * time.Second / procfs.ClockTicks, nil
}

// domainOf is the libvirt domain name of our node h.
func (b *bench) domainOf(ctx context.Context, d *libvirt.Driver, h substrate.Handle, o substrate.Owner) string {
	obs, err := d.ObserveNode(ctx, h, o)
	if err != nil {
		return ""
	}
	return obs.Attributes["name"]
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func (b *bench) owner(addr string, gen uint64) substrate.Owner {
	return substrate.Owner{Topology: b.topo, Address: addr, Type: "sysbox_node", Generation: gen}
}

func (b *bench) spec(o substrate.Owner) substrate.NodeSpec {
	disk, kernel := b.disk, b.kernel
	return substrate.NodeSpec{Owner: o, Driver: libvirt.Name, Artifact: &disk, Kernel: &kernel, MemoryMB: 256,
		Command: []string{"console=ttyS0", "panic=-1", "quiet"}}
}

// up creates and starts o's node on d, returning the handle.
func (b *bench) up(ctx context.Context, d *libvirt.Driver, o substrate.Owner) (substrate.Handle, error) {
	h, err := d.CreateNode(ctx, b.spec(o))
	if err != nil {
		return h, err
	}
	return h, d.StartNode(ctx, h, b.spec(o))
}

func (b *bench) oursBoot(ctx context.Context, r int) (time.Duration, error) {
	o := b.owner(fmt.Sprintf("sysbox_node.boot%d", r), 1)
	t0 := time.Now()
	h, err := b.up(ctx, b.cold, o)
	el := time.Since(t0)
	b.printSteps("boot", o.Address)
	if err == nil {
		if cpu, cerr := qemuCPU(b.domainOf(ctx, b.cold, h, o)); cerr == nil {
			fmt.Printf("  cpu boot: qemu %.2fs in %.2fs wall\n", cpu.Seconds(), el.Seconds())
		}
	}
	if derr := b.cold.DeleteNode(ctx, h, o); err == nil {
		err = derr
	}
	return el, err
}

// reset times NewGeneration + StartNode of the node's next generation on d (after one
// untimed generation), then deletes both.
func (b *bench) reset(ctx context.Context, d *libvirt.Driver, addr, want string) (time.Duration, error) {
	o1 := b.owner(addr, 1)
	h1, err := b.up(ctx, d, o1)
	if err != nil {
		return 0, err
	}
	b.printSteps("untimed first generation", addr)
	o2 := b.owner(addr, 2)
	prior := b.domainOf(ctx, d, h1, o1)
	cpu0, cerr := qemuCPU(prior)
	t0 := time.Now()
	h2, err := d.NewGeneration(ctx, h1, o1, b.spec(o2))
	if err == nil {
		err = d.StartNode(ctx, h2, b.spec(o2))
	}
	el := time.Since(t0)
	b.printSteps("reset", addr)
	if cpu1, cerr2 := qemuCPU(prior); cerr == nil && cerr2 == nil {
		fmt.Printf("  cpu reset: the prior generation's qemu used %.2fs meanwhile\n", (cpu1 - cpu0).Seconds())
	}
	if err == nil {
		if cpu, cerr := qemuCPU(b.domainOf(ctx, d, h2, o2)); cerr == nil {
			fmt.Printf("  cpu reset: the new generation's qemu %.2fs in %.2fs wall\n", cpu.Seconds(), el.Seconds())
		}
	}
	// What `sysbox reset` does next and its caller waits for (executor step 8, removeNode of the prior generation):
	// stop and delete the prior generation. Not in the line's time (which ends when the new
	// generation answers); printed beside it.
	t1 := time.Now()
	rerr := errors.Join(d.StopNode(ctx, h1, o1), d.DeleteNode(ctx, h1, o1))
	rm := time.Since(t1)
	if err == nil && rerr == nil {
		fmt.Printf("  removal of the prior generation (StopNode + DeleteNode): %.2fs; reset with it %.2fs\n", rm.Seconds(), (el + rm).Seconds())
	}
	err = errors.Join(err, rerr)
	if obs, oerr := d.ObserveNode(ctx, h2, o2); oerr == nil && !strings.HasPrefix(obs.Attributes["started_from"], want) {
		err = errors.Join(err, fmt.Errorf("generation 2 started_from %q, want %s", obs.Attributes["started_from"], want))
	}
	return el, errors.Join(err, d.DeleteNode(ctx, h2, o2))
}

func (b *bench) oursResetCold(ctx context.Context, r int) (time.Duration, error) {
	return b.reset(ctx, b.cold, fmt.Sprintf("sysbox_node.cold%d", r), "cold")
}

func (b *bench) oursResetSnap(ctx context.Context, r int) (time.Duration, error) {
	return b.reset(ctx, b.snap, fmt.Sprintf("sysbox_node.snap%d", r), "snapshot")
}

// parallel times n calls of one (each bringing a VM up and down) run at once.
func parallel(n int, one func(i int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = one(i)
		}(i)
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// oursParallel brings n nodes up and down at once. It prints the CPU time their QEMU
// processes used until their agents answered (summed) and each node's steps.
func (b *bench) oursParallel(n int) func(ctx context.Context, r int) (time.Duration, error) {
	return func(ctx context.Context, r int) (time.Duration, error) {
		var mu sync.Mutex
		var cpu time.Duration
		var ready []float64
		t0 := time.Now()
		el, err := parallel(n, func(i int) error {
			o := b.owner(fmt.Sprintf("sysbox_node.par%d_%d_%d", n, r, i), 1)
			h, err := b.up(ctx, b.cold, o)
			if err == nil {
				c, cerr := qemuCPU(b.domainOf(ctx, b.cold, h, o))
				mu.Lock()
				ready = append(ready, time.Since(t0).Seconds())
				cpu += c
				err = cerr
				mu.Unlock()
			}
			return errors.Join(err, b.cold.DeleteNode(ctx, h, o))
		})
		sort.Float64s(ready)
		fmt.Printf("  cpu %d in parallel: qemu %.2fs in all until ready (%.2fs per VM), agents ready after %.2f s, all down after %.2fs\n",
			n, cpu.Seconds(), cpu.Seconds()/float64(n), ready, el.Seconds())
		if len(ready) == n {
			// The apply's part (create + start until the agent answers), without the deletes.
			fmt.Printf("  apply %d in parallel: the last agent answered after %.2fs\n", n, ready[n-1])
		}
		for i := 0; i < n; i++ {
			b.printSteps(fmt.Sprintf("%d in parallel, #%d", n, i), fmt.Sprintf("sysbox_node.par%d_%d_%d", n, r, i))
		}
		return el, err
	}
}

// --- the peer: virsh on a hand-written domain of the same shape ---

func virsh(args ...string) error {
	out, err := exec.Command("virsh", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// peerDomain writes an overlay and defines domain name on it.
func (b *bench) peerDomain(name string) error {
	ov := filepath.Join(b.dir, name+".qcow2")
	_ = os.Remove(ov)
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", filepath.Join(b.image, "disk.qcow2"), ov).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img: %v: %s", err, out)
	}
	x := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>256</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='pc'>hvm</type><kernel>%s/vmlinux</kernel><initrd>%s/initrd.img</initrd>
<cmdline>console=ttyS0 root=/dev/vda rw panic=-1 quiet</cmdline></os><features><acpi/></features>
<devices><disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='vda' bus='virtio'/></disk>
<serial type='file'><source path='%s/%s.log'/><target port='0'/></serial>
<channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
<memballoon model='none'/></devices></domain>`, name, b.image, b.image, ov, b.dir, name)
	p := filepath.Join(b.dir, name+".xml")
	if err := os.WriteFile(p, []byte(x), 0o644); err != nil {
		return err
	}
	b.mu.Lock()
	b.peers = append(b.peers, name)
	b.mu.Unlock()
	return virsh("define", p)
}

func ping(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 180*time.Second)
	defer cancel()
	for {
		if exec.Command("virsh", "qemu-agent-command", name, `{"execute":"guest-ping"}`).Run() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("domain %s: agent did not answer", name)
		case <-time.After(250 * time.Millisecond): // the driver polls at the same interval
		}
	}
}

func (b *bench) peerUp(ctx context.Context, name string) error {
	if err := b.peerDomain(name); err != nil {
		return err
	}
	if err := virsh("start", name); err != nil {
		return err
	}
	return ping(ctx, name)
}

func peerDown(name string) error {
	_ = virsh("destroy", name)
	return virsh("undefine", name)
}

func (b *bench) peerBoot(ctx context.Context, r int) (time.Duration, error) {
	name := fmt.Sprintf("%s-boot%d", b.topo, r)
	t0 := time.Now()
	err := b.peerUp(ctx, name)
	el := time.Since(t0)
	return el, errors.Join(err, peerDown(name))
}

func (b *bench) peerResetCold(ctx context.Context, r int) (time.Duration, error) {
	name := fmt.Sprintf("%s-cold%d", b.topo, r)
	if err := b.peerUp(ctx, name); err != nil {
		return 0, errors.Join(err, peerDown(name))
	}
	t0 := time.Now()
	err := peerDown(name)
	if err == nil {
		err = b.peerUp(ctx, name)
	}
	el := time.Since(t0)
	return el, errors.Join(err, peerDown(name))
}

func (b *bench) peerRestore(ctx context.Context, r int) (time.Duration, error) {
	name := fmt.Sprintf("%s-snap%d", b.topo, r)
	if err := b.peerUp(ctx, name); err != nil {
		return 0, errors.Join(err, peerDown(name))
	}
	save := filepath.Join(b.dir, name+".save")
	if err := virsh("save", name, save); err != nil {
		return 0, errors.Join(err, peerDown(name))
	}
	defer os.Remove(save)
	t0 := time.Now()
	err := virsh("restore", save)
	if err == nil {
		err = ping(ctx, name)
	}
	el := time.Since(t0)
	return el, errors.Join(err, peerDown(name))
}

func (b *bench) peerParallel(n int) func(ctx context.Context, r int) (time.Duration, error) {
	return func(ctx context.Context, r int) (time.Duration, error) {
		return parallel(n, func(i int) error {
			name := fmt.Sprintf("%s-par%d-%d-%d", b.topo, n, r, i)
			return errors.Join(b.peerUp(ctx, name), peerDown(name))
		})
	}
}

// cleanup removes whatever a failed run left: the peer's domains and our nodes' domains.
func (b *bench) cleanup() {
	for _, n := range b.peers {
		_ = exec.Command("virsh", "destroy", n).Run()
		_ = exec.Command("virsh", "undefine", n).Run()
	}
	ctx := context.Background()
	for _, d := range []*libvirt.Driver{b.cold, b.snap} {
		left, _ := d.Residue(ctx, b.topo)
		for _, o := range left {
			if o.Kind != "domain" {
				continue
			}
			name := strings.Fields(o.ExternalID)[0]
			_ = exec.Command("virsh", "destroy", name).Run()
			_ = exec.Command("virsh", "undefine", name).Run()
		}
	}
}
