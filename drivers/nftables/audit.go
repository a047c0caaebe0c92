package nftables

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	nft "github.com/google/nftables"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Residue lists sysbox tables carrying topology's marker in every network namespace reachable
// from NetnsDir bind mounts or from a running process (so containers' namespaces count too).
// ExternalID is "<namespace path>:ip <table>".
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	seen := map[uint64]bool{}
	var paths []string
	add := func(p string) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || seen[st.Ino] {
			return
		}
		var fs unix.Statfs_t
		if unix.Statfs(p, &fs) != nil || fs.Type != unix.NSFS_MAGIC {
			return
		}
		seen[st.Ino] = true
		paths = append(paths, p)
	}
	// A directory that cannot be listed hides namespaces: an error, never an empty audit.
	ents, err := os.ReadDir(d.NetnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("residue of topology %s: list namespaces in %s: %w: %w", topology, d.NetnsDir, driver.ErrUnavailable, err)
	}
	for _, e := range ents {
		add(filepath.Join(d.NetnsDir, e.Name()))
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: list processes: %w: %w", topology, driver.ErrUnavailable, err)
	}
	for _, e := range procs {
		if e.Name()[0] >= '0' && e.Name()[0] <= '9' {
			add("/proc/" + e.Name() + "/ns/net")
		}
	}
	var out []substrate.Object
	for _, p := range paths {
		fd, err := linuxnet.Netns{Path: p}.Open()
		if err != nil {
			continue
		}
		c, err := nft.New(nft.WithNetNSFd(int(fd)))
		if err != nil {
			fd.Close()
			continue
		}
		tables, err := c.ListTablesOfFamily(nft.TableFamilyIPv4)
		for _, t := range tables {
			if err != nil || !strings.HasPrefix(t.Name, "sysbox_") {
				continue
			}
			if _, o, _ := tableOwner(c, t.Name); o != nil && o.Topology == topology {
				out = append(out, substrate.Object{Kind: "nft-table", ExternalID: p + ":ip " + t.Name, Owner: *o})
			}
		}
		fd.Close()
	}
	return out, nil
}
