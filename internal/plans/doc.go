// Package plans turns an evaluated topology and prior state into one ordered action list
// (requirement S10), and stores plans so that apply can prove nothing changed since (S11).
//
// Invariants:
//   - Planning is pure: Plan reads only the evaluated topology, the PriorState, the Facts and
//     the capability registry handed to it. It performs no I/O.
//   - Every action carries its canonical address, an explicit reason and the schema-owned
//     diff of its handler. A dependency's change affects a dependent only as the dependent's
//     handler decides (DependencyChanged); there is no automatic cascade.
//   - Observation unknown yields action unknown (never replace); a plan holding an unknown
//     action cannot be applied.
//   - lifecycle.prevent_destroy on an instance the plan would delete or replace makes planning
//     fail with the address and the reason; no partial plan is returned.
//   - The action list order: deletions of resources no longer configured come first, in
//     reverse dependency order of the prior state; then every configured instance in
//     topological (create) order. Apply runs the delete half of delete and replace actions in
//     reverse list order, then the create half in list order.
//   - A stored plan is a versioned, checksummed record (internal/durable) that binds the exact
//     HCL bytes digest, the evaluated non-secret input digest, state lineage and serial, schema
//     versions, driver identities and capability contract, artifact digests and the ordered
//     actions. Verify reports each difference as its own *StaleError.
//   - No plaintext secret and no provider-private payload is ever part of a plan: secrets are
//     secret://env/NAME references, and prior state enters only as public attributes.
package plans
