package sysbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConfigDrivers: destroy's residue audit asks the drivers the configuration uses — its
// resources' drivers (after defaults) and the drivers its substrate block declares — and no
// other, so an unreachable dockerd does not fail destroy of a netns-only lab.
func TestConfigDrivers(t *testing.T) {
	for _, tc := range []struct {
		name string
		hcl  string // "" uses examples/lab-small
		want []string
	}{
		{name: "lab-small", want: []string{"netns", "nftables"}},
		{name: "declared only", hcl: `substrate "local" {
  driver "docker" {}
  backend "local" { path = ".sysbox/state" }
}
`, want: []string{"docker"}},
		{name: "resource defaults without a substrate block", hcl: `resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
`, want: []string{"netns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.hcl == "" {
				dir = copyDir(t, "../../../examples/lab-small")
			} else {
				dir = t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(tc.hcl), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			a := &App{Env: &Env{LookupEnv: lookupIn([]string{"WEB_TOKEN=x"})}, ChDir: dir}
			l, err := a.loadTopology(&varFlags{})
			if err != nil {
				t.Fatal(err)
			}
			if l.diags.HasErrors() {
				t.Fatalf("load: %v", l.diags)
			}
			if got := configDrivers(l.top); !cmp.Equal(got, tc.want) {
				t.Fatalf("configDrivers: got %v, want %v", got, tc.want)
			}
		})
	}
}
