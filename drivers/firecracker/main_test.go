package firecracker

import (
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// simBinary is the contract-checking stand-in for the firecracker executable (fcsim), built
// once for the package's tests.
var simBinary string

func TestMain(m *testing.M) {
	testenv.MainWithBinary(m, &simBinary, "zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/firecracker")
}
