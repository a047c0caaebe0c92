// Package guestvm is the guest-agent glue the VM drivers (libvirt, firecracker) share: how a
// node's attachments and routes become the guest network configuration, how an ExecRequest
// becomes guest-exec and its status an ExecResult, and the readiness poll. Each driver keeps its
// own transport (libvirt's agent command API, a vsock stream) and its own error wording.
//
// Invariants:
//   - Network input is checked before anything reaches a guest: IPv4 addresses with a prefix
//     length, IPv4 gateways and next hops, IPv4 route destinations; a bad one is
//     driver.ErrInvalid naming the attachment or route.
//   - ExecRequest.Env reaches the guest-exec request only (sorted, so that the request is
//     deterministic); it is never put into an error.
//   - It imports only pkg/substrate, internal/driver and internal/guestagent (internal/archtest),
//     so both drivers can use it without importing each other.
package guestvm
