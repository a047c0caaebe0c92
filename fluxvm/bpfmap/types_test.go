package bpfmap

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAndNormalizeType(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"Hash", "Hash", false},
		{"hash", "Hash", false},
		{"lru_hash", "LRUHash", false},
		{"LRUHash", "LRUHash", false},
		{"BPF_MAP_TYPE_PERCPU_HASH", "PerCPUHash", false},
		{"lru_percpu_hash", "LRUCPUHash", false},
		{"lpm_trie", "LPMTrie", false},
		{"hash_of_maps", "HashOfMaps", false},
		{"prog_array", "ProgramArray", false},
		{"Hashish", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := NormalizeType(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("NormalizeType(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if tt.wantErr && !errors.Is(err, ErrUnknownType) {
			t.Errorf("NormalizeType(%q) error %v does not wrap ErrUnknownType", tt.in, err)
		}
	}
}

func TestGenericAndPolicy(t *testing.T) {
	tests := []struct {
		typ       string
		generic   bool
		deletable bool
		merge     error
		replace   error
	}{
		{"Hash", true, true, nil, nil},
		{"LRUHash", true, true, nil, nil},
		{"Array", true, false, nil, ErrNotDeletable},
		{"LPMTrie", true, false, nil, ErrNotDeletable},
		{"PerCPUHash", false, false, ErrNotGeneric, ErrNotGeneric},
		{"PerCPUArray", false, false, ErrNotGeneric, ErrNotGeneric},
		{"LRUCPUHash", false, false, ErrNotGeneric, ErrNotGeneric},
		{"HashOfMaps", false, false, ErrNotGeneric, ErrNotGeneric},
		{"ArrayOfMaps", false, false, ErrNotGeneric, ErrNotGeneric},
		{"ProgramArray", false, false, ErrNotGeneric, ErrNotGeneric},
		{"SockHash", false, false, ErrNotGeneric, ErrNotGeneric},
		{"RingBuf", false, false, ErrNotGeneric, ErrNotGeneric},
		{"Nonsense", false, false, ErrUnknownType, ErrUnknownType},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			if got := GenericType(tt.typ); got != tt.generic {
				t.Errorf("GenericType = %v, want %v", got, tt.generic)
			}
			if got := DeletableType(tt.typ); got != tt.deletable {
				t.Errorf("DeletableType = %v, want %v", got, tt.deletable)
			}
			if err := CheckPolicy(tt.typ, MetadataOnly); (err != nil) != (tt.merge == ErrUnknownType) {
				t.Errorf("CheckPolicy(metadata-only) = %v", err)
			}
			for _, c := range []struct {
				p    Policy
				want error
			}{{Merge, tt.merge}, {Replace, tt.replace}} {
				err := CheckPolicy(tt.typ, c.p)
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Errorf("CheckPolicy(%s) = %v, want %v", c.p, err, c.want)
				}
				if errors.Is(err, ErrNotGeneric) && !strings.Contains(err.Error(), "migration hook") {
					t.Errorf("CheckPolicy(%s) error %q does not point to migration hooks", c.p, err)
				}
			}
		})
	}
	if err := CheckPolicy("Hash", "copy-everything"); err == nil {
		t.Errorf("CheckPolicy with an unknown policy: got nil, want an error")
	}
}
