package ui

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// quickstart evaluates examples/quickstart, the topology the README shows in the view.
func quickstart(t testing.TB) *config.Topology {
	t.Helper()
	mod, src, diags := config.Load(filepath.Join("..", "..", "examples", "quickstart"))
	if diags.HasErrors() {
		t.Fatalf("load quickstart: %v", diags)
	}
	top, diags := config.Evaluate(mod, src, config.Options{Schemas: handlers.Builtin()})
	if diags.HasErrors() {
		t.Fatalf("evaluate quickstart: %v", diags)
	}
	return top
}

func mustAddr(t testing.TB, s string) addrs.Instance {
	t.Helper()
	a, err := addrs.ParseInstance(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// applied returns a state recording every quickstart resource as present, generation gen.
func applied(t testing.TB, top *config.Topology, gen uint64) *states.State {
	t.Helper()
	st := states.New()
	st.Serial = 1
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, r := range top.Resources {
		res := &states.Resource{Addr: r.Addr, Driver: "netns", ExternalID: "sbx-" + r.Addr.Resource.Name,
			Observation: states.Observation{Status: substrate.Present, At: at},
			Owner:       substrate.Owner{Topology: st.Lineage, Address: r.Addr.String(), Type: r.Addr.Resource.Type, Generation: gen},
			Attributes:  json.RawMessage(`{"name":"` + r.Addr.Resource.Name + `"}`)}
		if c, ok := r.Config.(handlers.NodeConfig); ok {
			for name, a := range c.Attachments {
				res.Attachments = append(res.Attachments, substrate.AttachmentState{Name: name, MAC: a.MAC, IPv4: a.IPv4,
					Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(`{"veth":"PRIVATE-VETH-NAME"}`)}})
			}
			res.Private = &substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(`{"pid":1234,"token":"PRIVATE-TOKEN"}`)}
		}
		st.Set(res)
	}
	return st
}

func element(t testing.TB, g *Graph, addr string) Element {
	t.Helper()
	for _, e := range g.Elements {
		if e.Address == addr {
			return e
		}
	}
	t.Fatalf("no element %s in graph", addr)
	return Element{}
}

func edge(g *Graph, id string) (Edge, bool) {
	for _, e := range g.Edges {
		if e.ID == id {
			return e, true
		}
	}
	return Edge{}, false
}

func TestBuildConfigOnly(t *testing.T) {
	g := Build(quickstart(t), nil)
	want := map[string]string{
		"sysbox_firewall.server": KindFirewall, "sysbox_network.dmz": KindNetwork, "sysbox_network.lan": KindNetwork,
		"sysbox_node.client": KindNode, "sysbox_node.router": KindNode, "sysbox_node.server": KindNode, "sysbox_router.edge": KindRouter,
	}
	if len(g.Elements) != len(want) {
		t.Fatalf("got %d elements, want %d: %+v", len(g.Elements), len(want), g.Elements)
	}
	for _, e := range g.Elements {
		if want[e.Address] != e.Kind {
			t.Errorf("%s: got kind %q, want %q", e.Address, e.Kind, want[e.Address])
		}
		if e.Observation != "absent" || e.Diff != DiffConfigOnly || !e.InConfig || e.InState {
			t.Errorf("%s: got observation %q diff %q in_config %v in_state %v, want absent, config-only, true, false",
				e.Address, e.Observation, e.Diff, e.InConfig, e.InState)
		}
	}
	if d := element(t, g, "sysbox_node.client").Driver; d != "netns" {
		t.Errorf("client driver: got %q, want netns", d)
	}
	if n := element(t, g, "sysbox_firewall.server").Node; n != "sysbox_node.server" {
		t.Errorf("firewall node: got %q, want sysbox_node.server", n)
	}
	e, ok := edge(g, "att:sysbox_node.router:dmz")
	if !ok || e.Target != "sysbox_network.dmz" || e.Label != "dmz 203.0.113.1/24" || e.Kind != EdgeAttachment {
		t.Errorf("router dmz attachment: got %+v (found %v), want target sysbox_network.dmz label %q", e, ok, "dmz 203.0.113.1/24")
	}
	if _, ok := edge(g, "dep:sysbox_firewall.server:sysbox_node.server"); !ok {
		t.Errorf("no dependency edge firewall → node: %+v", g.Edges)
	}
	// The attachment already connects node and network: no second, dependency edge.
	if _, ok := edge(g, "dep:sysbox_node.client:sysbox_network.lan"); ok {
		t.Errorf("duplicate dependency edge client → lan beside its attachment")
	}
}

func TestBuildJoinsState(t *testing.T) {
	top := quickstart(t)
	st := applied(t, top, 3)
	client := st.Resource(mustAddr(t, "sysbox_node.client"))
	client.Observation = states.Observation{Status: substrate.Drifted, Reason: "process gone", At: client.Observation.At}
	st.Set(&states.Resource{Addr: mustAddr(t, "sysbox_node.old"), Driver: "docker", Observation: states.Observation{Status: substrate.Present},
		Attributes: json.RawMessage(`{}`)})
	st.Set(&states.Resource{Addr: mustAddr(t, "sysbox_firewall.old"), Driver: "nftables",
		Attributes: json.RawMessage(`{"node":"sysbox_node.old"}`)})
	g := Build(top, st)

	srv := element(t, g, "sysbox_node.server")
	if srv.Observation != "present" || srv.Diff != "" || srv.Generation != 3 || srv.ExternalID != "sbx-server" || srv.ObservedAt == nil {
		t.Errorf("server: got %+v, want present, no diff, generation 3, external id sbx-server, observed", srv)
	}
	if srv.Private == nil || srv.Private.Driver != "netns" || srv.Private.Bytes != len(`{"pid":1234,"token":"PRIVATE-TOKEN"}`) {
		t.Errorf("server private: got %+v, want netns envelope reduced to its size", srv.Private)
	}
	if c := element(t, g, "sysbox_node.client"); c.Observation != "drifted" || c.Diff != DiffDrifted || c.Reason != "process gone" {
		t.Errorf("client: got observation %q diff %q reason %q, want drifted, drifted, process gone", c.Observation, c.Diff, c.Reason)
	}
	if o := element(t, g, "sysbox_node.old"); o.Diff != DiffStateOnly || o.InConfig || o.Driver != "docker" {
		t.Errorf("old node: got %+v, want state-only docker node", o)
	}
	// Not observed yet: unknown, never an empty status.
	if f := element(t, g, "sysbox_firewall.old"); f.Observation != "unknown" || f.Node != "sysbox_node.old" {
		t.Errorf("old firewall: got observation %q node %q, want unknown on sysbox_node.old", f.Observation, f.Node)
	}
	if g.Serial != 1 || g.Lineage != st.Lineage {
		t.Errorf("got serial %d lineage %q, want 1 %q", g.Serial, g.Lineage, st.Lineage)
	}
	if e, ok := edge(g, "att:sysbox_node.server:dmz"); !ok || e.Label != "dmz 203.0.113.10/24" {
		t.Errorf("server attachment from state: got %+v (found %v)", e, ok)
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"PRIVATE-TOKEN", "PRIVATE-VETH-NAME"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("graph JSON carries private envelope content %q", secret)
		}
	}
}

func TestBuildEmpty(t *testing.T) {
	b, err := json.Marshal(Build(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"serial":0,"elements":[],"edges":[]}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
