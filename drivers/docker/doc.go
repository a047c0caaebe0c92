// Package docker is the sysbox driver named "docker": nodes are Docker containers, artifacts are
// images loaded from local archives, and networking is wired from the host side.
//
// Invariants:
//
//   - Artifacts come only from local archives (docker-archive or OCI layout tarballs for kind
//     oci_image, a root filesystem tarball for kind rootfs); no registry is ever contacted. An
//     artifact's immutable digest is the sha256 of the archive bytes; the loaded image id is its
//     Ref. The loaded image is also tagged sysbox-artifact:<hex digest>, which is how a later
//     resolve or VerifyArtifact ties a daemon image to archive content.
//   - Every container carries ownership labels (topology, address, type, generation and the
//     substrate marker). Every destructive call compares the labels of the container id it acts
//     on with the owner it was given first; a mismatch or missing label returns an error
//     wrapping driver.ErrNotOwned and touches nothing. A container's name is never proof. Labels
//     cannot change on an existing container and ids are never reused, so the labels of an id
//     are read once per driver (its create, an inspect, or one list of the topology's
//     containers) and later checks of that id use them (owners.go).
//   - Containers run with network mode "none". Each attachment is a veth pair created from the
//     host: the host side is enslaved to the network's Linux bridge (Handle.ExternalID), the peer
//     is created inside the container's network namespace (/proc/PID/ns/net). Both ends carry the
//     attachment's marker as their link alias. Addresses and routes are set from the host through
//     a netlink handle bound to that namespace, so containers need no capabilities.
//   - A container's network namespace exists only while it runs, so Attach starts a created
//     container (StartNode afterwards is a no-op). A restarted container has a new namespace and
//     loses its NICs: ObserveAttachment then reports the attachment absent. The wiring calls
//     after a start (configure, hosts, start again) use the pid seen running for as long as
//     /proc/PID/cgroup names the container (live.go); observations always inspect.
//   - An unreachable daemon is driver.ErrUnavailable and observation status unknown, never absent.
//   - NodeSpec.Environment and ExecRequest.Env are handed to the daemon for that call only; they
//     are never written to a handle, envelope, label, error or log line.
//
// Import rule (S22): a container is adopted only when its labels already prove ownership: the
// dev.zyvor.sysbox.topology, .address, .type and .generation labels equal the importing owner's
// (the runtime imports as generation 1); a .marker label, if present, must agree. Docker cannot
// add labels to an existing container, so the container must have been created with them (the
// refusal prints the exact --label flags). Its network mode must be "none". Anything less is
// incomplete evidence and the import fails with driver.ErrNotOwned, touching nothing.
package docker
