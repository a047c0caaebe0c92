package netns

import (
	"bytes"
	"fmt"
	"io"
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

// A sidecar file is a short log: one record per line, the last one that decodes is the node's
// record. writeSidecar replaces the file with one record (a temporary file renamed over it,
// then its directory synced); appendSidecar adds a record at its end and syncs the file, which
// makes no new inode, frees none and renames nothing: an update of a node that already has a
// sidecar (StartNode, StopNode) costs one write and one fsync. A crash (kill -9 or power loss)
// during an append leaves the earlier records and at most a torn final fragment, which readers
// skip and the next append cuts off: the record before it stands, as if the append had not
// begun. A sidecar of earlier versions is one record without a newline: read as it is, and
// ended with a newline before the first append.

// sidecarCompactAt is the size beyond which an update rewrites the sidecar instead of
// appending (a node stopped and started very often).
const sidecarCompactAt = 16 << 10

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
	return durable.WriteFile(d.sidecarPath(s.Netns), append(b, '\n'), 0o600)
}

// appendSidecar records s as the node's sidecar by appending it (see above); a missing,
// unreadable or large sidecar is replaced (writeSidecar) instead.
func (d *Driver) appendSidecar(s sidecar) error {
	path := d.sidecarPath(s.Netns)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return d.writeSidecar(s)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, sidecarCompactAt+1))
	if err != nil || len(data) > sidecarCompactAt {
		return d.writeSidecar(s)
	}
	_, end, err := lastSidecar(data, path)
	if err != nil {
		return d.writeSidecar(s)
	}
	if err := d.removeStaleTemps(s.Netns); err != nil {
		return err
	}
	b, err := durable.EncodeRecord(sidecarKind, 1, s)
	if err != nil {
		return err
	}
	rec := make([]byte, 0, len(b)+2)
	if end > 0 && data[end-1] != '\n' {
		rec = append(rec, '\n') // an earlier version's unterminated record
	}
	rec = append(append(rec, b...), '\n')
	// Cut a torn fragment off first (each step leaves a readable file), then write the record
	// after the last whole one and sync it.
	if int64(end) < int64(len(data)) {
		if err := f.Truncate(int64(end)); err != nil {
			return fmt.Errorf("sidecar %s: cut torn record: %w", path, err)
		}
	}
	if _, err := f.WriteAt(rec, int64(end)); err != nil {
		return fmt.Errorf("sidecar %s: append: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sidecar %s: sync: %w", path, err)
	}
	return nil
}

func (d *Driver) readSidecar(name string) (sidecar, error) {
	return readSidecarFile(d.sidecarPath(name))
}

// readSidecarFile reads and decodes the sidecar record at path (a sidecar, or a temporary file
// of a sidecar write): its last record.
func readSidecarFile(path string) (sidecar, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return sidecar{}, err
	}
	s, _, err := lastSidecar(b, path)
	return s, err
}

// lastSidecar decodes data, a sidecar's content, and returns its last record and the length of
// the prefix of whole records. Every newline-terminated line must decode (anything else is
// damage, not a torn write); the bytes after the last newline are a record of an earlier
// version if they decode, else a torn append, which is skipped. No record at all is an error.
func lastSidecar(data []byte, path string) (sidecar, int, error) {
	var last sidecar
	found, end := false, 0
	for len(data[end:]) > 0 {
		line := data[end:]
		i := bytes.IndexByte(line, '\n')
		whole := i >= 0
		if whole {
			line = line[:i]
		}
		var s sidecar
		if _, err := durable.DecodeRecord(line, sidecarKind, 1, &s); err != nil {
			if whole {
				return sidecar{}, 0, fmt.Errorf("sidecar %s: %w", path, err)
			}
			break // a torn final append
		}
		last, found = s, true
		if !whole {
			end = len(data)
			break
		}
		end += i + 1
	}
	if !found {
		return sidecar{}, 0, fmt.Errorf("sidecar %s: no complete record", path)
	}
	return last, end, nil
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
