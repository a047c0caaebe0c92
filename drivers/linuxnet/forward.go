package linuxnet

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"zyvor.dev/sysbox/pkg/substrate"
)

// Host coexistence (HOST-NOTES: dockerd sets the FORWARD policy to DROP, and br_netfilter makes
// bridged IPv4 traffic traverse it). A per-bridge nf_call_iptables=0 does not help: the kernel
// calls the IP hooks when the per-namespace sysctl OR the bridge option is on, and dockerd turns
// the sysctl on. An accept rule in our own nftables table does not help either: a packet must be
// accepted by every base chain on the hook, and the iptables-nft FORWARD chain drops it.
//
// So, when the host namespace has an iptables-nft "ip filter FORWARD" base chain, we insert at
// its top exactly one rule per bridge:
//
//	iifname BR oifname BR counter accept comment "<owner marker>"
//
// It only accepts traffic bridged between two ports of our own bridge: nothing routed, nothing
// to or from any other interface. It is written in the form iptables-nft itself uses, so
// `iptables -S FORWARD` shows it as `-i BR -o BR -m comment --comment … -j ACCEPT`. It is removed
// (by marker) when the bridge is deleted. Hosts using legacy iptables (x_tables) are not handled;
// a warning is logged.

const (
	filterTable  = "filter"
	forwardChain = "FORWARD"
)

var forwardMu sync.Mutex

// ForwardRule is one forward-accept rule found in the host's ip filter FORWARD chain.
type ForwardRule struct {
	Handle uint64
	Owner  substrate.Owner
}

// EnsureForwardAccept inserts the bridge's forward-accept rule if the host has an ip filter
// FORWARD base chain and the rule is not there yet. It reports whether a rule is in place.
func EnsureForwardAccept(bridge string, owner substrate.Owner) (bool, error) {
	forwardMu.Lock()
	defer forwardMu.Unlock()
	warnLegacyOnce.Do(warnLegacy)
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("forward accept rule: %w", err)
	}
	chain, err := forwardBaseChain(c)
	if err != nil || chain == nil {
		return false, err
	}
	rules, err := c.GetRules(chain.Table, chain)
	if err != nil {
		return false, fmt.Errorf("forward accept rule: list ip filter FORWARD: %w", err)
	}
	marker := owner.Marker()
	for _, r := range rules {
		if comment(r) == marker && matchesBridge(r, bridge) {
			return true, nil
		}
	}
	c.InsertRule(&nftables.Rule{Table: chain.Table, Chain: chain, Exprs: forwardExprs(bridge), UserData: userdata.AppendString(nil, userdata.TypeComment, marker)})
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("forward accept rule: insert into ip filter FORWARD: %w", err)
	}
	slog.Info("host forward filter drops bridged traffic; inserted an accept rule for traffic between ports of this bridge only",
		"bridge", bridge, "rule", fmt.Sprintf("ip filter FORWARD: iifname %q oifname %q accept", bridge, bridge), "owner", owner.Address)
	return true, nil
}

// RemoveForwardAccept deletes every forward-accept rule carrying owner's marker.
func RemoveForwardAccept(bridge string, owner substrate.Owner) error {
	forwardMu.Lock()
	defer forwardMu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("forward accept rule: %w", err)
	}
	chain, err := forwardBaseChain(c)
	if err != nil || chain == nil {
		return err
	}
	rules, err := c.GetRules(chain.Table, chain)
	if err != nil {
		return fmt.Errorf("forward accept rule: list ip filter FORWARD: %w", err)
	}
	marker := owner.Marker()
	n := 0
	for _, r := range rules {
		if comment(r) == marker {
			if err := c.DelRule(r); err != nil {
				return fmt.Errorf("forward accept rule: delete handle %d: %w", r.Handle, err)
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("forward accept rule: delete from ip filter FORWARD: %w", err)
	}
	slog.Info("removed the forward accept rule of a deleted bridge", "bridge", bridge, "rules", n)
	return nil
}

// ForwardRules lists forward-accept rules carrying any sysbox marker (for residue audits).
func ForwardRules() ([]ForwardRule, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("forward accept rules: %w", err)
	}
	chain, err := forwardBaseChain(c)
	if err != nil || chain == nil {
		return nil, err
	}
	rules, err := c.GetRules(chain.Table, chain)
	if err != nil {
		return nil, fmt.Errorf("forward accept rules: list ip filter FORWARD: %w", err)
	}
	var out []ForwardRule
	for _, r := range rules {
		if o, err := substrate.ParseMarker(comment(r)); err == nil {
			out = append(out, ForwardRule{Handle: r.Handle, Owner: o})
		}
	}
	return out, nil
}

func forwardRuleState(bridge string, owner substrate.Owner) (needed, present bool, err error) {
	c, err := nftables.New()
	if err != nil {
		return false, false, fmt.Errorf("forward accept rule: %w", err)
	}
	chain, err := forwardBaseChain(c)
	if err != nil || chain == nil {
		return false, false, err
	}
	rules, err := c.GetRules(chain.Table, chain)
	if err != nil {
		return true, false, fmt.Errorf("forward accept rule: list ip filter FORWARD: %w", err)
	}
	marker := owner.Marker()
	for _, r := range rules {
		if comment(r) == marker && matchesBridge(r, bridge) {
			return true, true, nil
		}
	}
	return true, false, nil
}

// forwardBaseChain finds the host's ip filter FORWARD base chain, or nil when there is none
// (nothing filters forwarded traffic then, and no rule is needed).
func forwardBaseChain(c *nftables.Conn) (*nftables.Chain, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("forward accept rule: list ip chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == filterTable && ch.Name == forwardChain && ch.Hooknum != nil && *ch.Hooknum == *nftables.ChainHookForward {
			return ch, nil
		}
	}
	return nil, nil
}

func ifnameData(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func forwardExprs(bridge string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameData(bridge)},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameData(bridge)},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

func matchesBridge(r *nftables.Rule, bridge string) bool {
	n := 0
	for _, e := range r.Exprs {
		if c, ok := e.(*expr.Cmp); ok && bytes.Equal(bytes.TrimRight(c.Data, "\x00"), []byte(bridge)) {
			n++
		}
	}
	return n == 2
}

func comment(r *nftables.Rule) string {
	s, ok := userdata.GetString(r.UserData, userdata.TypeComment)
	if !ok {
		return ""
	}
	return strings.TrimRight(s, "\x00")
}

var warnLegacyOnce sync.Once

func warnLegacy() {
	b, err := os.ReadFile("/proc/net/ip_tables_names")
	if err == nil && bytes.Contains(b, []byte("filter")) {
		slog.Warn("legacy iptables (x_tables) filter table is loaded; sysbox cannot add forward-accept rules there, so bridged traffic may be dropped if its FORWARD policy is DROP")
	}
}

// HostForwardFilter reports whether the host namespace has an ip filter FORWARD base chain
// (iptables-nft, e.g. dockerd's), i.e. whether bridges need the forward-accept rule.
func HostForwardFilter() (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, err
	}
	ch, err := forwardBaseChain(c)
	return ch != nil, err
}
