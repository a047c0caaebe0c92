//go:build sysboxtest

package sysbox

import (
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
)

// Test builds (go build -tags sysboxtest) honour SYSBOX_TEST_FAKE_WORLD; only they link the fake.
func init() { testRegistry = fakeWorld }

func fakeWorld(world string, names []string) (*driver.Registry, error) {
	return fake.StandIn(world, names...)
}
