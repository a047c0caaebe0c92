// Package controlplane is the root of the sysbox control plane (requirements S18, S19): the
// API server and its persistence. Its packages hold no Docker socket, KVM or libvirt rights
// and import no driver, executor or CLI (internal/archtest enforces it); host work happens in
// the agents (internal/agent), which the server reaches only over the signed protocol.
package controlplane
