package sysbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestUIListenLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:8081", true},
		{"[::1]:0", true},
		{"0.0.0.0:8081", false},
		{":8081", false},
		{"192.0.2.1:8081", false},
		{"localhost:8081", false}, // a name may resolve anywhere: an IP is required
		{"127.0.0.1", false},
	} {
		if err := checkLoopback(tc.listen); (err == nil) != tc.ok {
			t.Errorf("--listen %s: got error %v, want ok %v", tc.listen, err, tc.ok)
		}
	}
}

// TestUILoaderReadsWhileLocked: the loader joins configuration and the local state file while
// another process holds the state lock (an apply in progress), and a broken configuration
// still shows what state records, with the error.
func TestUILoaderReadsWhileLocked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	hcl := `substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "client" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.10/24"]
  }
}
`
	file := filepath.Join(dir, "main.sysbox.hcl")
	if err := os.WriteFile(file, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := local.New(filepath.Join(dir, ".sysbox", "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Lock(ctx, backend.LockInfo{Operation: "apply"}); err != nil {
		t.Fatal(err)
	}
	lan, err := addrs.ParseInstance("sysbox_network.lan")
	if err != nil {
		t.Fatal(err)
	}
	st := states.New()
	st.Serial = 1
	st.Set(&states.Resource{Addr: lan, SchemaVersion: 1, Driver: "netns", ExternalID: "sbx-lan",
		Observation: states.Observation{Status: substrate.Present},
		Owner:       substrate.Owner{Topology: st.Lineage, Address: lan.String(), Type: "sysbox_network", Generation: 4}})
	if err := holder.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}

	a := &App{Env: &Env{LookupEnv: lookupIn(nil)}, ChDir: dir}
	vf := &varFlags{}
	l, err := a.loadTopology(vf)
	if err != nil || l.diags.HasErrors() {
		t.Fatalf("load: %v %v", err, l.diags)
	}
	be, err := a.openConfiguredBackend(ctx, l.top.Substrate.Backend)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	load := a.uiLoader(vf, be)
	g, err := load(ctx)
	if err != nil {
		t.Fatalf("load graph while the state is locked: %v", err)
	}
	got := map[string]string{}
	for _, e := range g.Elements {
		got[e.Address] = fmt.Sprintf("%s/%s/%d", e.Observation, e.Diff, e.Generation)
	}
	want := map[string]string{"sysbox_network.lan": "present//4", "sysbox_node.client": "absent/config-only/0"}
	if !cmp.Equal(got, want) || g.Serial != 1 || len(g.Edges) != 1 {
		t.Fatalf("graph: got %v serial %d edges %+v, want %v serial 1 and the client's attachment", got, g.Serial, g.Edges, want)
	}

	if err := os.WriteFile(file, []byte(hcl+"resource \"sysbox_network\" {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err = load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Error, "configuration: ") || len(g.Elements) != 1 || g.Elements[0].Address != "sysbox_network.lan" {
		t.Fatalf("broken configuration: got error %q elements %+v, want the error and the state's network", g.Error, g.Elements)
	}
}
