// Package substrate holds the neutral data types that cross the boundary between the sysbox
// runtime and its drivers: specs the runtime hands to a driver, handles and observations it gets
// back, ownership markers, and the opaque provider-private envelope.
//
// It holds data only: no registry, no driver selection, no I/O. The runtime never looks inside an
// Envelope; only the driver that wrote it decodes it (S7). Secret values appear here only as the
// plaintext an execution-scoped resolver produced for one call, and drivers must not persist them.
package substrate
