package linuxnet

import (
	"context"

	"zyvor.dev/sysbox/pkg/substrate"
)

// NamespaceResolver is implemented by node drivers whose nodes own a Linux network namespace
// (netns, docker). The nftables policy driver finds a node's namespace through it at execution
// time, given the node's handle, without knowing the node driver.
type NamespaceResolver interface {
	NodeNetns(ctx context.Context, node substrate.Handle) (Netns, error)
}
