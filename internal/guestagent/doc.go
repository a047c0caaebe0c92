// Package guestagent speaks the subset of the QEMU guest agent protocol (QGA) that sysbox uses:
// guest-sync, guest-sync-delimited, guest-ping, guest-info, guest-exec, guest-exec-status and
// guest-network-get-interfaces. It holds the wire types, a client over a one-method Transport
// (libvirt's agent command API is one; Stream, newline-delimited JSON over a net.Conn, is the
// other), and the server side that cmd/sysbox-guest runs inside a guest.
//
// Invariants:
//   - A reply is trusted only if it is one JSON object holding exactly one of "return" or "error"
//     (plus an optional "id"); anything else is refused with ErrMalformed, never half-read.
//   - A Stream resynchronises with guest-sync-delimited (the 0xFF sentinel and a fresh id) before
//     its first command and after any error, so a stale or partial reply is never taken for the
//     answer to a later request.
//   - The server runs argv only (no shell unless the caller names one) and bounds captured output.
//
// It imports only the standard library and golang.org/x/sys, so the guest binary stays small and
// links nothing of the sysbox runtime.
package guestagent
