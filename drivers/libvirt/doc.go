// Package libvirt is the sysbox driver named "libvirt": nodes are libvirt/QEMU domains on
// qemu:///system, reached through github.com/digitalocean/go-libvirt; domain XML is built and read
// only through libvirt.org/go/libvirtxml.
//
// Invariants:
//
//   - The domain type is chosen once per driver by a probe: "kvm" only where /dev/kvm can run a
//     stock guest, else "qemu" (TCG). A host whose KVM is KVM_PVM (it answers but hangs a stock
//     kernel) is TCG. The mode is part of the driver's Version ("…+qemu" / "…+kvm"), so it is in
//     every plan's driver fingerprint and a plan made under another mode is stale.
//   - Artifacts (kinds qcow2, rootfs, kernel) are copied once into a content-addressed store
//     (StateDir/store/<sha256>) and made read-only; the digest is the sha256 of the source bytes
//     (for a kernel directory: of its vmlinux and initrd.img, see ResolveArtifact). Every node
//     generation boots from its own qcow2 overlay backed by the stored baseline: never a copy, never
//     a write to the baseline. The baseline is re-verified before a reset.
//   - Every domain carries a sysbox <metadata> element (topology, address, type, generation and the
//     substrate marker). Every destructive call looks the domain up by UUID and compares that
//     metadata with the owner it was given first; a mismatch or missing metadata is
//     driver.ErrNotOwned and touches nothing. A domain's name is never proof: a foreign domain
//     holding the name sysbox would choose is left alone.
//   - Each attachment is a persistent TAP device created with netlink by sysbox, carrying the
//     attachment owner's marker as its link alias, enslaved to the network's Linux bridge (the
//     bridges netns and docker nodes use), and handed to the domain as <interface type='ethernet'>
//     with <target dev=… managed='no'/> and the declared MAC. Deleting a node deletes its taps
//     after checking their markers.
//   - The guest is reached only through the QEMU guest agent on the org.qemu.guest_agent.0
//     virtio-serial channel, driven through libvirt's agent command API (libvirtd owns that
//     socket): readiness is guest-ping answering, Exec is guest-exec/guest-exec-status, guest
//     network configuration is guest-network-get-interfaces plus guest-exec of `ip`.
//   - An unreachable libvirtd is driver.ErrUnavailable and observation status unknown, never
//     absent.
//   - NodeSpec.Environment and ExecRequest.Env reach the guest agent for that call only; they are
//     never written to domain XML, a handle, an error or a log line.
package libvirt
