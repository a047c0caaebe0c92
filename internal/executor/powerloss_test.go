package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/executor/failpoint"
)

// Power loss: the crash tests kill the process, which keeps every record written; a power loss
// also loses what was written after the log's last fsync (the progress markers syncedBefore
// lets go unsynced). These tests kill the command at every checkpoint record, cut the log back
// to the length that was fsynced at that instant, and check that recovery converges as after a
// kill: state and world agree, nothing leaked or duplicated, a second recovery does nothing,
// and re-running the command ends where an uninterrupted run does. The world (the fake
// driver's file) is kept whole: the external objects outlive the power loss, the harder case.

// envPowerLoss names the file where the helper writes the log's fsynced length before each
// failpoint.
const envPowerLoss = "SYSBOX_EXEC_POWERLOSS"

// powerLossTrace makes ex write the current checkpoint log's durable length to path at every
// checkpoint failpoint, holding the log's lock so that no record becomes acknowledged between
// the measurement and the kill.
func powerLossTrace(ex *Executor, fp *failpoint.Set, path string) {
	var cur atomic.Pointer[Log]
	ex.logOpened = func(l *Log) { cur.Store(l) }
	ex.AfterDurable = func(point string) {
		l := cur.Load()
		if point != PointCheckpoint || l == nil {
			fp.Hit(point) // the run header: fsynced, nothing to cut
			return
		}
		l.dl.Durable(func(size int64) {
			if err := os.WriteFile(path, []byte(strconv.FormatInt(size, 10)), 0o600); err != nil {
				panic(err)
			}
			fp.Hit(point)
		})
	}
}

// cutToDurable cuts dir's checkpoint log back to the length the killed helper reported as
// fsynced and returns how many bytes it cut.
func cutToDurable(t *testing.T, dir, lenFile string) int64 {
	t.Helper()
	b, err := os.ReadFile(lenFile)
	if os.IsNotExist(err) {
		return 0 // killed at the run header (fsynced)
	}
	if err != nil {
		t.Fatal(err)
	}
	size, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, CheckpointFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < size {
		t.Fatalf("checkpoint log is %d bytes, shorter than its fsynced length %d", fi.Size(), size)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return fi.Size() - size
}

// powerLossAtEach is killAtEach at every checkpoint record with the log cut back to its fsynced
// length; it returns how many of the kills lost bytes.
func powerLossAtEach(t *testing.T, base, cmd string, after func(t *testing.T, dir, what string), env ...string) int {
	t.Helper()
	lossy := 0
	exectest.KillLoop{Point: PointCheckpoint, Exact: true, After: after,
		Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
			dir := t.TempDir()
			copyDir(t, base, dir)
			aux := t.TempDir()
			trace, lenFile := filepath.Join(aux, "trace"), filepath.Join(aux, "durable")
			runEnv := append(env[:len(env):len(env)], failpoint.EnvTrace+"="+trace,
				failpoint.EnvSpec+"="+PointCheckpoint+"@"+strconv.Itoa(n), envPowerLoss+"="+lenFile)
			r := runHelper(t, dir, cmd, runEnv...)
			if r.Killed {
				if cut := cutToDurable(t, dir, lenFile); cut > 0 {
					lossy++
				}
			}
			return r, exectest.Traced(t, trace, PointCheckpoint), dir
		}}.Kill(t, cmd+" with power loss")
	return lossy
}

func TestPowerLossAtEveryRecord(t *testing.T) {
	applied, convergeApply := setupApply, convergeCrashApply
	convergeDestroy := convergeCrashDestroy
	for _, sc := range []struct {
		name, cmd string
		setup     func(t *testing.T, dir string)
		converge  func(t *testing.T, dir string)
		env       []string
		wantLossy bool // some kill must find unsynced records to lose
	}{
		{name: "create", cmd: "apply", setup: func(*testing.T, string) {}, converge: convergeApply, wantLossy: true},
		{name: "create-sequential", cmd: "apply", setup: func(*testing.T, string) {}, converge: convergeApply, env: []string{"SYSBOX_CRASH_PARALLELISM=1"}, wantLossy: true},
		{name: "create-parallel", cmd: "apply", setup: func(*testing.T, string) {}, converge: convergeApply, env: []string{"SYSBOX_CRASH_PARALLELISM=8"}, wantLossy: true},
		{name: "replace", cmd: "replace", setup: applied, converge: convergeApply, wantLossy: true},
		{name: "delete", cmd: "destroy", setup: applied, converge: convergeDestroy, wantLossy: true},
		{name: "reset", cmd: "reset", setup: applied, converge: convergeApply, wantLossy: true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			base := t.TempDir()
			sc.setup(t, base)
			lossy := powerLossAtEach(t, base, sc.cmd, func(t *testing.T, dir, what string) {
				checkRecovered(t, dir, what)
				sc.converge(t, dir)
			}, sc.env...)
			t.Logf("%d kills lost unsynced records", lossy)
			if sc.wantLossy && lossy == 0 {
				t.Fatal("no kill lost a record: the test simulated no power loss")
			}
		})
	}
}

// TestProgressMarkersUnsynced: of a sequential apply's and destroy's records, exactly the
// progress markers (each node's wired, started and done, every other created object's done;
// each deletion's deleted and done) are left to the next fsync, and every other record is
// fsynced before its operation goes on (one fsync each, as nothing runs concurrently).
func TestProgressMarkersUnsynced(t *testing.T) {
	h := newHarness(t)
	h.ex.Parallelism, h.ex.FixedParallelism = 1, true
	var recs []Record
	var mu sync.Mutex
	h.ex.Checkpointed = func(r Record) {
		mu.Lock()
		defer mu.Unlock()
		if r.Type == "op" {
			recs = append(recs, r)
		}
	}
	check := func(what string, c Stats, wantMarkers uint64) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		var markers uint64
		for _, r := range recs {
			if !syncedBefore(&OpState{Op: r.Action, Step: r.Step}) {
				markers++
			}
		}
		if markers != wantMarkers {
			t.Fatalf("%s: %d progress markers among records %+v, want %d", what, markers, recs, wantMarkers)
		}
		// +1: the run header (the end record comes after the count).
		if c.Records != uint64(len(recs))+1 || c.Unsynced != markers || c.Syncs != c.Records-c.Unsynced {
			t.Fatalf("%s: checkpoint stats %+v for %d operation records (%d markers): want every record but the markers fsynced on its own", what, c, len(recs), markers)
		}
		recs = nil
	}
	const nodes = 3
	res := h.mustApply(topology(1, nodes, false)) // an artifact, a network, 3 nodes
	check("apply", res.Checkpoint, 2+3*nodes)
	dres, _, err := h.ex.Destroy(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check("destroy", dres.Checkpoint, 2*(2+nodes))
}
