package nftables

import (
	"context"
	"errors"
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
	// add keeps p if it is a namespace not seen yet; only "gone" (ENOENT, ESRCH: a namespace
	// deleted or a process that exited since the listing) is skipped silently, and, for
	// processes only, one we may not inspect (EACCES: PID 1 of the host's own sandbox): sysbox's
	// namespaces are bind-mounted under NetnsDir or held by containers it can inspect.
	add := func(p string, proc bool) error {
		var st unix.Stat_t
		var fs unix.Statfs_t
		err := unix.Stat(p, &st)
		if err == nil {
			err = unix.Statfs(p, &fs)
		}
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH):
			return nil
		case proc && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)):
			return nil
		case err != nil:
			return fmt.Errorf("residue: %s: %w", p, err)
		case seen[st.Ino] || fs.Type != unix.NSFS_MAGIC:
			return nil
		}
		seen[st.Ino] = true
		paths = append(paths, p)
		return nil
	}
	ents, err := os.ReadDir(d.NetnsDir)
	// A directory that cannot be listed hides namespaces: an error, never an empty audit.
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("residue of topology %s: list namespaces in %s: %w: %w", topology, d.NetnsDir, driver.ErrUnavailable, err)
	}
	for _, e := range ents {
		if err := add(filepath.Join(d.NetnsDir, e.Name()), false); err != nil {
			return nil, err
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: list processes: %w: %w", topology, driver.ErrUnavailable, err)
	}
	for _, e := range procs {
		if e.Name()[0] >= '0' && e.Name()[0] <= '9' {
			if err := add("/proc/"+e.Name()+"/ns/net", true); err != nil {
				return nil, err
			}
		}
	}
	var out []substrate.Object
	// A namespace that was found but cannot be read may hold topology's tables: an error, not
	// "clean". One gone since it was found (a process that exited, a deleted namespace) is
	// skipped.
	for _, p := range paths {
		objs, err := tablesOf(p, topology)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) ||
			strings.HasPrefix(p, "/proc/") && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("residue: netns %s: %w", p, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// tablesOf lists the sysbox tables of topology in the namespace at p.
func tablesOf(p, topology string) ([]substrate.Object, error) {
	fd, err := linuxnet.Netns{Path: p}.Open()
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		return nil, err
	}
	tables, err := c.ListTablesOfFamily(nft.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var out []substrate.Object
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, "sysbox_") {
			continue
		}
		_, o, err := tableOwner(c, t.Name)
		if err != nil {
			return nil, fmt.Errorf("table ip %s: %w", t.Name, err)
		}
		if o != nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: "nft-table", ExternalID: p + ":ip " + t.Name, Owner: *o})
		}
	}
	return out, nil
}
