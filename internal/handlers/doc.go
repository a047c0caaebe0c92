// Package handlers holds one handler per sysbox resource type (requirement S2): sysbox_artifact,
// sysbox_network, sysbox_node, sysbox_firewall and sysbox_router. A handler owns its type's
// schema (an hcldec spec), decoding into a typed stored form, validation, dependency
// extraction, diff (which attribute changes force replacement, which are in place, which have
// no effect), what a dependency's change means for it, and the driver capabilities each action
// needs. Graph and planner never guess behaviour from string fields.
//
// Invariants:
//   - Registries are instances (NewRegistry / Builtin); nothing here is global mutable state.
//   - Decode is pure: it reads only the evaluated value and the source ranges it is handed.
//   - Stored forms marshal to JSON objects with stable key order (encoding/json of structs and
//     maps), so equal configurations have byte-equal stored forms.
//   - Policy input is IPv4 only; IPv6 is a validation error, never silently dropped (S9).
package handlers
