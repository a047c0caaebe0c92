package nftables

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the driver's registry name.
const Name = "nftables"

// Version goes into plan fingerprints.
const Version = "1"

const envelopeVersion = 1

// Driver applies policies as nftables tables inside node namespaces.
type Driver struct {
	// Resolve finds a node's network namespace from its handle.
	Resolve func(ctx context.Context, node substrate.Handle) (linuxnet.Netns, error)
	// NetnsDir is scanned by the residue audit (default /run/netns).
	NetnsDir string
}

var (
	_ driver.Policy         = (*Driver)(nil)
	_ driver.PolicyImporter = (*Driver)(nil)
	_ driver.Auditor        = (*Driver)(nil)
)

// New returns a driver that resolves node namespaces through the node drivers in reg (any
// registered driver implementing linuxnet.NamespaceResolver, chosen by the handle's Driver).
func New(reg *driver.Registry) *Driver {
	return &Driver{NetnsDir: "/run/netns", Resolve: func(ctx context.Context, node substrate.Handle) (linuxnet.Netns, error) {
		d, err := reg.Driver(node.Driver)
		if err != nil {
			return linuxnet.Netns{}, err
		}
		r, ok := d.(linuxnet.NamespaceResolver)
		if !ok {
			return linuxnet.Netns{}, fmt.Errorf("node driver %q cannot name a Linux network namespace for its nodes: %w", node.Driver, driver.ErrInvalid)
		}
		return r.NodeNetns(ctx, node)
	}}
}

// Register adds the nftables driver to r; it finds node drivers in r at execution time.
func Register(r *driver.Registry) error { return r.Register(New(r)) }

// Descriptor implements driver.Driver.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: Name, Version: Version, Capabilities: []driver.Capability{driver.CapPolicy, driver.CapImport, driver.CapAudit}}
}

type private struct {
	Table  string `json:"table"`
	Router bool   `json:"router,omitempty"`
	Digest string `json:"digest"` // spec.Digest() applied
}

// TableName is the table of a policy owner.
func TableName(o substrate.Owner) string { return "sysbox_" + o.ShortID(12) }

// ApplyPolicy implements driver.Policy.
func (d *Driver) ApplyPolicy(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error) {
	where := fmt.Sprintf("policy %s", spec.Owner.Address)
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("%s: incomplete owner %+v", where, spec.Owner)
	}
	ns, err := d.Resolve(ctx, node)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: node %s: %w", where, node.ExternalID, err)
	}
	devs, err := devices(ns, atts)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	chains, err := render(spec, devs)
	if err != nil {
		return substrate.Handle{}, err
	}
	return install(ns, TableName(spec.Owner), chains, spec, where, false)
}

// install atomically replaces table name in ns with chains, marked with spec.Owner, and reads
// it back. A table of that name carrying another resource's marker (or none) is refused.
// With claim (import: the operator's claim), an unmarked table is replaced too.
func install(ns linuxnet.Netns, name string, chains []chainSpec, spec substrate.PolicySpec, where string, claim bool) (substrate.Handle, error) {
	where += ": table ip " + name + " in " + ns.Path
	fd, err := ns.Open()
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	defer fd.Close()
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	exists, found, err := tableOwner(c, name)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	ours := found != nil && found.SameResource(spec.Owner)
	if exists && !ours && !(claim && found == nil) {
		return substrate.Handle{}, fmt.Errorf("%s: exists with marker %v, not this resource's: %w", where, found, driver.ErrNotOwned)
	}
	table := &nft.Table{Name: name, Family: nft.TableFamilyIPv4}
	if exists {
		c.DelTable(table)
	}
	c.AddTable(table)
	marker := userdata.AppendString(nil, userdata.TypeComment, spec.Owner.Marker())
	for _, cs := range chains {
		ch := c.AddChain(&nft.Chain{Name: cs.Name, Table: table, Type: cs.Type, Hooknum: cs.Hook, Priority: cs.Priority, Policy: cs.Policy})
		for _, r := range cs.Rules {
			rule := &nft.Rule{Table: table, Chain: ch, Exprs: r}
			if cs.Name == ownerChain {
				rule.UserData = marker
			}
			c.AddRule(rule)
		}
	}
	if err := c.Flush(); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: replace (one batch): %w", where, err)
	}
	if spec.Router != nil {
		if err := setForwarding(ns, true); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	got, err := readTable(c, name)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: read back: %w", where, err)
	}
	if want := canonical(chains); got != want {
		return substrate.Handle{}, fmt.Errorf("%s: read back differs from what was written: %s", where, firstDiff(got, want))
	}
	p, _ := json.Marshal(private{Table: name, Router: spec.Router != nil, Digest: spec.Digest()})
	return substrate.Handle{Driver: Name, ExternalID: name, Private: substrate.Envelope{Driver: Name, Version: envelopeVersion, Data: p}}, nil
}

// ObservePolicy implements driver.Policy: Absent when the namespace or table is gone, Drifted
// when the marker, the table's canonical form or (for routers) forwarding departs from spec,
// Present otherwise. Attribute "digest" is the semantic digest of the declared policy.
func (d *Driver) ObservePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Observation, error) {
	obs := substrate.Observation{ExternalID: h.ExternalID, At: time.Now().UTC()}
	p, err := decodePrivate(h.Private)
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("policy %s: %w", spec.Owner.Address, err)
	}
	ns, err := d.Resolve(ctx, node)
	if errors.Is(err, driver.ErrNotFound) {
		obs.Status, obs.Reason = substrate.Absent, "node namespace is gone"
		return obs, nil
	} else if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("policy %s: %w", spec.Owner.Address, err)
	}
	fd, err := ns.Open()
	if errors.Is(err, os.ErrNotExist) {
		obs.Status, obs.Reason = substrate.Absent, "node namespace is gone"
		return obs, nil
	} else if err != nil {
		// Only ENOENT says gone; a namespace that cannot be entered is unknown.
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return obs, fmt.Errorf("policy %s: %w: %w", spec.Owner.Address, driver.ErrUnavailable, err)
	}
	defer fd.Close()
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("policy %s: %w: %w", spec.Owner.Address, driver.ErrUnavailable, err)
	}
	exists, found, err := tableOwner(c, p.Table)
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("policy %s: %w: %w", spec.Owner.Address, driver.ErrUnavailable, err)
	}
	if !exists {
		obs.Status, obs.Reason = substrate.Absent, "table ip "+p.Table+" does not exist"
		return obs, nil
	}
	obs.Owner = found
	obs.Attributes = map[string]string{"table": p.Table, "digest": spec.Digest()}
	if found == nil || !found.SameResource(spec.Owner) {
		obs.Status, obs.Reason = substrate.Drifted, "table lacks this resource's ownership marker"
		return obs, nil
	}
	if err := observeTableContent(c, ns, p.Table, atts, spec, &obs); err != nil {
		return obs, err
	}
	return obs, nil
}

// observeTableContent sets obs's status from what our marked table in ns holds: drifted when
// an attachment's device, the table's canonical form or (for routers) forwarding departs from
// spec, unknown (with the error returned) when they cannot be read, else present.
func observeTableContent(c *nft.Conn, ns linuxnet.Netns, table string, atts []substrate.AttachmentState, spec substrate.PolicySpec, obs *substrate.Observation) error {
	devs, err := devices(ns, atts)
	if errors.Is(err, driver.ErrUnavailable) {
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return fmt.Errorf("policy %s: %w", spec.Owner.Address, err)
	} else if err != nil {
		obs.Status, obs.Reason = substrate.Drifted, err.Error()
		return nil
	}
	chains, err := render(spec, devs)
	if err != nil {
		obs.Status = substrate.Unknown
		return err
	}
	got, err := readTable(c, table)
	if err != nil {
		obs.Status = substrate.Unknown
		return fmt.Errorf("policy %s: %w: %w", spec.Owner.Address, driver.ErrUnavailable, err)
	}
	obs.Attributes["installed_digest"] = digest(got)
	if want := canonical(chains); got != want {
		obs.Status, obs.Reason = substrate.Drifted, "table ip "+table+" was changed outside sysbox"
		return nil
	}
	if spec.Router != nil {
		on, err := forwarding(ns)
		if err != nil {
			obs.Status, obs.Reason = substrate.Unknown, err.Error()
			return fmt.Errorf("policy %s: %w: %w", spec.Owner.Address, driver.ErrUnavailable, err)
		}
		if !on {
			obs.Status, obs.Reason = substrate.Drifted, "net.ipv4.ip_forward is off in the node"
			return nil
		}
	}
	obs.Status = substrate.Present
	return nil
}

// DeletePolicy implements driver.Policy: it deletes the table only when its marker equals owner;
// a gone namespace or table is not an error. A router's forwarding is turned off again.
func (d *Driver) DeletePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, owner substrate.Owner) error {
	p, err := decodePrivate(h.Private)
	if err != nil {
		return fmt.Errorf("policy %s: %w", owner.Address, err)
	}
	where := fmt.Sprintf("policy %s: table ip %s", owner.Address, p.Table)
	ns, err := d.Resolve(ctx, node)
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	fd, err := ns.Open()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: %w: %w", where, driver.ErrUnavailable, err) // not proof it is gone
	}
	defer fd.Close()
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	exists, found, err := tableOwner(c, p.Table)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if !exists {
		return nil
	}
	if found == nil || !owner.Complete() || !found.Equal(owner) {
		return fmt.Errorf("%s: marker %v does not equal %+v: %w", where, found, owner, driver.ErrNotOwned)
	}
	c.DelTable(&nft.Table{Name: p.Table, Family: nft.TableFamilyIPv4})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("%s: delete: %w", where, err)
	}
	if p.Router {
		if err := setForwarding(ns, false); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// ImportPolicy implements driver.PolicyImporter: EXTERNAL_ID is a table of family ip inside
// the node's namespace. A table carrying this resource's marker is adopted untouched (observe
// then says whether its content matches the declared policy); one with no marker is claimed by
// replacing it atomically with the declared policy under its own name (the marker lives in
// the ruleset, so claiming rewrites it); another resource's marker is refused with ErrNotOwned,
// naming its topology and address.
func (d *Driver) ImportPolicy(ctx context.Context, node substrate.Handle, externalID string, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error) {
	where := fmt.Sprintf("import table ip %s as %s", externalID, spec.Owner.Address)
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("%s: incomplete owner: %w", where, driver.ErrNotOwned)
	}
	if externalID == "" || len(externalID) > 255 || strings.ContainsAny(externalID, "\x00 /") {
		return substrate.Handle{}, fmt.Errorf("%s: not a table name: %w", where, driver.ErrInvalid)
	}
	ns, err := d.Resolve(ctx, node)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: node %s: %w", where, node.ExternalID, err)
	}
	fd, err := ns.Open()
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: node %s: %w: %w", where, node.ExternalID, driver.ErrUnavailable, err)
	}
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		fd.Close()
		return substrate.Handle{}, fmt.Errorf("%s: %w: %w", where, driver.ErrUnavailable, err)
	}
	exists, found, err := tableOwner(c, externalID)
	fd.Close()
	switch {
	case err != nil:
		return substrate.Handle{}, fmt.Errorf("%s: %w: %w", where, driver.ErrUnavailable, err)
	case !exists:
		return substrate.Handle{}, fmt.Errorf("%s: no such table in node %s: %w", where, node.ExternalID, driver.ErrNotFound)
	case found != nil && !found.SameResource(spec.Owner):
		return substrate.Handle{}, fmt.Errorf("%s: belongs to %s %s (topology %s): %w", where, found.Type, found.Address, found.Topology, driver.ErrNotOwned)
	case found != nil:
		p, _ := json.Marshal(private{Table: externalID, Router: spec.Router != nil, Digest: spec.Digest()})
		return substrate.Handle{Driver: Name, ExternalID: externalID, Private: substrate.Envelope{Driver: Name, Version: envelopeVersion, Data: p}}, nil
	}
	devs, err := devices(ns, atts)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	chains, err := render(spec, devs)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	return install(ns, externalID, chains, spec, where, true)
}

func decodePrivate(env substrate.Envelope) (private, error) {
	var p private
	if err := env.Open(Name, envelopeVersion, &p); err != nil {
		return p, fmt.Errorf("private state: %w", err)
	}
	if p.Table == "" {
		return p, fmt.Errorf("private state: no table recorded")
	}
	return p, nil
}

// devices maps each attachment's logical name to the interface inside ns carrying its MAC.
func devices(ns linuxnet.Netns, atts []substrate.AttachmentState) (map[string]string, error) {
	links, err := ns.Links()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	devs := map[string]string{}
	for _, a := range atts {
		var match []netlink.Link
		for _, l := range links {
			if a.MAC != "" && strings.EqualFold(l.Attrs().HardwareAddr.String(), a.MAC) {
				match = append(match, l)
			}
		}
		switch len(match) {
		case 0:
			return nil, fmt.Errorf("attachment %q: no interface with MAC %s in %s", a.Name, a.MAC, ns)
		case 1:
			devs[a.Name] = match[0].Attrs().Name
		default:
			return nil, fmt.Errorf("attachment %q: %d interfaces with MAC %s in %s", a.Name, len(match), a.MAC, ns)
		}
	}
	return devs, nil
}

// tableOwner reports whether the table exists and the marker its owner chain carries.
func tableOwner(c *nft.Conn, name string) (bool, *substrate.Owner, error) {
	tables, err := c.ListTablesOfFamily(nft.TableFamilyIPv4)
	if err != nil {
		return false, nil, fmt.Errorf("list tables: %w", err)
	}
	var t *nft.Table
	for _, x := range tables {
		if x.Name == name {
			t = x
		}
	}
	if t == nil {
		return false, nil, nil
	}
	rules, err := c.GetRules(t, &nft.Chain{Name: ownerChain, Table: t})
	if err != nil {
		return true, nil, nil // no owner chain: no marker
	}
	for _, r := range rules {
		if s, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok {
			if o, err := substrate.ParseMarker(strings.TrimRight(s, "\x00")); err == nil {
				return true, &o, nil
			}
		}
	}
	return true, nil, nil
}

// readTable returns the canonical form of what the kernel holds for the table.
func readTable(c *nft.Conn, name string) (string, error) {
	chains, err := c.ListChainsOfTableFamily(nft.TableFamilyIPv4)
	if err != nil {
		return "", fmt.Errorf("list chains: %w", err)
	}
	var got []chainSpec
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != name {
			continue
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return "", fmt.Errorf("chain %s: %w", ch.Name, err)
		}
		cs := chainSpec{Name: ch.Name, Type: ch.Type, Hook: ch.Hooknum, Priority: ch.Priority, Policy: ch.Policy}
		for _, r := range rules {
			cs.Rules = append(cs.Rules, r.Exprs)
		}
		got = append(got, cs)
	}
	return canonical(got), nil
}

// canonical renders chains as stable text: sorted by name, hooks, priorities and policies as
// numbers, each expression as its type and JSON with counters zeroed.
func canonical(chains []chainSpec) string {
	cs := append([]chainSpec(nil), chains...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "chain %s type=%q", c.Name, c.Type)
		if c.Hook != nil {
			fmt.Fprintf(&b, " hook=%d", *c.Hook)
		}
		if c.Priority != nil {
			fmt.Fprintf(&b, " prio=%d", *c.Priority)
		}
		if c.Policy != nil {
			fmt.Fprintf(&b, " policy=%d", *c.Policy)
		}
		b.WriteString("\n")
		for _, r := range c.Rules {
			b.WriteString("  rule")
			for _, e := range r {
				b.WriteString(" ")
				b.WriteString(exprText(e))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func exprText(e expr.Any) string {
	if c, ok := e.(*expr.Counter); ok {
		z := *c
		z.Bytes, z.Packets = 0, 0
		e = &z
	}
	j, _ := json.Marshal(e)
	return fmt.Sprintf("%T%s", e, j)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func setForwarding(ns linuxnet.Netns, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return linuxnet.SetSysctl(ns, "net.ipv4.ip_forward", v)
}

func forwarding(ns linuxnet.Netns) (bool, error) {
	v, err := linuxnet.Sysctl(ns, "net.ipv4.ip_forward")
	return v == "1", err
}

// firstDiff names the first line where the installed form departs from the intended one.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
	return "equal"
}
