package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/procfs"
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
	if err := d.removeStaleTemps(s.Netns); err != nil { // a killed earlier write's (leftovers.go)
		return err
	}
	b, err := durable.EncodeRecord(sidecarKind, 1, s)
	if err != nil {
		return err
	}
	return durable.WriteFile(d.sidecarPath(s.Netns), b, 0o600)
}

func (d *Driver) readSidecar(name string) (sidecar, error) {
	return readSidecarFile(d.sidecarPath(name))
}

// readSidecarFile reads and decodes the sidecar record at path (a sidecar, or a temporary file
// of a sidecar write).
func readSidecarFile(path string) (sidecar, error) {
	var s sidecar
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	_, err = durable.DecodeRecord(b, sidecarKind, 1, &s)
	return s, err
}

// processAlive reports whether pid is still the process recorded (same start time) and still
// lives in the namespace with inode ino.
func processAlive(pid int, start, ino uint64) bool {
	if !procfs.Alive(pid, start) {
		return false
	}
	got, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return err == nil && got == ino
}

// pidsInNetns lists processes whose network namespace has inode ino, as seen by a scan that
// started after the call.
func pidsInNetns(ino uint64) []int { return procs.pidsIn(ino) }

// procs shares scans between concurrent callers: one scan records the network namespace of
// every process, and serves every caller that was waiting when it started. Each scan reads
// every process on the host, and destroy of N nodes needs about one per node; scanning once
// per caller made it O(N²) (the largest cost of destroy at 1,000 nodes).
var procs = newProcScanner(scanNetns)

type procScanner struct {
	scan    func() map[uint64][]int
	mu      sync.Mutex
	cond    *sync.Cond
	asked   uint64           // calls so far (for tests: how many callers have asked)
	started uint64           // scans started so far
	done    uint64           // number of the latest finished scan
	byIno   map[uint64][]int // its result: pids by network-namespace inode
}

func newProcScanner(scan func() map[uint64][]int) *procScanner {
	s := &procScanner{scan: scan}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// pidsIn waits for a scan that started after the call (never an older one: a process started
// before the call must be seen) and returns the pids it found in namespace ino. A scan running
// when the call comes may have started before it, so the caller waits for the next one, which
// serves every caller waiting when it starts.
func (s *procScanner) pidsIn(ino uint64) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	need := s.started + 1
	for s.done < need {
		if s.started > s.done { // a scan is running; it may have started before this call
			s.cond.Wait()
			continue
		}
		s.started++
		n := s.started
		s.mu.Unlock()
		m := s.scan()
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
// is left. A scan only names candidates: each is signalled only after its namespace is checked
// again through a pidfd (killInNetns), so a pid that was reused since the scan is left alone.
func killNetnsProcesses(ino uint64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pids := pidsInNetns(ino)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			killInNetns(p, ino)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in the namespace after SIGKILL", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killInNetns SIGKILLs pid only if it lives in the namespace with inode ino. The pidfd pins
// the process the check looks at: if pid is reused after the pidfd is opened, the signal goes
// to the exited process (ESRCH), never to the newcomer.
func killInNetns(pid int, ino uint64) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone (or no pidfd support: then nothing is signalled, and the caller's next scan sees it still there)
	}
	defer unix.Close(fd)
	if got, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/net"); err != nil || got != ino {
		return
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// ownerFromSidecar decodes the marker a sidecar recorded.
func ownerFromSidecar(s sidecar) (substrate.Owner, error) { return substrate.ParseMarker(s.Marker) }

// orphanMain finds a process that a killed StartNode started but never recorded: it lives in the
// namespace with inode ino, leads its own session (StartNode uses setsid), and runs exactly argv.
// The oldest such process wins.
func orphanMain(ino uint64, argv []string) (pid int, start uint64, ok bool) {
	want := strings.Join(argv, "\x00")
	for _, p := range pidsInNetns(ino) {
		st, err := procfs.ReadStat(p)
		if err != nil || st.Exited() || st.Session != p {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err != nil || strings.TrimRight(string(cmd), "\x00") != want {
			continue
		}
		if !ok || st.StartTime < start {
			pid, start, ok = p, st.StartTime, true
		}
	}
	return pid, start, ok
}
