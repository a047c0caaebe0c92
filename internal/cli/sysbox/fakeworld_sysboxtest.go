//go:build sysboxtest

package sysbox

// Test builds (go build -tags sysboxtest) honour SYSBOX_TEST_FAKE_WORLD.
func init() { testDriversEnabled = true }
