package statebench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/backend/postgres"
	"zyvor.dev/sysbox/internal/backend/sqlite"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// topology builds a state of n resources shaped like a lab: nodes with two attachments,
// attributes and a private envelope.
func topology(n int) *states.State {
	st := states.New()
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	for i := range n {
		a := addrs.MustParseInstance(fmt.Sprintf(`module.segment["s%d"].sysbox_node.host[%d]`, i/100, i%100))
		st.Resources = append(st.Resources, &states.Resource{
			Addr: a, SchemaVersion: 1, Driver: "netns", ExternalID: fmt.Sprintf("sbx-%08x", i),
			Attributes: json.RawMessage(fmt.Sprintf(`{"hostname":"host-%d","image":"sha256:%064x","cpus":1,"memory_mb":256,"env":{"TOKEN":"secret://env/TOKEN"}}`, i, i)),
			Attachments: []substrate.AttachmentState{
				{Name: "lan", MAC: fmt.Sprintf("02:00:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff), IPv4: []string{fmt.Sprintf("198.18.%d.%d/16", i/250, i%250+1)}, Gateway: "198.18.0.1",
					Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(fmt.Sprintf(`{"host_veth":"sbxh%08x","peer":"eth0"}`, i))}},
				{Name: "mgmt", MAC: fmt.Sprintf("02:01:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff), IPv4: []string{fmt.Sprintf("198.19.%d.%d/16", i/250, i%250+1)},
					Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(fmt.Sprintf(`{"host_veth":"sbxm%08x","peer":"eth1"}`, i))}},
			},
			Observation: states.Observation{Status: substrate.Present, At: now},
			Owner:       substrate.Owner{Topology: st.Lineage, Address: a.String(), Type: "sysbox_node", Generation: 1},
			Private:     &substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(fmt.Sprintf(`{"netns":"sbx-%08x","pid":%d}`, i, 1000+i))},
			CreatedAt:   now, UpdatedAt: now,
		})
	}
	st.Sort()
	return st
}

const size = 10000

// cpuTime is this process's user+system CPU time so far. Reported per operation next to ns/op,
// it is less distorted than wall time when other work shares the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU starts measuring; the returned func reports CPU ms per op of the loop since.
func measureCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
}

func BenchmarkEncode(b *testing.B) {
	st := topology(size)
	st.Serial = 1
	var n int
	done := measureCPU(b)
	for b.Loop() {
		data, err := states.Encode(st)
		if err != nil {
			b.Fatal(err)
		}
		n = len(data)
	}
	done()
	b.ReportMetric(float64(n)/1e6, "MB/state")
}

// BenchmarkEncodeNaiveIndent is the baseline states.Encode replaces: encoding/json's
// MarshalIndent of the same resources (what a Terraform-style state writer does).
func BenchmarkEncodeNaiveIndent(b *testing.B) {
	st := topology(size)
	var n int
	done := measureCPU(b)
	for b.Loop() {
		data, err := json.MarshalIndent(struct {
			Lineage   string             `json:"lineage"`
			Serial    uint64             `json:"serial"`
			Resources []*states.Resource `json:"resources"`
		}{st.Lineage, 1, st.Resources}, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		n = len(data)
	}
	done()
	b.ReportMetric(float64(n)/1e6, "MB/state")
}

func BenchmarkDecode(b *testing.B) {
	st := topology(size)
	st.Serial = 1
	data, err := states.Encode(st)
	if err != nil {
		b.Fatal(err)
	}
	done := measureCPU(b)
	for b.Loop() {
		if _, err := states.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	done()
}

type opener struct {
	name string
	open func(b *testing.B) backend.Backend
}

// openSaved opens a fresh backend and saves a state of size resources in it (serial 1).
func (o opener) openSaved(b *testing.B) backend.Backend {
	be := o.open(b)
	st := topology(size)
	st.Serial = 1
	if err := be.(backend.Writer).Save(context.Background(), st, 0); err != nil {
		b.Fatal(err)
	}
	return be
}

// backends lists the backends to measure; each open gives a fresh, empty state.
func backends() []opener {
	ctx := context.Background()
	out := []opener{
		{"local", func(b *testing.B) backend.Backend {
			lb, err := local.New(filepath.Join(b.TempDir(), "s.sbxstate"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { lb.Close() })
			return lb
		}},
		{"sqlite", func(b *testing.B) backend.Backend {
			sb, err := sqlite.New(ctx, filepath.Join(b.TempDir(), "s.db"), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sb.Close() })
			return sb
		}},
	}
	if dsn := os.Getenv("SYSBOX_TEST_PG_DSN"); dsn != "" {
		out = append(out, opener{"postgres", func(b *testing.B) backend.Backend {
			name := fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano())
			pb, err := postgres.New(ctx, dsn, name)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				for _, t := range []string{"sysbox_states", "sysbox_state_snapshots", "sysbox_state_locks"} {
					pb.DB().Exec(`DELETE FROM `+t+` WHERE name = $1`, name)
				}
				pb.Close()
			})
			return pb
		}})
	}
	return out
}

// BenchmarkSave measures one compare-and-swap save of a 10,000-resource state (encode,
// compare the stored serial, durable write) per backend.
func BenchmarkSave(b *testing.B) {
	ctx := context.Background()
	for _, o := range backends() {
		b.Run(fmt.Sprintf("%s/%d", o.name, size), func(b *testing.B) {
			be := o.open(b)
			st := topology(size)
			w := be.(backend.Writer)
			done := measureCPU(b)
			for b.Loop() {
				prev := st.Serial
				st.Serial++
				if err := w.Save(ctx, st, prev); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

// BenchmarkRead measures reading (and fully checking) a stored 10,000-resource state.
func BenchmarkRead(b *testing.B) {
	ctx := context.Background()
	for _, o := range backends() {
		b.Run(fmt.Sprintf("%s/%d", o.name, size), func(b *testing.B) {
			be := o.openSaved(b)
			done := measureCPU(b)
			for b.Loop() {
				got, err := be.Read(ctx)
				if err != nil || len(got.Resources) != size {
					b.Fatalf("read: %v", err)
				}
			}
			done()
		})
	}
}

// BenchmarkManagerMutate is a whole `state rm`-like operation: lock, read, check, snapshot,
// CAS save, unlock.
func BenchmarkManagerMutate(b *testing.B) {
	ctx := context.Background()
	for _, o := range backends() {
		b.Run(fmt.Sprintf("%s/%d", o.name, size), func(b *testing.B) {
			be := o.openSaved(b)
			m := backend.NewManager(be, backend.Options{})
			done := measureCPU(b)
			for b.Loop() {
				if _, err := m.Mutate(ctx, "bench", false, func(st *states.State) error {
					st.Resources[0].UpdatedAt = time.Now()
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

// BenchmarkSaveAfterChange is the executor's save: 50 of the 10,000 resources replaced (copy
// on write), then a CAS save of the whole state, with the whole state encoded ("whole") or
// with the executor's encoding cache, which encodes only the replaced resources ("cached").
func BenchmarkSaveAfterChange(b *testing.B) {
	for _, o := range backends() {
		for _, mode := range []string{"whole", "cached"} {
			b.Run(fmt.Sprintf("%s/%d/%s", o.name, size, mode), func(b *testing.B) {
				ctx := context.Background()
				if mode == "cached" {
					ctx = states.WithEncodeCache(ctx, states.NewEncodeCache())
				}
				be := o.open(b)
				st := topology(size)
				w := be.(backend.Writer)
				done := measureCPU(b)
				i := 0
				for b.Loop() {
					for range 50 {
						c := st.Resources[i%size].Clone()
						c.UpdatedAt = c.UpdatedAt.Add(time.Second)
						st.Resources[i%size] = c
						i += 199 // spread the changes over the state
					}
					prev := st.Serial
					st.Serial++
					if err := w.Save(ctx, st, prev); err != nil {
						b.Fatal(err)
					}
				}
				done()
			})
		}
	}
}
