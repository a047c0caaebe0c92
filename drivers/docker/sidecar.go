package docker

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// A container's NICs live in its network namespace, which a restart behind our back replaces
// with an empty one; and the node handle is fixed at create time, before any NIC exists. So the
// driver keeps one small record per wired container, <StateDir>/<container id>.json, listing the
// attachments it wired. ObserveNode compares it with the namespace: a running container missing
// one of them is degraded. The record is evidence for observation only, never for ownership
// (labels and link aliases are), and is removed with the container.

const sidecarKind, sidecarVersion = "sysbox-docker-nics", 1

// DefaultStateDir holds the NIC records.
const DefaultStateDir = "/run/sysbox/docker"

type sidecar struct {
	ContainerID string                `json:"container_id"`
	Marker      string                `json:"marker"` // the node owner the NICs were wired for
	NICs        map[string]nicPrivate `json:"nics"`   // by logical attachment name
}

func (d *Driver) sidecarPath(containerID string) string {
	return filepath.Join(d.stateDir, containerID+".json")
}

var containerIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// readSidecar returns the record for containerID (empty when there is none).
func (d *Driver) readSidecar(containerID string) (sidecar, error) {
	sc := sidecar{ContainerID: containerID, NICs: map[string]nicPrivate{}}
	if !containerIDRE.MatchString(containerID) {
		return sc, nil
	}
	data, ok, err := durable.ReadFileIfExists(d.sidecarPath(containerID))
	if err != nil {
		return sc, fmt.Errorf("NIC record: %w", err)
	}
	if !ok {
		return sc, nil
	}
	if _, err := durable.DecodeRecord(data, sidecarKind, sidecarVersion, &sc); err != nil {
		return sc, fmt.Errorf("NIC record %s: %w", d.sidecarPath(containerID), err)
	}
	if sc.NICs == nil {
		sc.NICs = map[string]nicPrivate{}
	}
	return sc, nil
}

// updateSidecar applies fn to containerID's record under the driver's lock and writes it
// durably (or removes it when no NIC is left).
func (d *Driver) updateSidecar(containerID string, owner substrate.Owner, fn func(nics map[string]nicPrivate)) error {
	if !containerIDRE.MatchString(containerID) {
		return fmt.Errorf("NIC record: %q is not a full container id", containerID)
	}
	mu := d.sidecarLock(containerID)
	mu.Lock()
	defer mu.Unlock()
	sc, err := d.readSidecar(containerID)
	if err != nil {
		sc = sidecar{ContainerID: containerID, NICs: map[string]nicPrivate{}} // a corrupt record is rewritten
	}
	if sc.Marker != owner.Marker() {
		sc.NICs = map[string]nicPrivate{} // another generation's record never carries over
	}
	sc.Marker = owner.Marker()
	fn(sc.NICs)
	if len(sc.NICs) == 0 {
		return d.removeSidecar(containerID)
	}
	data, err := durable.EncodeRecord(sidecarKind, sidecarVersion, sc)
	if err != nil {
		return err
	}
	linuxnet.PrepareStateDir(d.stateDir) // before the first record below the runtime root
	if err := durable.MkdirAll(d.stateDir, 0o700); err != nil {
		return fmt.Errorf("NIC record: %w", err)
	}
	if err := durable.WriteFile(d.sidecarPath(containerID), data, 0o600); err != nil {
		return fmt.Errorf("NIC record: %w", err)
	}
	return nil
}

// sidecarLock is the lock of containerID's record. Records of different containers do not
// share one, so their fsyncs overlap instead of queueing behind each other.
func (d *Driver) sidecarLock(containerID string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(containerID))
	return &d.sidecarMu[h.Sum32()%uint32(len(d.sidecarMu))]
}

func (d *Driver) removeSidecar(containerID string) error {
	if !containerIDRE.MatchString(containerID) {
		return nil
	}
	err := os.Remove(d.sidecarPath(containerID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("NIC record: %w", err)
	}
	return nil
}

// missingNICs lists the recorded attachments of containerID (wired for owner) that are not
// among present (guest interface names), sorted.
func (d *Driver) missingNICs(containerID string, owner substrate.Owner, present map[string]bool) ([]string, error) {
	sc, err := d.readSidecar(containerID)
	if err != nil {
		return nil, err
	}
	if sc.Marker != "" && sc.Marker != owner.Marker() {
		return nil, nil
	}
	var missing []string
	for name, p := range sc.NICs {
		if !present[p.GuestIf] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// sidecarResidue lists NIC records left for topology's nodes.
func (d *Driver) sidecarResidue(topology string) ([]substrate.Object, error) {
	entries, err := os.ReadDir(d.stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("NIC records: %w", err)
	}
	var out []substrate.Object
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !containerIDRE.MatchString(id) {
			continue
		}
		// A record that cannot be read may be one of topology's: an error, not "clean". One
		// removed since the listing (a parallel delete) reads as empty and is skipped.
		sc, err := d.readSidecar(id)
		if err != nil {
			return nil, fmt.Errorf("NIC records: %w", err)
		}
		if o, err := substrate.ParseMarker(sc.Marker); err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: "nic-record", ExternalID: d.sidecarPath(id), Owner: o})
		}
	}
	return out, nil
}
