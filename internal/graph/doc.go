// Package graph is the dependency graph of resource instances (requirement S4): references and
// depends_on edges, cycle reports naming the cycle's addresses, topological create order and
// reversed destroy order, and a parallel walk with bounded parallelism for the executor.
//
// Invariants:
//   - Nodes are canonical addresses; an edge A → B means A depends on B (B is created first and
//     destroyed last).
//   - Orders are deterministic: among nodes that are ready at the same time, the smaller
//     address (addrs.Instance.Less) comes first.
//   - Building, ordering and walking are linear in nodes + edges (plus a log factor for the
//     deterministic ready queue); nothing is quadratic.
//   - Walk calls fn for a node only after fn returned nil for every node it depends on; a
//     failed node's dependents are never called, and are reported as skipped.
package graph
