package upgrade

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestStateWriteFailed: only the transaction directory refusing a write for lack of space or
// write access stops the engine; the same errno on a component's own file is the step's failure.
func TestStateWriteFailed(t *testing.T) {
	dir := "/var/lib/fluxvm/x/tx"
	pe := func(path string, errno syscall.Errno) error {
		return fmt.Errorf("component a: snapshot: durable write: %w", &fs.PathError{Op: "write", Path: path, Err: errno})
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{pe(dir+"/logs/a.apply.1.log", syscall.ENOSPC), true},
		{pe(dir+"/snapshots/a/maps/.m.snap.tmp-1", syscall.EROFS), true},
		{pe(dir+"/journal.final.json", syscall.EDQUOT), true},
		{pe("/etc/a.conf", syscall.ENOSPC), false},      // restoring a component's file: the step failed
		{pe(dir+"x/logs/a.log", syscall.ENOSPC), false}, // a sibling directory, not this transaction
		{pe(dir+"/logs/a.apply.1.log", syscall.EACCES), false},
		{fmt.Errorf("hook: %w", syscall.ENOSPC), false}, // no file named
		{nil, false},
	} {
		if got := stateWriteFailed(dir, tt.err); got != tt.want {
			t.Errorf("stateWriteFailed(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
