// Package driver defines the capabilities a sysbox driver may implement, one small interface
// each, and the Registry through which the runtime reaches them (S6).
//
// Invariants: the runtime imports no concrete driver; it asks a Registry instance for a
// capability by driver name. A driver's Descriptor declares its capabilities and Register
// checks that the driver really implements each one. A missing capability is a typed error
// naming the driver and capability, found at planning time before any mutation. Every
// destructive method re-checks ownership markers and returns an error wrapping ErrNotOwned on a
// mismatch or incomplete evidence, leaving the object in place.
package driver
