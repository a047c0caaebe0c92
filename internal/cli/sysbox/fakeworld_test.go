package sysbox

import (
	"strings"
	"testing"
)

// The package's own tests drive the CLI in process against the fake world.
func init() { testDriversEnabled = true }

func TestFakeWorldRefusedOutsideTestBuilds(t *testing.T) {
	testDriversEnabled = false
	defer func() { testDriversEnabled = true }()
	lookup := func(k string) (string, bool) {
		if k == EnvTestFakeWorld {
			return t.TempDir() + "/world.json", true
		}
		return "", false
	}
	_, err := DriverRegistry(lookup)
	if err == nil || !strings.Contains(err.Error(), "not a test build") {
		t.Fatalf("got %v, want a refusal naming the missing test build", err)
	}
}
