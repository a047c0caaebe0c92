package durable

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestFailedAppendLeavesNoTornRecord fills a small tmpfs with appends (kernel tier): the append
// that runs out of space is cut short by the kernel, and it must not leave its partial record in
// the file, where the next reader would find a torn tail that was never acknowledged. Both ways
// of opening a log for appending are covered.
func TestFailedAppendLeavesNoTornRecord(t *testing.T) {
	open := map[string]func(string) (*Log, error){
		"Create":  Create,
		"OpenLog": OpenLog,
	}
	for name, openFn := range open {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			testenv.MountTmpfs(t, dir, 8) // two pages
			p := filepath.Join(dir, "x.log")
			l, err := openFn(p)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			pad := strings.Repeat("x", 700) // records straddle page boundaries
			acked := 0
			for i := 1; i <= 100; i++ {
				err = l.Append(testKind, 1, struct {
					N   int    `json:"n"`
					Pad string `json:"pad"`
				}{i, pad})
				if err != nil {
					break
				}
				acked++
			}
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), p) {
				t.Fatalf("append on a full disk after %d records: %v (want ENOSPC naming %s)", acked, err, p)
			}
			if err := l.Append(testKind, 1, step{N: 0}); err == nil {
				t.Fatal("an append after a failed one was acknowledged")
			}
			rep, err := Read(p, testKind, 1, nil)
			if err != nil || rep.Cut != 0 || rep.Records != acked {
				t.Fatalf("log after the failed append: %+v, %v; want %d complete records and no torn tail", rep, err, acked)
			}
		})
	}
}
