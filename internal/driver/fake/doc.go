// Package fake is an in-memory sysbox driver that implements every capability, for tests of
// the executor, recovery, reset and the CLI, and for benchmarks.
//
// The fake behaves like a careful real driver:
//   - every object it creates carries the full ownership anchors (substrate.Owner) as its marker;
//     every destructive call compares the caller's Owner with the marker and refuses with an
//     error wrapping driver.ErrNotOwned on mismatch or incomplete evidence, touching nothing;
//   - creation is idempotent on the complete Owner: creating again for an Owner whose object
//     already exists returns that object (this is what lets recovery adopt an object created just
//     before a crash whose handle never reached the checkpoint);
//   - observation returns Unknown (with an error wrapping driver.ErrUnavailable) when the fake is
//     made unavailable; it never reports Absent for something it cannot see.
//
// The world can be persisted to a file (atomically, after every mutation) so that it survives a
// process killed with SIGKILL: crash tests kill the process at a failpoint and a new process
// reopens the same world. Failpoints make any method fail with an error, report the driver as
// unavailable, or kill the process (SIGKILL, no deferred code runs) before or after its
// mutation; they are set in code or through the SYSBOX_FAKE_FAILPOINTS environment variable.
//
// Secret plaintext handed to the fake (node environment, exec environment) is kept only in
// memory for the test to inspect and is never written to the world file.
package fake
