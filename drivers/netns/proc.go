package netns

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

const sidecarKind = "sysbox.netns.node"

// sidecar is the driver's durable record of one node, next to its namespace. It never holds
// the command line or environment (they may carry secrets).
type sidecar struct {
	Marker     string    `json:"marker"`
	Netns      string    `json:"netns"`
	NsInode    uint64    `json:"ns_inode"`
	HasCommand bool      `json:"has_command"`
	Pid        int       `json:"pid,omitempty"`
	StartTime  uint64    `json:"start_time,omitempty"` // /proc/PID/stat field 22
	StartedAt  time.Time `json:"started_at,omitzero"`
	Stopped    bool      `json:"stopped,omitempty"`
}

func (d *Driver) sidecarPath(name string) string { return filepath.Join(d.StateDir, name+".json") }
func (d *Driver) logPath(name string) string     { return filepath.Join(d.StateDir, name+".log") }

func (d *Driver) writeSidecar(s sidecar) error {
	if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	b, err := durable.EncodeRecord(sidecarKind, 1, s)
	if err != nil {
		return err
	}
	return durable.WriteFile(d.sidecarPath(s.Netns), b, 0o600)
}

func (d *Driver) readSidecar(name string) (sidecar, error) {
	var s sidecar
	b, err := os.ReadFile(d.sidecarPath(name))
	if err != nil {
		return s, err
	}
	_, err = durable.DecodeRecord(b, sidecarKind, 1, &s)
	return s, err
}

// procStartTime reads field 22 of /proc/PID/stat (clock ticks after boot).
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := bytes.Fields(b[i+1:])
	// after ")" come fields 3.. ; starttime is field 22 → index 19
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	if f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, fmt.Errorf("/proc/%d: zombie", pid)
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// processAlive reports whether pid is still the process recorded (same start time) and still
// lives in the namespace with inode ino.
func processAlive(pid int, start, ino uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := procStartTime(pid)
	if err != nil || st != start {
		return false
	}
	got, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return err == nil && got == ino
}

// pidsInNetns lists processes whose network namespace has inode ino, as seen by a scan of
// /proc that started after the call.
func pidsInNetns(ino uint64) []int { return procs.pidsIn(ino) }

// procs shares scans of /proc between concurrent callers: one scan records the network
// namespace of every process, and serves every caller that was waiting when it started. Each
// scan costs one stat per process on the host, and apply and destroy of N nodes need a few per
// node; scanning once per caller made both O(N²) (the largest cost of destroy at 1,000 nodes).
var procs = newProcScanner()

type procScanner struct {
	mu      sync.Mutex
	cond    *sync.Cond
	started uint64           // scans started so far
	done    uint64           // number of the latest finished scan
	byIno   map[uint64][]int // its result: pids by network-namespace inode
}

func newProcScanner() *procScanner {
	s := &procScanner{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// pidsIn waits for a scan that started after the call (never an older one: a process started
// before the call must be seen) and returns the pids it found in namespace ino.
func (s *procScanner) pidsIn(ino uint64) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	need := s.started + 1
	for s.done < need {
		if s.started > s.done { // a scan is running; it may have started before this call
			s.cond.Wait()
			continue
		}
		s.started++
		n := s.started
		s.mu.Unlock()
		m := scanProcNetns()
		s.mu.Lock()
		s.byIno, s.done = m, n
		s.cond.Broadcast()
	}
	return slices.Clone(s.byIno[ino])
}

// scanProcNetns maps network-namespace inodes to the processes in them (this process excluded).
func scanProcNetns() map[uint64][]int {
	ents, _ := os.ReadDir("/proc")
	out := map[uint64][]int{}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if got, err := nsInode("/proc/" + e.Name() + "/ns/net"); err == nil {
			out[got] = append(out[got], pid)
		}
	}
	return out
}

// killAndWait SIGKILLs pid (if it is still the recorded process in namespace ino) and waits,
// at most wait, until it is gone; callers check the namespace afterwards in any case.
func killAndWait(pid int, start, ino uint64, wait time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(wait)
	for processAlive(pid, start, ino) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// killNetnsProcesses SIGKILLs every process in the namespace and waits (bounded) until none
// is left.
func killNetnsProcesses(ino uint64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pids := pidsInNetns(ino)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in the namespace after SIGKILL", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ownerFromSidecar decodes the marker a sidecar recorded.
func ownerFromSidecar(s sidecar) (substrate.Owner, error) { return substrate.ParseMarker(s.Marker) }

// orphanMain finds a process that a killed StartNode started but never recorded: it lives in the
// namespace with inode ino, leads its own session (StartNode uses setsid), and runs exactly argv.
// The oldest such process wins.
func orphanMain(ino uint64, argv []string) (pid int, start uint64, ok bool) {
	want := strings.Join(argv, "\x00")
	for _, p := range pidsInNetns(ino) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 20 || f[0][0] == 'Z' || string(f[3]) != strconv.Itoa(p) { // field 6: session id
			continue
		}
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err != nil || strings.TrimRight(string(cmd), "\x00") != want {
			continue
		}
		st, err := strconv.ParseUint(string(f[19]), 10, 64)
		if err != nil {
			continue
		}
		if !ok || st < start {
			pid, start, ok = p, st, true
		}
	}
	return pid, start, ok
}
