// Package fcsim is a stand-in for the Firecracker VMM's API, for tests only: it serves the API a
// `firecracker --api-sock PATH --id ID` process serves, checks every request against the
// published contract (firecracker-api.yaml, Swagger 2.0 v1.17, converted to OpenAPI 3 and
// validated with kin-openapi's openapi3filter, every object schema closed as Firecracker's
// deny_unknown_fields closes them), and then against the VMM's state machine:
//
//   - pre-boot-only resources (machine-config, boot-source, drives, network-interfaces, vsock,
//     and the other PUTs the contract marks "Pre-boot only") are refused once the guest started
//     or was restored;
//   - InstanceStart is refused without a boot source and a root drive, and a second time;
//   - a network interface is refused when its host_dev_name is not an existing TAP, and at
//     start when the TAP vanished;
//   - the path id must equal the body id; one root drive; host files must open;
//   - PATCH /vm needs a started guest; /snapshot/create needs state Paused;
//   - /snapshot/load is accepted only by a fresh process (nothing but logger/metrics configured)
//     and restores into Paused (Running with resume_vm), applying network_overrides and
//     vsock_override to the snapshot's devices.
//
// The command (cmd/firecracker) adds the VMM's device side: it opens the TAPs, serves the vsock
// uds_path handshake, and runs the guest: sysbox-guest in its own network namespace, with one
// TAP per interface there and frames pumped between host and guest TAPs. cmd/jailer is a
// stand-in for Firecracker's jailer (chroot, uid/gid, netns) that execs that command jailed,
// with a privileged guest helper for the simulated guest (see cmd/firecracker/helper.go).
//
// Every request is logged as one JSON line (Entry) so tests can assert the exact sequence a
// driver sent. The package never links into a release binary: only tests and the command under
// cmd/firecracker import it.
package fcsim
