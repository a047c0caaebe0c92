// Package drivertest holds the driver conformance suite and test doubles for code that asks
// the driver registry about capabilities (the planner and the CLI).
//
// The suite (Run, one group of cases per capability) is what makes a driver a sysbox driver:
// create/observe/delete with ownership checked on every destructive call, a foreign object
// holding the driver's chosen name left alone, Unknown (never Absent) when the backend is
// unreachable, reset keeping addresses while changing the external id, and an audit that finds
// what is left. Every driver package runs it at its own tier (the fake in unit tests, netns and
// nftables in kernel tests, docker in daemon tests) through a Harness that says how to reach
// around the driver. Check runs it with a recording T so that tests can prove it fails on
// deliberately broken drivers.
package drivertest

import (
	"slices"
	"sort"

	"zyvor.dev/sysbox/internal/driver"
)

// Version is the version every driver described by Caps reports.
const Version = "test-1"

// Caps is a capability registry for tests: driver name → declared capabilities. It implements
// plans.CapabilityChecker.
type Caps map[string][]driver.Capability

// Require returns a *driver.MissingCapabilityError when driver name is not in f or lacks one
// of caps, like (*driver.Registry).Require.
func (f Caps) Require(address, name string, caps ...driver.Capability) error {
	have, ok := f[name]
	if !ok {
		return &driver.MissingCapabilityError{Address: address, Driver: name, Known: []string{"netns", "nftables"}}
	}
	for _, c := range caps {
		if !slices.Contains(have, c) {
			return &driver.MissingCapabilityError{Address: address, Driver: name, Capability: c}
		}
	}
	return nil
}

// Descriptors describes the drivers in f, sorted by name, each at Version.
func (f Caps) Descriptors() []driver.Descriptor {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]driver.Descriptor, 0, len(names))
	for _, n := range names {
		out = append(out, driver.Descriptor{Name: n, Version: Version, Capabilities: f[n]})
	}
	return out
}
