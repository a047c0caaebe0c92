// Package firecracker is sysbox's microVM driver (name "firecracker"): a node is one Firecracker
// VMM process, driven through the official API over its unix socket (contract:
// internal/fcsim/firecracker-api.yaml, Swagger 2.0 v1.17) by the small client in this package;
// an attachment is a TAP device on the network's sysbox bridge.
//
// Capabilities: artifact (local rootfs images and kernels, by sha256), node-lifecycle, nic,
// node-state, reset, audit, guest-exec.
//
// Invariants:
//   - Names: a node generation is "fc-<10 hex of the owner>-g<generation>" (its directory under
//     the state directory, the VMM's --id, the handle's external id); a TAP is "sbf<12 hex>"
//     over (owner, attachment, generation). Names are derived, never proof.
//   - Ownership: the node directory's durable, checksummed record (node.json) carries the owner
//     marker, the VMM's pid and start time and its socket; every TAP carries the marker in its
//     alias. Every destructive call compares the marker first (driver.ErrNotOwned otherwise),
//     and a process is signalled only when /proc/PID still has the recorded start time and a
//     command line serving exactly the node's socket: a foreign firecracker is never touched.
//     A TAP name is written to the record as pending before the TAP is created, so a crash in
//     between leaves an unmarked TAP this node alone may adopt; an unmarked link that held the
//     name before is refused.
//   - The API client validates every request against the contract's rules before sending
//     (driver.ErrInvalid naming the field); a refusal carries the API's fault_message.
//   - Order: CreateNode starts the VMM and sends machine-config, boot-source and the root drive;
//     Attach creates the TAP and sends the network interface (pre-boot only: Firecracker has no
//     NIC hotplug, so attaching to a booted guest is feature.ErrNotSupported);
//     ConfigureGuestNetwork records the guest network; StartNode sends the vsock device and
//     InstanceStart, then waits for the guest agent (sysbox-guest, vsock port AgentPort through
//     the uds_path CONNECT handshake) and applies the recorded network through it, on every
//     boot. Exec goes through the same agent.
//   - Disks: the rootfs artifact is an immutable baseline opened read-only; each generation
//     boots its own sparse copy, checked against the resolved digest while copying
//     (driver.ErrDigestMismatch). The kernel is only read.
//   - The runtime sees only the handle; socket, pid, start time, generation and paths live in
//     the private envelope and the record (S7).
package firecracker
