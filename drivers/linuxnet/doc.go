// Package linuxnet holds the Linux bridge, veth and addressing helpers that any node driver
// (netns, docker, ...) uses to wire a node's network namespace to a Linux bridge in the host
// namespace.
//
// Invariants:
//   - Every object it creates carries an ownership marker (substrate.Owner.Marker) in its link
//     alias (or, for the host-coexistence nftables rule, in the rule's comment). A destructive
//     call first reads that marker and compares it with the owner the caller holds; a missing,
//     foreign or incomplete marker returns an error wrapping driver.ErrNotOwned and touches
//     nothing. A name is never proof of ownership.
//   - Creation is idempotent for the same owner: an existing object carrying exactly the
//     caller's marker is adopted (crash recovery re-runs creation), anything else with the same
//     name is refused.
//   - It never shells out: links and addresses go through netlink (vishvananda/netlink), the
//     forward-accept rule through nftables netlink (google/nftables).
//   - Namespace switches happen on a locked OS thread that is discarded if switching back fails.
package linuxnet
