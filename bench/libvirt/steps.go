package main

import (
	"time"

	"zyvor.dev/sysbox/drivers/libvirt"
)

// withSteps has the driver report its steps to rec. A separate file so that a comparison run
// can build this benchmark against a driver without Options.OnStep by replacing it with one
// returning o unchanged.
func withSteps(o libvirt.Options, rec func(addr, step string, took time.Duration)) libvirt.Options {
	o.OnStep = rec
	return o
}
