// Package backendtest is the conformance suite every state backend must pass (S13): read,
// compare-and-swap, locking with holder info, lock-timeout waits, force-unlock, snapshots,
// deletion, and the same guarantees between two real processes (the test binary re-executes
// itself as a child).
//
// A backend's test package calls Main from TestMain (so that child processes run their role
// instead of the tests) and Run from a test.
package backendtest
