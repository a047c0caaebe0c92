package firecracker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/feature"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The real-binary tier's inputs (environment).
const (
	envReal       = "SYSBOX_TEST_FIRECRACKER_REAL"   // "1": a missing input fails instead of skipping
	envRealBinary = "SYSBOX_TEST_FIRECRACKER_BINARY" // default: firecracker on PATH
	envRealKernel = "SYSBOX_TEST_FIRECRACKER_KERNEL" // an ELF vmlinux built for Firecracker
)

// realInputs finds the real firecracker binary, a usable /dev/kvm and a Firecracker guest
// kernel, or says which is missing as a feature.NotSupportedError.
func realInputs() (bin, kernel string, err error) {
	notSupported := func(format string, args ...any) error {
		return &feature.NotSupportedError{Feature: "real Firecracker tier", Reason: fmt.Sprintf(format, args...)}
	}
	bin = os.Getenv(envRealBinary)
	if bin == "" {
		if bin, err = exec.LookPath("firecracker"); err != nil {
			return "", "", notSupported("no firecracker binary (PATH or %s)", envRealBinary)
		}
	} else if _, err := os.Stat(bin); err != nil {
		return "", "", notSupported("%s=%s: %v", envRealBinary, bin, err)
	}
	// A simulator from this tree is not the real thing.
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "Firecracker v") {
		return "", "", notSupported("%s --version does not say Firecracker: %q, %v", bin, out, err)
	}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", notSupported("/dev/kvm: %v", err)
	}
	unix.Close(fd)
	kernel = os.Getenv(envRealKernel)
	if kernel == "" {
		return "", "", notSupported("no guest kernel built for Firecracker (%s; Debian's kernel has virtio as modules and no virtio-mmio command-line devices, see scripts/guest-image)", envRealKernel)
	}
	if _, err := os.Stat(kernel); err != nil {
		return "", "", notSupported("%s=%s: %v", envRealKernel, kernel, err)
	}
	return bin, kernel, nil
}

// TestRealFirecracker boots scripts/guest-image's rootfs on the real firecracker with a guest
// kernel built for it, and runs a command through the agent over the real vsock. Whether KVM
// boots guests is probed by booting: a guest whose agent does not answer is a skip saying so,
// unless the tier was opted into. This host has neither the binary nor a KVM that boots
// (HOST-NOTES), so here it skips with the reason.
func TestRealFirecracker(t *testing.T) {
	bin, kernel, err := realInputs()
	testenv.OptIn(t, envReal, err)
	testenv.RequireRoot(t)
	img := testenv.GuestImage(t)
	d := New(Options{Binary: bin, StateDir: stateDir(t), ReadyTimeout: 60 * time.Second})
	rootfs := filepath.Join(img, "rootfs.ext4")
	spec := substrate.NodeSpec{Owner: substrate.Owner{Topology: "real-" + filepath.Base(stateDir(t)), Address: "sysbox_node.vm", Type: "sysbox_node", Generation: 1},
		Driver: Name, CPUs: 1, MemoryMB: 256,
		Artifact: &substrate.ArtifactIdentity{Kind: "rootfs", Source: rootfs, Digest: fileDigest(t, rootfs)},
		Kernel:   &substrate.ArtifactIdentity{Kind: "kernel", Source: kernel, Digest: fileDigest(t, kernel)}}
	t.Cleanup(func() { scrub(t, d, spec.Owner.Topology) })
	ctx := context.Background()
	h, err := d.CreateNode(ctx, spec)
	must(t, err)
	err = d.StartNode(ctx, h, spec)
	if err != nil && os.Getenv(envReal) != "1" {
		testenv.OptIn(t, envReal, fmt.Errorf("%w: %v", &feature.NotSupportedError{Feature: "KVM that boots Firecracker guests", Reason: "the guest's agent did not answer"}, err))
	}
	must(t, err)
	res, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"uname", "-r"}, Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the real guest: %+v, %v", res, err)
	}
	must(t, d.DeleteNode(ctx, h, spec.Owner))
	if objs, err := d.Residue(ctx, spec.Owner.Topology); err != nil || len(objs) > 0 {
		t.Fatalf("residue: %v, %v", objs, err)
	}
}
