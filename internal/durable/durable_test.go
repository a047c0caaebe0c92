package durable

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/testenv"
)

func TestWriteFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != "two" {
		t.Fatalf("got %q, want %q", got, "two")
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("got mode %v, want 0600", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
}

func TestWriteFileFuncErrorLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFileFunc(p, 0o600, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want wrapping boom", err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != "old" {
		t.Fatalf("got %q, want old content kept", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
	// The buffers are pooled: what the failed write left buffered must not reach the next one.
	for i := range 4 {
		want := fmt.Sprintf("new %d", i)
		if err := WriteFileFunc(p, 0o600, func(w io.Writer) error { _, err := io.WriteString(w, want); return err }); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Fatalf("after a failed write: got %q, want %q", got, want)
		}
	}
}

func TestRecordRoundTripAndRejections(t *testing.T) {
	type payload struct{ A int }
	b, err := EncodeRecord("journal", 2, payload{A: 7})
	if err != nil {
		t.Fatal(err)
	}
	var got payload
	v, err := DecodeRecord(b, "journal", 2, &got)
	if err != nil || v != 2 || got.A != 7 {
		t.Fatalf("got %v %d %+v, want nil 2 {7}", err, v, got)
	}
	if _, err := DecodeRecord(b, "journal", 1, &got); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("newer version: got %v, want ErrUnknownVersion", err)
	}
	if _, err := DecodeRecord(b, "state", 2, &got); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("kind: got %v, want ErrWrongKind", err)
	}
	tampered := []byte(strings.Replace(string(b), `{"A":7}`, `{"A":8}`, 1))
	if _, err := DecodeRecord(tampered, "journal", 2, &got); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered: got %v, want ErrCorrupt", err)
	}
	if _, err := DecodeRecord(b[:len(b)-3], "journal", 2, &got); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: got %v, want ErrCorrupt", err)
	}
}

func TestLogAppendReadAndTornTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal")
	l, err := OpenLog(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Append("step", 1, map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	var seen []int
	info, err := ReadLog(p, "step", 1, func(v int, raw json.RawMessage) error {
		var m map[string]int
		json.Unmarshal(raw, &m)
		seen = append(seen, m["n"])
		return nil
	})
	if err != nil || info.Records != 3 || len(seen) != 3 || seen[2] != 2 {
		t.Fatalf("got %v %+v %v, want 3 records 0..2", err, info, seen)
	}
	// Tear the tail: half a record without newline.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"step","vers`)
	f.Close()
	info, err = ReadLog(p, "step", 1, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "record 4") || info.Records != 3 {
		t.Fatalf("torn tail: got %v %+v, want ErrCorrupt at record 4 after 3 good", err, info)
	}
	if _, err := OpenLog(p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OpenLog on torn tail: got %v, want ErrCorrupt", err)
	}
}

func TestLockExcludesOtherProcess(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	l, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file description, so a second Lock in this process conflicts too;
	// a separate process (flock(1) if present) proves the cross-process case.
	if _, err := Lock(p); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: got %v, want ErrLocked", err)
	} else if le := (*LockedError)(nil); !errors.As(err, &le) || !strings.Contains(le.Holder, "pid ") {
		t.Fatalf("holder not reported: %v", err)
	}
	// flock(1) is a separate process: a missing one skips only through testenv (a failure
	// under SYSBOX_TEST_REQUIRE_ALL), never silently.
	flock := testenv.RequireBinary(t, "flock")
	if out, err := exec.Command(flock, "-n", p, "true").CombinedOutput(); err == nil {
		t.Fatalf("flock(1) took a held lock: %s", out)
	} else if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("flock(1) -n on a held lock: got %v (%s), want exit status 1 (lock held)", err, out)
	}
	if locked, err := IsLocked(p); err != nil || !locked {
		t.Fatalf("IsLocked: got %v %v, want true", locked, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("lock file must stay after unlock: %v", err)
	}
	if locked, err := IsLocked(p); err != nil || locked {
		t.Fatalf("IsLocked after unlock: got %v %v, want false", locked, err)
	}
	l2, err := Lock(p)
	if err != nil {
		t.Fatalf("relock: %v", err)
	}
	l2.Unlock()
}

// ReadFileIfExists: only a path with no directory entry is absent; a dangling symlink and a
// directory are errors.
func TestReadFileIfExists(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadFileIfExists(filepath.Join(dir, "none")); ok || err != nil {
		t.Fatalf("absent: got ok=%v err=%v, want false, nil", ok, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "gone"), link); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadFileIfExists(link); ok || !errors.Is(err, ErrDanglingSymlink) {
		t.Fatalf("dangling symlink: got ok=%v err=%v, want ErrDanglingSymlink", ok, err)
	}
	if _, ok, err := ReadFileIfExists(dir); ok || err == nil {
		t.Fatalf("directory: got ok=%v err=%v, want an error", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gone"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, ok, err := ReadFileIfExists(link); !ok || err != nil || string(data) != "x" {
		t.Fatalf("symlink to a file: got %q ok=%v err=%v", data, ok, err)
	}
}

// A SIGKILLed holder's flock can outlive it for a moment in a child that was between fork and
// exec when the kill landed (its copy of the descriptor closes at exec). Lock waits for that
// when the recorded holder is dead, and only then: a live holder is reported at once, and a dead
// holder's lock that is never released is still refused after the grace.
func TestLockWaitsOutADeadHoldersInheritedDescriptor(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	defer func(g time.Duration) { deadHolderGrace = g }(deadHolderGrace)
	deadHolderGrace = 5 * time.Second

	// hold takes the flock through a separate open file description (the "child's copy") and
	// records holder as the lock's owner.
	hold := func(t *testing.T, p, holder string) *os.File {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(holder+"\n"), 0); err != nil {
			t.Fatal(err)
		}
		return f
	}

	t.Run("dead holder, released later", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "lock")
		f := hold(t, p, fmt.Sprintf("pid %d (sysbox reset) since 2026-12-01T00:00:00Z", deadPID))
		// releasing is closed just before the descriptor: closing it after would race with a
		// Lock that rightly succeeds the moment the flock goes.
		releasing := make(chan struct{})
		go func() { time.Sleep(300 * time.Millisecond); close(releasing); f.Close() }()
		l, err := Lock(p)
		if err != nil {
			t.Fatalf("got %v, want the lock once the inherited descriptor closed", err)
		}
		select {
		case <-releasing:
		default:
			t.Fatal("Lock succeeded while the descriptor still held the flock")
		}
		l.Unlock()
	})
	t.Run("live holder", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "lock")
		f := hold(t, p, "pid 1 (init) since 2026-12-01T00:00:00Z")
		defer f.Close()
		if _, err := Lock(p); !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want ErrLocked", err)
		}
	})
	t.Run("dead holder, never released", func(t *testing.T) {
		deadHolderGrace = 100 * time.Millisecond
		p := filepath.Join(t.TempDir(), "lock")
		f := hold(t, p, fmt.Sprintf("pid %d (sysbox reset) since 2026-12-01T00:00:00Z", deadPID))
		defer f.Close()
		if _, err := Lock(p); !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want ErrLocked after the grace", err)
		}
	})
}

// TestAppendEnvelopeMatchesJSON holds the envelope written field by field to its definition:
// json.Marshal of the envelope with the payload's json.Marshal encoding in it.
func TestAppendEnvelopeMatchesJSON(t *testing.T) {
	payloads := []any{
		struct{ A int }{7},
		map[string]any{"html": "<a href='x'>&</a>", "sep": "\u2028\u2029", "nested": []any{1.5, nil, true, map[string]string{"k": "\x01\xff"}}},
		json.RawMessage(`{ "spaced" : [1, 2] }`),
		"a string",
		nil,
	}
	for _, kind := range []string{"sysbox-plan", `odd "kind" <&>`} {
		for _, seq := range []uint64{0, 1, 1 << 40} {
			for i, p := range payloads {
				raw, err := json.Marshal(p)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(raw)
				want, err := json.Marshal(envelope{Kind: kind, Version: 3, Seq: seq, SHA256: hex.EncodeToString(sum[:]), Payload: raw})
				if err != nil {
					t.Fatal(err)
				}
				got, err := encodeEnvelope(kind, 3, seq, p)
				if err != nil || string(got) != string(want) {
					t.Errorf("kind %q seq %d payload %d: encodeEnvelope got %s (%v), want %s", kind, seq, i, got, err, want)
				}
				if seq != 0 {
					continue
				}
				got = AppendRecordJSON([]byte("prefix"), kind, 3, raw)
				if string(got) != "prefix"+string(want) {
					t.Errorf("kind %q payload %d: AppendRecordJSON got %s, want prefix%s", kind, i, got, want)
				}
				var back any
				if _, err := DecodeRecord(got[len("prefix"):], kind, 3, &back); err != nil {
					t.Errorf("kind %q payload %d: DecodeRecord: %v", kind, i, err)
				}
			}
		}
	}
}

// TestTempTarget: the temporary file a write really creates is recognised and names its
// target; lookalikes are not.
func TestTempTarget(t *testing.T) {
	dir := t.TempDir()
	var tmpName string
	err := WriteFileTo(filepath.Join(dir, "sb-0123456789-g2.json"), 0o600, func(f *os.File) error {
		tmpName = filepath.Base(f.Name())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := TempTarget(tmpName); !ok || got != "sb-0123456789-g2.json" {
		t.Fatalf("TempTarget(%q) = %q, %v; want sb-0123456789-g2.json, true", tmpName, got, ok)
	}
	for _, name := range []string{"sb-1.json", ".sb-1.json", ".sb-1.json.tmp-", ".sb-1.json.tmp-12x", "sb-1.json.tmp-12", "..tmp-12", ".tmp-12", ".a.tmp-1/2"} {
		if got, ok := TempTarget(name); ok {
			t.Errorf("TempTarget(%q) = %q, true; want not a temporary file", name, got)
		}
	}
}
