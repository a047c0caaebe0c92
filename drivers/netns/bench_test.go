package netns

import (
	"context"
	"fmt"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// BenchmarkNodeLifecycle measures one node's full life through the driver: create, attach to a
// bridge with an address, configure, start `sleep infinity`, detach, delete. Root only; see
// bench/netns for the side-by-side comparison with an iproute2 script.
func BenchmarkNodeLifecycle(b *testing.B) {
	testenv.RequireRoot(b)
	l := &lab{d: New()}
	l.topology = fmt.Sprintf("bench-%d", b.N)
	ctx := context.Background()
	netOwner := substrate.Owner{Topology: l.topology, Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1}
	nh, err := l.d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ScrubTopology(ctx, l.d, l.topology) })
	b.ResetTimer()
	for i := range b.N {
		o := substrate.Owner{Topology: l.topology, Address: fmt.Sprintf("sysbox_node.n[%d]", i), Type: "sysbox_node", Generation: 1}
		spec := substrate.NodeSpec{Owner: o, Command: []string{"sleep", "infinity"}}
		h, err := l.d.CreateNode(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		st, err := l.d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "lan", Network: nh, IPv4: []string{"198.18.0.2/24"}})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{st}, nil); err != nil {
			b.Fatal(err)
		}
		if err := l.d.StartNode(ctx, h, spec); err != nil {
			b.Fatal(err)
		}
		if err := l.d.Detach(ctx, h, st, o); err != nil {
			b.Fatal(err)
		}
		if err := l.d.DeleteNode(ctx, h, o); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := l.d.DeleteNetwork(ctx, nh, netOwner); err != nil {
		b.Fatal(err)
	}
}
