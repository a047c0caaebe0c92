package docker

import (
	"fmt"
	"strconv"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Container labels carrying the ownership anchors (S16).
const (
	labelPrefix     = "dev.zyvor.sysbox."
	labelTopology   = labelPrefix + "topology"
	labelAddress    = labelPrefix + "address"
	labelType       = labelPrefix + "type"
	labelGeneration = labelPrefix + "generation"
	labelMarker     = labelPrefix + "marker"
)

// ownerLabels are the labels written on every container created for o.
func ownerLabels(o substrate.Owner) map[string]string {
	return map[string]string{
		labelTopology:   o.Topology,
		labelAddress:    o.Address,
		labelType:       o.Type,
		labelGeneration: strconv.FormatUint(o.Generation, 10),
		labelMarker:     o.Marker(),
	}
}

// ownerFromLabels reads the anchors back. ok is false when any anchor is missing or malformed,
// or when the marker label is present and disagrees with the separate labels.
func ownerFromLabels(l map[string]string) (substrate.Owner, bool) {
	gen, err := strconv.ParseUint(l[labelGeneration], 10, 64)
	if err != nil {
		return substrate.Owner{}, false
	}
	o := substrate.Owner{Topology: l[labelTopology], Address: l[labelAddress], Type: l[labelType], Generation: gen}
	if !o.Complete() {
		return o, false
	}
	if m, has := l[labelMarker]; has {
		mo, err := substrate.ParseMarker(m)
		if err != nil || !mo.Equal(o) {
			return o, false
		}
	}
	return o, true
}

// checkOwned compares a container's labels with want (all anchors, generation included).
func checkOwned(what string, labels map[string]string, want substrate.Owner) error {
	if !want.Complete() {
		return fmt.Errorf("%s: owner %+v is incomplete: %w", what, want, driver.ErrNotOwned)
	}
	got, ok := ownerFromLabels(labels)
	if !ok {
		return fmt.Errorf("%s: no complete sysbox ownership labels: %w", what, driver.ErrNotOwned)
	}
	if !got.Equal(want) {
		return fmt.Errorf("%s: labels name owner %s %s generation %d (topology %s), want %s %s generation %d (topology %s): %w",
			what, got.Type, got.Address, got.Generation, got.Topology, want.Type, want.Address, want.Generation, want.Topology, driver.ErrNotOwned)
	}
	return nil
}

// containerName is the deterministic name of owner o's container. Names are for humans and for
// idempotent creation; ownership is always decided by labels.
func containerName(o substrate.Owner) string {
	return fmt.Sprintf("sysbox-%s-g%d", o.ShortID(16), o.Generation)
}
