// Package states holds sysbox's durable topology state (requirements S7, S12) and its on-disk
// format.
//
// A State is identified by a lineage (a UUID fixed when the state is created) and versioned by a
// serial that grows by one with every saved change. It holds one Resource per canonical
// address (addrs.Instance) and the topology's non-secret outputs.
//
// Invariants:
//   - The runtime never decodes a resource's provider-private Envelope (or an attachment's):
//     states stores and copies it as opaque bytes.
//   - Observation is one of present, absent, drifted, degraded, unknown; anything else is refused
//     when a state is decoded.
//   - Timestamps are UTC.
//   - Encode is deterministic: resources sorted by canonical address, one resource per line,
//     outputs sorted by name, so two saves of equal states are byte-identical and diffs are
//     readable.
//   - Decode checks the format version first and refuses an unknown one (*UnsupportedVersionError)
//     before reading anything else; it verifies the checksum (a torn or edited file is refused
//     with an error wrapping durable.ErrCorrupt, never half-trusted); and it refuses a state whose
//     managed resources lack the identity or ownership the current schema requires
//     (*IncompatibleStateError) — all before any caller can mutate anything.
//   - Secrets never appear here: attributes are public by contract (handlers store references
//     such as secret://env/NAME, never plaintext), outputs are non-secret.
package states
