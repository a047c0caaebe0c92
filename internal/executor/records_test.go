package executor

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestCheckpointedMatchesTheLog: Executor.Checkpointed hears of every record of an apply
// exactly once (the header first, the end last), with the number, address and step the log
// holds; ReadLog's Records are the same records, in log order; a summary carries nothing of the
// operation but its address, action and step.
func TestCheckpointedMatchesTheLog(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var heard []Record
	h.ex.Checkpointed = func(r Record) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, r)
	}
	// Read the log after each record while the run goes on; the fullest read before the end
	// record holds every other record (each is read after it became durable).
	var logged *Interrupted
	h.ex.AfterDurable = func(point string) {
		if point != PointCheckpoint {
			return
		}
		it, err := ReadLog(h.dir)
		if err != nil {
			t.Errorf("read the log during the run: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if it != nil && !it.Finished && (logged == nil || len(it.Records) > len(logged.Records)) {
			logged = it
		}
	}
	desired := topology(1, 3, true)
	h.mustApply(desired)

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(heard, func(i, j int) bool { return heard[i].Seq < heard[j].Seq })
	for i, r := range heard {
		if r.Seq != uint64(i+1) {
			t.Fatalf("heard records %v: record %d has seq %d (each once, none missing)", heard, i, r.Seq)
		}
		if r.At.IsZero() {
			t.Errorf("record %d: no time", r.Seq)
		}
	}
	if len(heard) < 2 || heard[0].Type != "run" || heard[0].Run == "" || heard[0].Command != "apply" || heard[len(heard)-1].Type != "end" {
		t.Fatalf("heard %+v: want the run header first and the end last", heard)
	}
	done := map[string]bool{}
	for _, r := range heard[1 : len(heard)-1] {
		if r.Type != "op" || r.Address == "" || r.Step == "" || r.Action == "" {
			t.Errorf("record %d: %+v, want an operation's address, action and step", r.Seq, r)
		}
		if r.Step == StepDone {
			done[r.Address] = true
		}
	}
	for _, a := range desired {
		if !done[a.Addr.String()] {
			t.Errorf("no record of %s done among %v", a.Addr, heard)
		}
	}

	// The last read before the end: its records are the first ones heard, field for field.
	if logged == nil {
		t.Fatal("the log was never read during the run")
	}
	if len(logged.Records) != len(heard)-1 {
		t.Fatalf("log read last during the run holds %d records, want all %d before the end", len(logged.Records), len(heard)-1)
	}
	for i, r := range logged.Records {
		if fmt.Sprint(r) != fmt.Sprint(heard[i]) {
			t.Errorf("log record %d: got %+v, heard %+v", i+1, r, heard[i])
		}
	}
	b, err := json.Marshal(heard)
	if err != nil {
		t.Fatal(err)
	}
	for _, private := range []string{secretValue, "WEB_TOKEN", "owner", "handle", "desired", "lineage"} {
		if strings.Contains(string(b), private) {
			t.Errorf("record summaries carry %q: %s", private, b)
		}
	}
}
