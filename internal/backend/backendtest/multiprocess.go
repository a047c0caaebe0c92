package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
)

func testProcessLock(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	c := startChild(t, "hold", s, "")
	id := c.expect(t, "LOCKED ")
	l := locker(t, b)
	start := time.Now()
	_, err := l.Lock(ctx, backend.NewLockInfo("apply"))
	var le *backend.LockedError
	if !errors.As(err, &le) || le.Holder.PID != c.cmd.Process.Pid || le.Holder.ID != id || le.Holder.Operation != "child-hold" {
		t.Fatalf("got %v (holder %+v), want *LockedError naming child pid %d lock %s", err, le, c.cmd.Process.Pid, id)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a held lock took %s to refuse, want an immediate refusal", d)
	}
	if _, err := backend.LockWait(ctx, l, backend.NewLockInfo("apply"), 100*time.Millisecond); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("wait 100ms: got %v, want ErrLocked", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		io.WriteString(c.stdin, "release\n")
	}()
	id2, err := backend.LockWait(ctx, l, backend.NewLockInfo("apply"), 30*time.Second)
	if err != nil {
		t.Fatalf("waiting for the child to release: %v", err)
	}
	c.expect(t, "UNLOCKED")
	if err := l.Unlock(ctx, id2); err != nil {
		t.Fatal(err)
	}
}

func testProcessCrash(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	c := startChild(t, "hold", s, "")
	id := c.expect(t, "LOCKED ")
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	l := locker(t, b)
	if !b.Describe().Capabilities.Has(backend.ForceUnlock) {
		// A lock that cannot be force-unlocked must end with its holder.
		lid, err := l.Lock(ctx, backend.NewLockInfo("apply"))
		if err != nil {
			t.Fatalf("lock after the holder was killed: got %v, want it free (this backend has no force-unlock)", err)
		}
		l.Unlock(ctx, lid)
		return
	}
	// A lock that outlives its holder is reported with the dead holder's info and removed by
	// force-unlock with its ID.
	_, err := l.Lock(ctx, backend.NewLockInfo("apply"))
	var le *backend.LockedError
	if !errors.As(err, &le) || le.Holder.ID != id {
		t.Fatalf("got %v, want *LockedError naming the killed holder's lock %s", err, id)
	}
	if err := backend.NewManager(b, backend.Options{}).ForceUnlock(ctx, id); err != nil {
		t.Fatal(err)
	}
	lid, err := l.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatalf("lock after force-unlock: %v", err)
	}
	l.Unlock(ctx, lid)
}

func testProcessCAS(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	seed := newState(0)
	if err := writer(t, b).Save(ctx, seed, 0); err != nil {
		t.Fatal(err)
	}
	const perWriter = 25
	writers := []string{"a", "b"}
	var wg sync.WaitGroup
	results := make([]string, len(writers))
	children := make([]*childProc, len(writers))
	for i, name := range writers {
		children[i] = startChild(t, "cas", s, name+":"+strconv.Itoa(perWriter))
	}
	// Start both writers at once, after each has opened the backend.
	for _, c := range children {
		c.expect(t, "READY")
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
	}
	for i, c := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line, ok := <-c.lines
			if !ok {
				line = "child exited without a result"
			}
			results[i] = line
		}()
	}
	wg.Wait()
	conflicts := 0
	for i, r := range results {
		n, ok := strings.CutPrefix(r, "DONE conflicts=")
		if !ok {
			t.Fatalf("writer %s: %s", writers[i], r)
		}
		k, _ := strconv.Atoi(n)
		conflicts += k
	}
	got := read(t, b)
	if want := uint64(1 + perWriter*len(writers)); got.Serial != want {
		t.Fatalf("got serial %d, want %d", got.Serial, want)
	}
	for _, name := range writers {
		for i := range perWriter {
			a := addrs.MustParseInstance(fmt.Sprintf("sysbox_node.%s[%d]", name, i))
			if got.Resource(a) == nil {
				t.Fatalf("lost update: %s missing from the final state (%d resources)", a, len(got.Resources))
			}
		}
	}
	t.Logf("%d updates from %d processes, %d CAS conflicts retried, none lost", perWriter*len(writers), len(writers), conflicts)
}

// testProcessKilledMidSave SIGKILLs a process that saves a large state in a loop, at varying
// moments; every time, the stored state must read back whole (never torn) with at least the
// serial the child reported saved.
func testProcessKilledMidSave(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	if err := writer(t, b).Save(ctx, newState(2000), 0); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		c := startChild(t, "save-loop", s, "")
		c.expect(t, "SAVED ")
		last := uint64(0)
		deadline := time.After(time.Duration(20+round*35) * time.Millisecond)
	drain:
		for {
			select {
			case line, ok := <-c.lines:
				if !ok {
					break drain
				}
				if n, ok := strings.CutPrefix(line, "SAVED "); ok {
					last, _ = strconv.ParseUint(n, 10, 64)
				}
			case <-deadline:
				break drain
			}
		}
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.cmd.Wait()
		for line := range c.lines {
			if n, ok := strings.CutPrefix(line, "SAVED "); ok {
				last, _ = strconv.ParseUint(n, 10, 64)
			}
		}
		st, err := b.Read(ctx)
		if err != nil {
			t.Fatalf("round %d: read after SIGKILL mid-save: %v", round, err)
		}
		if st.Serial < last || len(st.Resources) != 2000 {
			t.Fatalf("round %d: got serial %d with %d resources, want at least serial %d (acknowledged) and 2000", round, st.Serial, len(st.Resources), last)
		}
		// The next writer continues from what is stored. On a database server the killed
		// client's last COMMIT may still land after this read: CAS then refuses, and a re-read
		// sees it — exactly the protection CAS exists for.
		for attempt := 0; ; attempt++ {
			st.Serial++
			err := writer(t, b).Save(ctx, st, st.Serial-1)
			if err == nil {
				break
			}
			if !errors.Is(err, backend.ErrConflict) || attempt == 5 {
				t.Fatalf("round %d: save after the crash: %v", round, err)
			}
			time.Sleep(50 * time.Millisecond)
			if st, err = b.Read(ctx); err != nil {
				t.Fatalf("round %d: re-read: %v", round, err)
			}
		}
	}
}
