// Package netns is sysbox's embedded default driver (name "netns"): a node is a named Linux
// network namespace, bind-mounted under /run/netns exactly like `ip netns add` does, with its
// main process (the node's command) running inside it; a managed network is a Linux bridge in
// the host namespace; an attachment is a veth pair from that bridge into the node.
//
// Capabilities: managed-network, node-lifecycle, nic, node-state, guest-exec, reset, import,
// audit.
//
// Invariants:
//   - Names: a node's namespace is "sb-<10 hex of the owner>-g<generation>", a bridge
//     "sbr<12 hex>", a host-side veth "sv<13 hex>" over (owner, attachment, generation). Names
//     are derived, never proof.
//   - Ownership: the namespace's own loopback link carries the owner marker in its alias (the
//     marker lives inside the object it proves), every bridge and veth end carries it in its
//     alias, and a sidecar record /run/sysbox/netns/NAME.json (durable, checksummed) holds the
//     marker and the main process identity. Every destructive call compares the loopback marker
//     (or link alias) with the owner it is given and refuses with driver.ErrNotOwned otherwise.
//   - The main process is started detached (setsid, stdio to /run/sysbox/netns/NAME.log) inside
//     the namespace; it is "alive" only if /proc/PID still has the recorded start time and its
//     network namespace inode equals the node's. A dead or replaced process is Degraded.
//   - Finding the processes inside a namespace (before deleting it) reads every process's
//     network namespace: through a BPF task iterator when the kernel offers one, else /proc.
//     A caller gets only a scan that started after it asked; a process is signalled only after
//     its namespace is checked again through a pidfd.
//   - A node with a hosts file runs its processes in a mount namespace copied from a template
//     (the host's mounts as slaves, without the namespaces directory), never from the host's
//     own: a copy of the host's would carry, and keep receiving, every node's namespace mount.
//   - No shelling out: netlink for links and addresses, setns on a locked OS thread for
//     starting processes inside a namespace.
//   - Secrets: NodeSpec.Environment and ExecRequest.Env reach only the child's environment;
//     nothing here writes them to disk or logs.
package netns
