package upgrade

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJournalOnTornWrite applies durable's one repair rule to the journal at every byte of its
// last record (etcd's TestOpenOnTornWrite): a journal cut anywhere inside that record reads as
// the records before it and names the torn tail, and only that tail is ever cut — by
// repairTornTail, which the operator asks for with --repair-torn-tail; the cut is reported by
// its length. A complete last record with any byte flipped is corruption, never cut.
func TestJournalOnTornWrite(t *testing.T) {
	r := newRig(t, "a")
	p := r.plan("tx")
	crashAt(t, r.engine(), p, "step-done:a:apply")
	dir := TxDir(p)
	path := filepath.Join(dir, JournalFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadJournal(dir)
	if err != nil || len(all) < 2 {
		t.Fatalf("intact journal: %d records, %v", len(all), err)
	}
	last := bytes.LastIndexByte(good[:len(good)-1], '\n') + 1 // start of the last record
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	for cut := last + 1; cut < len(good); cut++ { // every proper prefix of the last record
		write(good[:cut])
		evs, err := ReadJournal(dir)
		if !errors.Is(err, ErrJournalCorrupt) || !strings.Contains(err.Error(), "--repair-torn-tail") {
			t.Fatalf("cut at %d: got %v, want a torn tail that names --repair-torn-tail", cut, err)
		}
		if len(evs) != len(all)-1 {
			t.Fatalf("cut at %d: %d records before the tear, want %d", cut, len(evs), len(all)-1)
		}
		n, err := repairTornTail(dir)
		if err != nil || n != cut-last {
			t.Fatalf("cut at %d: repair cut %d bytes (%v), want %d", cut, n, err, cut-last)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, good[:last]) {
			t.Fatalf("cut at %d: repaired journal is not the records before the tear", cut)
		}
		if evs, err := ReadJournal(dir); err != nil || len(evs) != len(all)-1 {
			t.Fatalf("cut at %d: after repair %d records, %v", cut, len(evs), err)
		}
	}

	for i := last; i < len(good)-1; i++ { // every byte of the complete last record but its newline
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		write(b)
		if _, err := ReadJournal(dir); !errors.Is(err, ErrJournalCorrupt) {
			t.Fatalf("flip at %d: got %v, want ErrJournalCorrupt", i, err)
		}
		if n, err := repairTornTail(dir); err == nil || n != 0 {
			t.Fatalf("flip at %d: repair cut %d bytes (%v), want a refusal", i, n, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
			t.Fatalf("flip at %d: a refused repair changed the journal", i)
		}
	}
}
