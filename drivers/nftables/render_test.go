package nftables

import (
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestRenderRejectsBadInput(t *testing.T) {
	devs := map[string]string{"lan": "lan"}
	fw := func(r substrate.Rule) substrate.PolicySpec {
		return substrate.PolicySpec{Firewall: &substrate.Firewall{DefaultInput: "drop", Rules: []substrate.Rule{r}}}
	}
	for _, tc := range []struct {
		name string
		spec substrate.PolicySpec
		want string
	}{
		{"ipv6 source", fw(substrate.Rule{Chain: "input", Action: "accept", Source: "2001:db8::/32"}), "IPv6"},
		{"port without protocol", fw(substrate.Rule{Chain: "input", Action: "accept", DestinationPort: 80}), "ports need protocol"},
		{"unknown attachment", fw(substrate.Rule{Chain: "input", Action: "accept", Attachment: "wan"}), `attachment "wan"`},
		{"unknown chain", fw(substrate.Rule{Chain: "prerouting", Action: "accept"}), "not input, forward or output"},
		{"bad action", fw(substrate.Rule{Chain: "input", Action: "allow"}), "action"},
		{"bad default", substrate.PolicySpec{Firewall: &substrate.Firewall{DefaultInput: "reject"}}, "default_input"},
		{"port out of range", fw(substrate.Rule{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 70000}), "out of range"},
		{"empty", substrate.PolicySpec{}, "neither"},
		{"dnat to ipv6", substrate.PolicySpec{Router: &substrate.Router{PortForwards: []substrate.PortForward{{InAttachment: "lan", Protocol: "tcp", Port: 80, To: "[2001:db8::1]:80"}}}}, "not an IPv4"},
		{"masquerade unknown attachment", substrate.PolicySpec{Router: &substrate.Router{Masquerade: []substrate.Masquerade{{OutAttachment: "wan"}}}}, `attachment "wan"`},
	} {
		_, err := render(tc.spec, devs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestCanonicalFormFollowsMeaning(t *testing.T) {
	devs := map[string]string{"lan": "lan", "wan": "eth7"}
	base := substrate.PolicySpec{Firewall: &substrate.Firewall{DefaultInput: "drop", Rules: []substrate.Rule{
		{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 8080, Attachment: "lan"},
	}}}
	render1 := func(s substrate.PolicySpec, d map[string]string) string {
		c, err := render(s, d)
		if err != nil {
			t.Fatal(err)
		}
		return canonical(c)
	}
	a := render1(base, devs)
	if b := render1(base, devs); a != b {
		t.Fatalf("canonical form is not stable")
	}
	changed := base
	changed.Firewall = &substrate.Firewall{DefaultInput: "drop", Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 8081, Attachment: "lan"}}}
	if render1(changed, devs) == a {
		t.Errorf("a changed port gives the same canonical form")
	}
	if render1(base, map[string]string{"lan": "eth9"}) == a {
		t.Errorf("a different device gives the same canonical form")
	}
	if !strings.Contains(a, "chain owner") || !strings.Contains(a, "chain input") {
		t.Errorf("canonical form lacks chains:\n%s", a)
	}
}

func TestDescriptor(t *testing.T) {
	r := driver.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	if err := r.Require("sysbox_firewall.x", Name, driver.CapPolicy, driver.CapAudit); err != nil {
		t.Errorf("capabilities: %v", err)
	}
}
