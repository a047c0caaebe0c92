package executor

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"zyvor.dev/sysbox/internal/handlers"
)

// TestAliasesReachEveryNodeOnTheNetwork: every node gets the aliases of all attachments on its
// networks before it starts; deleting a node removes its alias from the neighbours that stay
// (which this run does not otherwise touch).
func TestAliasesReachEveryNodeOnTheNetwork(t *testing.T) {
	h := newHarness(t)
	desired := topology(1, 3, false)
	for i := range desired {
		if n := desired[i].Node; n != nil {
			at := &n.Attachments[0]
			at.Aliases = []string{fmt.Sprintf("host%d", i-2)}
			// The handler's attributes, as a plan stores them: the deleted node's networks
			// are read back from state.
			attrs, err := json.Marshal(handlers.NodeConfig{Driver: "fake", Command: n.Spec.Command, Attachments: map[string]*handlers.Attachment{
				at.Name: {Network: at.Network.String(), IPv4: at.IPv4, MAC: at.MAC, Aliases: at.Aliases}}})
			if err != nil {
				t.Fatal(err)
			}
			desired[i].Attributes = attrs
		}
	}
	h.mustApply(desired)
	hostsOf := func() map[string][]string {
		out := map[string][]string{}
		st := h.state()
		for _, r := range st.Resources {
			if n := h.fake.World().Nodes[r.ExternalID]; n != nil {
				var names []string
				for _, ns := range n.Hosts {
					names = append(names, ns...)
				}
				slices.Sort(names)
				out[r.Addr.String()] = names
			}
		}
		return out
	}
	for addr, names := range hostsOf() {
		if want := []string{"host0", "host1", "host2"}; !slices.Equal(names, want) {
			t.Errorf("%s resolves %v, want %v", addr, names, want)
		}
	}
	h.mustApply(desired[:len(desired)-1]) // sysbox_node.web[2] deleted
	got := hostsOf()
	if len(got) != 2 {
		t.Fatalf("nodes after the delete: %v", got)
	}
	for addr, names := range got {
		if want := []string{"host0", "host1"}; !slices.Equal(names, want) {
			t.Errorf("after deleting web[2]: %s resolves %v, want %v", addr, names, want)
		}
	}
}
