// Package secrets holds sysbox's secret references and the boundary where they become plaintext
// (requirement S17).
//
// Invariants:
//   - Before execution a secret is only ever a reference, secret://env/NAME. Configuration,
//     plans, state, checkpoints, API payloads, events and logs hold references or the redacted
//     placeholder, never plaintext.
//   - Plaintext is produced only by a Resolver, which the executor creates for one run and calls
//     right before the provider operation that needs the value; a missing value is an error
//     (ErrMissing), never an empty string.
//   - A Redactor knows every plaintext resolved in its scope and removes it, and its common
//     encodings (base64, hex, JSON-escaped), from text before that text is logged or stored.
package secrets
