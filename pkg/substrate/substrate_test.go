package substrate

import (
	"errors"
	"testing"
)

func TestMarkerRoundTrip(t *testing.T) {
	for _, o := range []Owner{
		{Topology: "5f0c", Address: `module.segment["red"].sysbox_node.target[1]`, Type: "sysbox_node", Generation: 3},
		{Topology: "t", Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1},
	} {
		m := o.Marker()
		if len(m) > 255 {
			t.Errorf("%s: marker %d bytes, want ≤ 255 (link alias limit)", o.Address, len(m))
		}
		got, err := ParseMarker(m)
		if err != nil || got != o {
			t.Errorf("ParseMarker(%q) = %+v, %v; want %+v", m, got, err, o)
		}
	}
	if _, err := ParseMarker("docker0"); !errors.Is(err, ErrNoMarker) {
		t.Errorf("foreign alias: got %v, want ErrNoMarker", err)
	}
	if _, err := ParseMarker("sysbox1:!!"); err == nil {
		t.Error("malformed marker accepted")
	}
}

func TestOwnerComplete(t *testing.T) {
	full := Owner{Topology: "t", Address: "a", Type: "x", Generation: 1}
	if !full.Complete() {
		t.Fatal("complete owner reported incomplete")
	}
	for _, o := range []Owner{{Address: "a", Type: "x", Generation: 1}, {Topology: "t", Type: "x", Generation: 1}, {Topology: "t", Address: "a", Generation: 1}, {Topology: "t", Address: "a", Type: "x"}} {
		if o.Complete() {
			t.Errorf("%+v reported complete", o)
		}
	}
}

func TestPolicyDigestIgnoresOwnerAndChangesWithRules(t *testing.T) {
	a := PolicySpec{Owner: Owner{Generation: 1}, Firewall: &Firewall{DefaultInput: "drop", Rules: []Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 8080}}}}
	b := a
	b.Owner.Generation = 2
	if a.Digest() != b.Digest() {
		t.Fatal("digest depends on owner")
	}
	c := PolicySpec{Firewall: &Firewall{DefaultInput: "drop", Rules: []Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 8081}}}}
	if a.Digest() == c.Digest() {
		t.Fatal("digest ignores a rule change")
	}
}
