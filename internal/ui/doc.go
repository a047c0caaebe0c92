// Package ui serves `sysbox ui`: the live topology of a configuration and its state as a
// graph page, as JSON (/api/graph) and as Server-Sent Events (/events).
//
// Invariants: the server only reads (configuration and state, never under the state lock for
// writing); it listens where it is told (the CLI allows loopback only); no private envelope or
// secret value reaches the page: elements carry the state's public attributes and private
// envelopes only as driver, version and size, as `sysbox state show` prints them; a run's
// checkpoint records only as number, time, address, action and step. The graph
// library is embedded (assets/, built by web/build.sh from a lockfile): nothing is fetched at
// run time.
package ui
