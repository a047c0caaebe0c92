package firecracker

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// simBinary is the contract-checking stand-in for the firecracker executable (fcsim), built
// once for the package's tests, with the guest agent (sysbox-guest) beside it: the simulator
// runs that agent as its guest. jailerBinary is the jailer stand-in beside them. All are
// static (CGO_ENABLED=0): the jailer runs the simulator inside a chroot without a libc.
var simBinary, jailerBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sysbox-fcsim-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.Setenv("CGO_ENABLED", "0")
	}
	if err == nil {
		simBinary = filepath.Join(dir, "firecracker")
		err = testenv.GoBuild("zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/firecracker", simBinary)
	}
	if err == nil {
		err = testenv.GoBuild("zyvor.dev/sysbox/cmd/sysbox-guest", filepath.Join(dir, "sysbox-guest"))
	}
	if err == nil {
		jailerBinary = filepath.Join(dir, "jailer")
		err = testenv.GoBuild("zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/jailer", jailerBinary)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
