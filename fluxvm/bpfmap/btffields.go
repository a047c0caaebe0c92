package bpfmap

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Values of a Hash, Array, LRU hash or LPM trie are plain bytes unless their BTF type holds a
// kernel object: a bpf_timer, a workqueue, a kptr, a linked list or rbtree node/root, a refcount.
// User space reads those fields as zeroes and cannot write them, so a byte-wise restore would
// silently drop them (a timer that never fires, a reference that is gone). Such maps are
// recorded but not restored generically (F11), like per-CPU maps. bpf_spin_lock fields are
// fine: the kernel skips them on copy in both directions.

// specialStructs are BTF struct names of value fields that hold kernel state.
var specialStructs = map[string]bool{
	"bpf_timer": true, "bpf_wq": true, "bpf_list_head": true, "bpf_list_node": true,
	"bpf_rb_root": true, "bpf_rb_node": true, "bpf_refcount": true, "bpf_task_work": true,
}

// specialField returns a description of the first field in t that holds kernel state, or "".
func specialField(t btf.Type) string {
	seen := map[btf.Type]bool{}
	var walk func(t btf.Type, path string) string
	walk = func(t btf.Type, path string) string {
		if t == nil || seen[t] {
			return ""
		}
		seen[t] = true
		switch v := t.(type) {
		case *btf.Struct:
			if specialStructs[v.Name] {
				return fmt.Sprintf("%s (struct %s)", strings.TrimPrefix(path, "."), v.Name)
			}
			for _, m := range v.Members {
				if r := walk(m.Type, path+"."+m.Name); r != "" {
					return r
				}
			}
		case *btf.Union:
			for _, m := range v.Members {
				if r := walk(m.Type, path+"."+m.Name); r != "" {
					return r
				}
			}
		case *btf.Array:
			return walk(v.Type, path+"[]")
		case *btf.Typedef:
			return walk(v.Type, path)
		case *btf.Volatile:
			return walk(v.Type, path)
		case *btf.Const:
			return walk(v.Type, path)
		case *btf.Restrict:
			return walk(v.Type, path)
		case *btf.TypeTag:
			if strings.Contains(v.Value, "kptr") {
				return fmt.Sprintf("%s (%s)", strings.TrimPrefix(path, "."), v.Value)
			}
			return walk(v.Type, path)
		case *btf.Pointer:
			// A kptr is a pointer whose target carries a kptr type tag.
			if tt, ok := v.Target.(*btf.TypeTag); ok && strings.Contains(tt.Value, "kptr") {
				return fmt.Sprintf("%s (%s)", strings.TrimPrefix(path, "."), tt.Value)
			}
		}
		return ""
	}
	return walk(t, "")
}

// mapBTFInfo is the head of struct bpf_map_info up to btf_vmlinux_id.
type mapBTFInfo struct {
	Type                  uint32
	ID                    uint32
	KeySize               uint32
	ValueSize             uint32
	MaxEntries            uint32
	MapFlags              uint32
	Name                  [16]byte
	Ifindex               uint32
	BTFVmlinuxValueTypeID uint32
	NetnsDev              uint64
	NetnsIno              uint64
	BTFID                 uint32
	BTFKeyTypeID          uint32
	BTFValueTypeID        uint32
	BTFVmlinuxID          uint32
}

type objInfoAttr struct {
	FD      uint32
	InfoLen uint32
	Info    unsafe.Pointer
}

// valueSpecialField inspects the map's BTF value type, if it has one. It returns "" when the
// value has no field holding kernel state, or when the map carries no BTF (then nothing in the
// value can be such a field: the kernel only allows them in maps with BTF).
func valueSpecialField(m *ebpf.Map) (string, error) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return "", nil
	}
	var info mapBTFInfo
	attr := &objInfoAttr{FD: uint32(m.FD()), InfoLen: uint32(unsafe.Sizeof(info)), Info: unsafe.Pointer(&info)}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	runtime.KeepAlive(attr)
	if errno != 0 {
		return "", fmt.Errorf("map info: %w", errno)
	}
	if info.BTFID == 0 || info.BTFValueTypeID == 0 {
		return "", nil
	}
	h, err := btf.NewHandleFromID(btf.ID(info.BTFID))
	if err != nil {
		return "", fmt.Errorf("map BTF %d: %w", info.BTFID, err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return "", fmt.Errorf("map BTF %d: %w", info.BTFID, err)
	}
	t, err := spec.TypeByID(btf.TypeID(info.BTFValueTypeID))
	if err != nil {
		return "", fmt.Errorf("map BTF %d: value type %d: %w", info.BTFID, info.BTFValueTypeID, err)
	}
	return specialField(t), nil
}
