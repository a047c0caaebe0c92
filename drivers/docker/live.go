package docker

import (
	"bytes"
	"os"
	"strconv"
	"sync"

	"github.com/docker/docker/api/types/container"
)

// The calls that follow a start in one apply — wire the NICs, configure the guest network,
// write the hosts file, start (a no-op then) — need to know only that the container runs, its
// init's host pid (for its network namespace) and its hosts file. The driver keeps that from
// the inspect that saw the container running and, instead of inspecting again, checks in /proc
// that the pid is still a process of that container: /proc/PID/cgroup names the container id
// only while PID is one of its processes. A container that stopped, restarted or exited has
// no process under that pid (or the pid was reused outside it), and the call inspects as before.
// The check is as fresh as an inspect: either may be overtaken by a stop right after it.

// running is what the calls above need of a running container.
type running struct {
	ID        string
	Pid       int
	HostsPath string
}

// liveCache maps full container ids to the running instance last seen.
type liveCache struct {
	mu   sync.Mutex
	byID map[string]running
}

// note returns ins as a running instance when ins shows a running container with a pid, and
// remembers it when that pid is one of the container's processes.
func (c *liveCache) note(ins container.InspectResponse) (running, bool) {
	if ins.ContainerJSONBase == nil || ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		return running{}, false
	}
	r := running{ID: ins.ID, Pid: ins.State.Pid, HostsPath: ins.HostsPath}
	if !containerIDRE.MatchString(r.ID) || !inContainer(r.Pid, r.ID) {
		return r, true // running as the daemon says; not remembered
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]running{}
	}
	c.byID[r.ID] = r
	return r, true
}

// lookup returns the remembered instance of id if its pid is still one of its processes.
func (c *liveCache) lookup(id string) (running, bool) {
	c.mu.Lock()
	r, ok := c.byID[id]
	c.mu.Unlock()
	if !ok {
		return r, false
	}
	if !inContainer(r.Pid, id) {
		c.forget(id)
		return running{}, false
	}
	return r, true
}

func (c *liveCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
}

// inContainer reports whether process pid belongs to container id's cgroup (the daemon puts
// every process of a container there, under a path naming its full id).
func inContainer(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && bytes.Contains(b, []byte(id))
}
