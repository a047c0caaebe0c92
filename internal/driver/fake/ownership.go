package fake

import (
	"encoding/json"
	"fmt"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func objectID(prefix string, o substrate.Owner, extra string) string {
	return fmt.Sprintf("%s-%s-g%d%s", prefix, o.ShortID(10), o.Generation, extra)
}

type private struct {
	ID     string `json:"id"`
	Marker string `json:"marker"`
}

func (d *Driver) envelope(id, marker string) substrate.Envelope {
	b, _ := json.Marshal(private{ID: id, Marker: marker})
	return substrate.Envelope{Driver: d.name, Version: envVersion, Data: b}
}

func (d *Driver) handle(id, marker string) substrate.Handle {
	return substrate.Handle{Driver: d.name, ExternalID: id, Private: d.envelope(id, marker)}
}

// CheckPrivate accepts only this driver's envelope version carrying a complete marker.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	if env.Driver != d.name {
		return fmt.Errorf("fake envelope: written by driver %q, not %q", env.Driver, d.name)
	}
	if env.Version != envVersion {
		return fmt.Errorf("fake envelope: version %d unknown (this build reads %d); destroy with the binary that created it", env.Version, envVersion)
	}
	var p private
	if err := json.Unmarshal(env.Data, &p); err != nil {
		return fmt.Errorf("fake envelope: %w", err)
	}
	o, err := substrate.ParseMarker(p.Marker)
	if err != nil || !o.Complete() {
		return fmt.Errorf("fake envelope %s: lacks ownership marker required by this version; destroy with the binary that created it and recreate", p.ID)
	}
	return nil
}

// owned checks that an object's marker proves want. Called with d.mu held.
func owned(kind, id, marker string, want substrate.Owner) error {
	if !want.Complete() {
		return fmt.Errorf("fake %s %s: %w: caller's ownership evidence incomplete (%+v)", kind, id, driver.ErrNotOwned, want)
	}
	got, err := substrate.ParseMarker(marker)
	if err != nil {
		return fmt.Errorf("fake %s %s: %w: no sysbox marker", kind, id, driver.ErrNotOwned)
	}
	if !got.Equal(want) {
		return fmt.Errorf("fake %s %s: %w: marker says %s gen %d of %s, state says %s gen %d of %s", kind, id, driver.ErrNotOwned,
			got.Address, got.Generation, got.Topology, want.Address, want.Generation, want.Topology)
	}
	return nil
}

func present(id string, o substrate.Owner, attrs map[string]string) substrate.Observation {
	return substrate.Observation{Status: substrate.Present, ExternalID: id, Owner: &o, Attributes: attrs, At: time.Now().UTC()}
}

func absent(id string) substrate.Observation {
	return substrate.Observation{Status: substrate.Absent, ExternalID: id, At: time.Now().UTC()}
}

func unknown(id string, err error) (substrate.Observation, error) {
	return substrate.Observation{Status: substrate.Unknown, ExternalID: id, Reason: err.Error(), At: time.Now().UTC()}, err
}

// observeMarker turns a found object into an observation, comparing markers.
func observeMarker(id, marker string, want substrate.Owner) substrate.Observation {
	got, err := substrate.ParseMarker(marker)
	if err != nil || !got.Equal(want) {
		return substrate.Observation{Status: substrate.Drifted, ExternalID: id, Reason: "ownership marker differs from state", At: time.Now().UTC()}
	}
	return present(id, got, nil)
}
