package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

// diags collects diagnostics for one instance with its address in every message.
type diags struct {
	addr addrs.Instance
	body hcl.Body
	decl hcl.Range
	list hcl.Diagnostics
}

func newDiags(req *config.DecodeRequest) *diags {
	return &diags{addr: req.Addr, body: req.Body, decl: req.DeclRange}
}

func (d *diags) add(rng hcl.Range, summary, format string, args ...any) {
	d.list = append(d.list, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary,
		Detail: d.addr.String() + ": " + fmt.Sprintf(format, args...), Subject: rng.Ptr()})
}

// attr returns the range of a top-level attribute's expression (or the block's).
func (d *diags) attr(name string) hcl.Range {
	if b, ok := d.body.(*hclsyntax.Body); ok {
		if a, ok := b.Attributes[name]; ok {
			return a.Expr.Range()
		}
	}
	return d.decl
}

// block returns the range of a nested block's attribute: the block selected by label (if
// label != "") or by its index among blocks of that type.
func (d *diags) block(typ, label string, index int, attr string) hcl.Range {
	b, ok := d.body.(*hclsyntax.Body)
	if !ok {
		return d.decl
	}
	i := 0
	for _, blk := range b.Blocks {
		if blk.Type != typ {
			continue
		}
		match := (label != "" && len(blk.Labels) > 0 && blk.Labels[0] == label) || (label == "" && i == index)
		i++
		if !match {
			continue
		}
		if a, ok := blk.Body.Attributes[attr]; ok && attr != "" {
			return a.Expr.Range()
		}
		return blk.DefRange()
	}
	return d.decl
}

// checkSecrets rejects secret references (env()) outside the top-level attributes listed in
// allowed: only there does the executor resolve them right before the provider call.
func (d *diags) checkSecrets(req *config.DecodeRequest, allowed ...string) {
	for _, p := range req.SecretPaths {
		top := ""
		if len(p) > 0 {
			if ga, ok := p[0].(cty.GetAttrStep); ok {
				top = ga.Name
			}
		}
		if oneOf(top, allowed...) {
			continue
		}
		where := d.addr.Resource.Type + " takes no secrets"
		if len(allowed) > 0 {
			where = "secret references are resolved at execution only in " + strings.Join(allowed, ", ")
		}
		d.add(d.attr(top), "Secret reference not allowed here",
			"%s comes from env(), but %s; use a plain value, or env_optional() for a non-secret setting", attrPath(p), where)
	}
}

func attrPath(p cty.Path) string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case cty.GetAttrStep:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Name)
		case cty.IndexStep:
			switch {
			case s.Key.Type() == cty.String:
				b.WriteString("[" + quote(s.Key.AsString()) + "]")
			case s.Key.Type() == cty.Number:
				b.WriteString("[" + s.Key.AsBigFloat().Text('f', -1) + "]")
			default:
				b.WriteString("[…]")
			}
		}
	}
	return b.String()
}

// attrs reads the attributes of an evaluated object: a decode request's body
// (config.DecodeRequest.Attr, which the decoder may hand over without assembling the object)
// or a cty object value (object).
type attrs interface {
	Attr(name string) (cty.Value, bool)
}

var _ attrs = (*config.DecodeRequest)(nil)

// object is the attrs of a cty value; a value that is not an object has none.
type object struct{ v cty.Value }

func (o object) Attr(name string) (cty.Value, bool) {
	if !o.v.Type().IsObjectType() || !o.v.Type().HasAttribute(name) {
		return cty.NilVal, false
	}
	return o.v.GetAttr(name), true
}

// str reads an optional string attribute of obj ("" when null).
func str(obj cty.Value, name string) string { return attrStr(object{obj}, name) }

func attrStr(obj attrs, name string) string {
	v, ok := obj.Attr(name)
	if !ok || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

// num reads an optional whole-number attribute (0 when null).
func num(obj cty.Value, name string) (int, bool) { return attrNum(object{obj}, name) }

func attrNum(obj attrs, name string) (int, bool) {
	v, ok := obj.Attr(name)
	if !ok || v.IsNull() {
		return 0, true
	}
	i, acc := v.AsBigFloat().Int64()
	if acc != 0 || i > 1<<31 || i < -(1<<31) {
		return 0, false
	}
	return int(i), true
}

func strList(obj cty.Value, name string) []string { return attrStrList(object{obj}, name) }

func attrStrList(obj attrs, name string) []string {
	v, ok := obj.Attr(name)
	if !ok || v.IsNull() {
		return nil
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.IsNull() {
			out = append(out, e.AsString())
		}
	}
	return out
}

func attrStrMap(obj attrs, name string) map[string]string {
	v, ok := obj.Attr(name)
	if !ok || v.IsNull() || v.LengthInt() == 0 {
		return nil
	}
	out := map[string]string{}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if !e.IsNull() {
			out[k.AsString()] = e.AsString()
		}
	}
	return out
}

// ref reads a reference attribute: a resource object (sysbox_network.lan, whose "address" is
// used) or a canonical address string. want is the expected resource type.
func ref(d *diags, obj cty.Value, name, want string, rng hcl.Range) (addrs.Instance, cty.Value, bool) {
	return attrRef(d, object{obj}, name, want, rng)
}

func attrRef(d *diags, obj attrs, name, want string, rng hcl.Range) (addrs.Instance, cty.Value, bool) {
	v, ok := obj.Attr(name)
	if !ok || v.IsNull() {
		return addrs.Instance{}, cty.NilVal, false
	}
	var s string
	switch {
	case v.Type() == cty.String:
		s = v.AsString()
	case v.Type().IsObjectType() && v.Type().HasAttribute("address") && v.GetAttr("address").Type() == cty.String:
		s = v.GetAttr("address").AsString()
	default:
		d.add(rng, "Invalid reference", "%s must be a %s resource (e.g. %s.NAME) or its address, got %s", name, want, want, v.Type().FriendlyName())
		return addrs.Instance{}, cty.NilVal, false
	}
	a, err := addrs.ParseInstance(s)
	if err != nil {
		d.add(rng, "Invalid reference", "%s: %v", name, err)
		return addrs.Instance{}, cty.NilVal, false
	}
	// A bare address string is relative to the referring module.
	if v.Type() == cty.String {
		a = addrs.NewInstance(append(append(addrs.Module(nil), d.addr.Module...), a.Module...), a.Resource, a.Key)
	}
	if a.Resource.Type != want || a.Resource.Mode == addrs.Data && want != "sysbox_artifact" {
		d.add(rng, "Invalid reference", "%s must refer to a %s, got %s", name, want, a)
		return addrs.Instance{}, cty.NilVal, false
	}
	if !v.Type().IsObjectType() {
		v = cty.NilVal
	}
	return a, v, true
}

// ipv4Prefix checks "a.b.c.d/n"; IPv6 is rejected with its own message.
func ipv4Prefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if _, aerr := netip.ParseAddr(s); aerr == nil {
			return netip.Prefix{}, fmt.Errorf("%q has no prefix length (write e.g. %s/24)", s, s)
		}
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 CIDR prefix", s)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%q is IPv6; sysbox supports IPv4 only here", s)
	}
	return p, nil
}

func ipv4Addr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	if !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is IPv6; sysbox supports IPv4 only here", s)
	}
	return a, nil
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// defaultMAC derives a stable, locally administered unicast MAC from address and attachment.
func defaultMAC(addr addrs.Instance, attachment string) string {
	sum := sha256.Sum256([]byte(addr.String() + "\x00" + attachment))
	sum[0] = sum[0]&0xfc | 0x02
	// "%02x:%02x:%02x:%02x:%02x:%02x" of sum[:6], without fmt's reflection (once per attachment)
	const hexDigits = "0123456789abcdef"
	var b [17]byte
	for i, x := range sum[:6] {
		if i > 0 {
			b[3*i-1] = ':'
		}
		b[3*i], b[3*i+1] = hexDigits[x>>4], hexDigits[x&0xf]
	}
	return string(b[:])
}

// attrRule says what a change of one stored attribute does.
type attrRule struct {
	effect plans.Effect
	why    string
	// perKey diffs a JSON object attribute key by key (attachment.lan rather than attachment).
	perKey bool
}

// diffAttrs compares two stored JSON objects attribute by attribute under rules. Attributes
// missing from rules force replacement (the safe default for a new attribute).
func diffAttrs(prior, desired json.RawMessage, rules map[string]attrRule, updateVerb string) (plans.Diff, error) {
	if bytes.Equal(prior, desired) && isJSONObject(prior) {
		// what the comparison below finds for the same object on both sides (the common
		// no-change plan), without decoding it twice
		return plans.Diff{Action: plans.NoOp, Reason: "up to date"}, nil
	}
	var p, n map[string]json.RawMessage
	if err := json.Unmarshal(prior, &p); err != nil {
		return plans.Diff{}, fmt.Errorf("prior attributes: %w", err)
	}
	if err := json.Unmarshal(desired, &n); err != nil {
		return plans.Diff{}, fmt.Errorf("desired attributes: %w", err)
	}
	var changes []plans.AttrChange
	for _, k := range unionKeys(p, n) {
		rule, ok := rules[k]
		if !ok {
			rule = attrRule{effect: plans.ForcesReplacement}
		}
		if rule.perKey {
			changes = append(changes, perKeyChanges(k, p[k], n[k], rule)...)
			continue
		}
		if !jsonEqual(p[k], n[k]) {
			changes = append(changes, plans.AttrChange{Path: k, Before: p[k], After: n[k], Effect: rule.effect, Why: rule.why})
		}
	}
	return diffOf(changes, updateVerb), nil
}

// perKeyChanges compares the JSON object attribute k key by key (attachment["lan"]) and,
// where both sides hold an object, field by field (attachment["lan"].gateway).
func perKeyChanges(k string, prior, desired json.RawMessage, rule attrRule) []plans.AttrChange {
	var pm, nm map[string]json.RawMessage
	_ = json.Unmarshal(orNull(prior), &pm)
	_ = json.Unmarshal(orNull(desired), &nm)
	var changes []plans.AttrChange
	for _, s := range unionKeys(pm, nm) {
		if jsonEqual(pm[s], nm[s]) {
			continue
		}
		path := k + "[" + quote(s) + "]"
		var po, no map[string]json.RawMessage
		if json.Unmarshal(pm[s], &po) != nil || json.Unmarshal(nm[s], &no) != nil || po == nil || no == nil {
			changes = append(changes, plans.AttrChange{Path: path, Before: pm[s], After: nm[s], Effect: rule.effect, Why: rule.why})
			continue
		}
		// both sides present: report the fields that changed (attachment["lan"].gateway)
		for _, f := range unionKeys(po, no) {
			if !jsonEqual(po[f], no[f]) {
				changes = append(changes, plans.AttrChange{Path: path + "." + f, Before: po[f], After: no[f], Effect: rule.effect, Why: rule.why})
			}
		}
	}
	return changes
}

// diffOf is the diff the changes add up to: the strongest effect decides the action, and the
// reason names the changed paths of that effect.
func diffOf(changes []plans.AttrChange, updateVerb string) plans.Diff {
	d := plans.Diff{Action: plans.NoOp, Changes: changes}
	var repl, upd, none []string
	replWhy := ""
	for _, c := range changes {
		switch c.Effect {
		case plans.ForcesReplacement:
			repl = append(repl, c.Path)
			if replWhy == "" && c.Why != "" {
				replWhy = ": " + c.Why
			}
		case plans.InPlace:
			upd = append(upd, c.Path)
		default:
			none = append(none, c.Path)
		}
	}
	switch {
	case len(repl) > 0:
		d.Action = plans.Replace
		d.Reason = strings.Join(repl, ", ") + " changed (forces replacement" + replWhy + ")"
	case len(upd) > 0:
		d.Action = plans.Update
		d.Reason = strings.Join(upd, ", ") + " changed (" + updateVerb + ")"
	case len(none) > 0:
		d.Reason = strings.Join(none, ", ") + " changed (no effect on the existing object)"
	default:
		d.Reason = "up to date"
	}
	return d
}

func unionKeys(a, b map[string]json.RawMessage) []string {
	seen := map[string]struct{}{}
	for k := range a {
		seen[k] = struct{}{}
	}
	for k := range b {
		seen[k] = struct{}{}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// jsonEqual compares two JSON texts semantically (key order and spacing ignored; absent = null).
// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	return canonical(a) == canonical(b)
}

func canonical(b json.RawMessage) string {
	if len(b) == 0 {
		return "null"
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func marshalStored(v any) (json.RawMessage, error) {
	return json.Marshal(v)
}

// configOf returns ri's configuration as its handler's Decode made it.
func configOf[T any](ri *config.ResourceInstance) (T, error) {
	c, ok := ri.Config.(T)
	if !ok {
		return c, fmt.Errorf("%s: internal error: config is %T", ri.Addr, ri.Config)
	}
	return c, nil
}

// storedConfig is Desired for a resource whose stored form is its configuration unchanged.
func storedConfig[T any](ri *config.ResourceInstance) (json.RawMessage, error) {
	c, err := configOf[T](ri)
	if err != nil {
		return nil, err
	}
	return marshalStored(c)
}

// driverRequirement is Requirements for a resource that needs caps of its driver to change and
// only the driver itself when nothing changes.
func driverRequirement(attrs json.RawMessage, action plans.Action, caps ...driver.Capability) (plans.Requirement, error) {
	var c struct {
		Driver string `json:"driver"`
	}
	if err := json.Unmarshal(attrs, &c); err != nil {
		return plans.Requirement{}, err
	}
	if action == plans.NoOp {
		return plans.Requirement{Driver: c.Driver}, nil
	}
	return plans.Requirement{Driver: c.Driver, Capabilities: caps}, nil
}
