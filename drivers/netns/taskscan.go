package netns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// A scan of /proc costs one stat of /proc/PID/ns/net per process, ~10 µs each on this kind of
// host (a syscall with a path walk), and destroy needs one scan per few deleted nodes while the
// host holds one process per node: O(N²), the largest cost of destroying 1,000 nodes. A BPF task
// iterator reads the same fact (each thread-group leader's network namespace) for every task in
// one read, inside the kernel: the same O(processes) walk, at a fraction of a microsecond each.
// It is only a way to list candidates faster: every kill still re-checks the process's
// namespace through /proc first (killInNetns).

// taskRecord is what the iterator program writes per task: the task's thread-group id and
// thread id, its network namespace's inode (0 while it has none: exiting), and the thread-group
// id of the reader as the kernel sees it (to prove the ids are in our pid namespace).
const taskRecordSize = 16

// taskIter is the loaded iterator, once per process; its error says why it is not used.
var taskIter = sync.OnceValues(loadTaskIter)

// errNoTaskIter wraps every reason the iterator cannot be used (no BTF, no iterator support,
// not allowed); callers then scan /proc.
var errNoTaskIter = errors.New("BPF task iterator unavailable")

// scanNetns maps network-namespace inodes to the thread-group leaders in them (this process
// excluded): through the task iterator when the kernel offers it, else by reading /proc.
func scanNetns() map[uint64][]int {
	if it, err := taskIter(); err == nil {
		if m, err := scanTasksNetns(it); err == nil {
			return m
		}
	}
	return scanProcNetns()
}

// scanTasksNetns runs one pass of the iterator.
func scanTasksNetns(it *link.Iter) (map[uint64][]int, error) {
	r, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: open: %w", errNoTaskIter, err)
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(64 << 10) // a few thousand tasks in one or two reads
	if _, err := b.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("%w: read: %w", errNoTaskIter, err)
	}
	return parseTaskRecords(b.Bytes(), os.Getpid())
}

// parseTaskRecords turns the iterator's output into pids by namespace inode, keeping thread-group
// leaders (what /proc/PID/ns/net describes) other than self. Every record names the reader's
// thread-group id as the kernel sees it; when that is not self, the ids are not this pid
// namespace's and the output is refused.
func parseTaskRecords(b []byte, self int) (map[uint64][]int, error) {
	if len(b)%taskRecordSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes of output, not a multiple of %d", errNoTaskIter, len(b), taskRecordSize)
	}
	out := map[uint64][]int{}
	for ; len(b) > 0; b = b[taskRecordSize:] {
		tgid := binary.NativeEndian.Uint32(b[0:])
		pid := binary.NativeEndian.Uint32(b[4:])
		ino := binary.NativeEndian.Uint32(b[8:])
		reader := binary.NativeEndian.Uint32(b[12:])
		if int64(reader) != int64(self) {
			return nil, fmt.Errorf("%w: the kernel names this process %d, not %d (another pid namespace)", errNoTaskIter, reader, self)
		}
		if tgid != pid || ino == 0 || int64(tgid) == int64(self) {
			continue
		}
		out[uint64(ino)] = append(out[uint64(ino)], int(tgid))
	}
	return out, nil
}

// loadTaskIter builds, loads and attaches the iterator program. Field offsets come from the
// running kernel's BTF, so the program needs no compiler and no CO-RE relocation.
func loadTaskIter() (*link.Iter, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: kernel BTF: %w", errNoTaskIter, err)
	}
	var off taskOffsets
	if err := off.resolve(spec); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoTaskIter, err)
	}
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "sysbox_tasknet",
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceIter,
		AttachTo:     "task",
		License:      "Dual MIT/GPL", // bpf_seq_write is for GPL-compatible programs only
		Instructions: off.program(),
	}, ebpf.ProgramOptions{KernelTypes: spec})
	if err != nil {
		return nil, fmt.Errorf("%w: load: %w", errNoTaskIter, err)
	}
	defer prog.Close() // the link keeps its own reference
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return nil, fmt.Errorf("%w: attach: %w", errNoTaskIter, err)
	}
	return it, nil
}

// taskOffsets are byte offsets of the fields the program reads.
type taskOffsets struct {
	tgid, pid, nsproxy int16 // in struct task_struct
	netNs              int16 // in struct nsproxy
	inum               int16 // of ns.inum in struct net
}

func (o *taskOffsets) resolve(spec *btf.Spec) error {
	for _, f := range []struct {
		dst  *int16
		typ  string
		path []string
	}{
		{&o.tgid, "task_struct", []string{"tgid"}},
		{&o.pid, "task_struct", []string{"pid"}},
		{&o.nsproxy, "task_struct", []string{"nsproxy"}},
		{&o.netNs, "nsproxy", []string{"net_ns"}},
		{&o.inum, "net", []string{"ns", "inum"}},
	} {
		var s *btf.Struct
		if err := spec.TypeByName(f.typ, &s); err != nil {
			return fmt.Errorf("struct %s: %w", f.typ, err)
		}
		var t btf.Type = s
		var total uint32
		for _, name := range f.path {
			m, at, ok := findMember(t, name)
			if !ok {
				return fmt.Errorf("struct %s: no member %v", f.typ, f.path)
			}
			t, total = m.Type, total+at
		}
		if total > math.MaxInt16 {
			return fmt.Errorf("struct %s: %v at offset %d, beyond a load's reach", f.typ, f.path, total)
		}
		*f.dst = int16(total)
	}
	return nil
}

// findMember finds name in a struct or union, also inside anonymous members (task_struct keeps
// fields in randomizable anonymous groups), and returns its byte offset.
func findMember(t btf.Type, name string) (btf.Member, uint32, bool) {
	var members []btf.Member
	switch c := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	default:
		return btf.Member{}, 0, false
	}
	for _, m := range members {
		if m.Name == name && m.BitfieldSize == 0 && m.Offset%8 == 0 {
			return m, uint32(m.Offset / 8), true
		}
		if m.Name == "" {
			if in, at, ok := findMember(m.Type, name); ok {
				return in, uint32(m.Offset/8) + at, true
			}
		}
	}
	return btf.Member{}, 0, false
}

// program writes one taskRecord per task:
//
//	if (!ctx->task) return 0;
//	rec = {task->tgid, task->pid, task->nsproxy ? task->nsproxy->net_ns->ns.inum : 0, current tgid};
//	bpf_seq_write(ctx->meta->seq, &rec, 16);
//
// Pointers read from the task are BTF pointers: the kernel turns a fault into a zero.
func (o taskOffsets) program() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R7, asm.R1, 0, asm.DWord), // ctx->meta
		asm.LoadMem(asm.R8, asm.R1, 8, asm.DWord), // ctx->task
		asm.JEq.Imm(asm.R8, 0, "out"),
		asm.LoadMem(asm.R1, asm.R8, o.tgid, asm.Word),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R8, o.pid, asm.Word),
		asm.StoreMem(asm.RFP, -12, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, -8, 0, asm.Word),
		asm.LoadMem(asm.R1, asm.R8, o.nsproxy, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "write"),
		asm.LoadMem(asm.R1, asm.R1, o.netNs, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "write"),
		asm.LoadMem(asm.R1, asm.R1, o.inum, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
		asm.FnGetCurrentPidTgid.Call().WithSymbol("write"),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, 0, asm.DWord), // meta->seq
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.Mov.Imm(asm.R3, taskRecordSize),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}
