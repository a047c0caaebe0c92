// Package guest boots sysbox's test image (scripts/guest-image) under QEMU (TCG) and drives its
// guest agent over a real virtio-serial channel: readiness, exec, interfaces and network init on
// a bridge shared with a network namespace. It holds only tests.
package guest
