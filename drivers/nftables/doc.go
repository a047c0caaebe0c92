// Package nftables is the sysbox Policy driver (name "nftables", S9): a sysbox_firewall or
// sysbox_router becomes one topology-owned nftables table of family ip inside the node's
// network namespace, built with github.com/google/nftables (no `nft` binary).
//
// Invariants:
//   - One table per policy resource, named "sysbox_<12 hex of the owner>". ApplyPolicy deletes
//     (if present) and re-adds the whole table in ONE netlink batch, so the kernel swaps it
//     atomically; then it reads the table back and compares its canonical form with what it
//     meant to install. Apply is complete only when they match.
//   - Ownership: the table holds a regular (unhooked) chain "owner" whose single rule carries the
//     owner marker as its comment. Apply replaces a table only when that marker names the same
//     resource; Delete only when it equals the owner exactly; otherwise driver.ErrNotOwned.
//   - Drift: ObservePolicy renders the declared policy against the node's current devices and
//     compares canonical forms (chains, hooks, priorities, policies, rule expressions) with what
//     the kernel holds; packet and byte counters are zeroed first. Any edit is Drifted.
//   - Devices: logical attachments are resolved at execution time to the interface inside the
//     node carrying the attachment's MAC. Node namespaces come from the node's driver through
//     linuxnet.NamespaceResolver, looked up in the registry by the node handle's driver name.
//   - Firewalls are stateful (ct state established,related accept first; loopback accepted);
//     defaults apply to new flows. Routers also turn on net.ipv4.ip_forward in the namespace.
//     IPv4 only: IPv6 input is an error.
package nftables
