// Package addrs defines sysbox's canonical resource addresses (requirement S3).
//
// One textual form is used everywhere — graph, plan, state, checkpoint, CLI, API and logs:
//
//	sysbox_node.web
//	sysbox_node.web[0]
//	sysbox_node.web["blue"]
//	data.sysbox_artifact.kernel
//	module.lab.sysbox_network.dmz
//	module.segment["red"].sysbox_node.target[1]
//
// Invariants:
//   - Addresses are immutable values. Constructors copy the slices they are given, and methods
//     that derive a new address never share backing arrays with the receiver.
//   - Module path and instance keys stay structured; they are never flattened into a name.
//   - String keys are rendered with JSON quoting (without HTML escaping); integer keys in decimal.
//   - ParseX(x.String()) returns a value Equal to x for every valid x. Malformed text is rejected
//     with an error naming the byte offset and what was expected, before it reaches state or a
//     provider.
//   - Less is a total order consistent with Equal; UniqueKey is a comparable map key that is equal
//     for two addresses exactly when Equal is true.
package addrs
