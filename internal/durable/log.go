package durable

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Log is an append-only file of records, one per line, each an envelope (see EncodeRecord)
// that may carry its sequence number (1, 2, … by position). Appends from concurrent callers
// are group-committed: records that arrive while a write+fsync is in flight go out together
// in the next one, and each caller returns only after its own record is durable. After a
// failed write or fsync nothing more is acknowledged; the bytes of a failed write are cut off
// again, so that a full disk leaves no torn record behind.
//
// The repair rule, applied by Open and reported by Read, is the only one: an incomplete final
// record (bytes after the last newline: a write cut short, never acknowledged) may be cut, and
// the cut is reported (Replay.Cut). Every complete record must decode and pass its checksum
// (a complete last record with a bad checksum is corruption, not a torn write), and a record
// numbered out of sequence (a lost or repeated record) is corruption too: both are refused
// with ErrCorrupt naming the record.
type Log struct {
	path string
	f    *os.File

	mu       sync.Mutex
	cond     *sync.Cond
	seq      uint64 // last sequence number assigned
	numbered bool   // records carry their sequence number (not for OpenLog)
	queue    [][]byte
	waiters  int    // appenders waiting for a record in queue to be durable
	next     uint64 // id of the batch being filled
	done     uint64 // id of the last batch made durable
	flushing bool
	err      error // sticky
	size     int64 // bytes written (valid records)
	synced   int64 // bytes known durable: size at the last successful fsync

	syncs, records, unsynced uint64
}

// Record is one record as a reader sees it.
type Record struct {
	Seq     uint64 // position in the log, from 1
	Version int
	Payload json.RawMessage
}

// Replay is what reading a log found.
type Replay struct {
	Records int
	Size    int64  // byte length of the valid prefix
	LastSeq uint64 // sequence number of the last valid record (0: none)
	// Cut is the length of an incomplete final record: cut off by Open, ignored by Read.
	Cut int64
}

// LogStats counts a log's records and fsyncs since it was opened (for benchmarks). Unsynced
// counts the records among Records appended by AppendSeqNoSync (not waited for).
type LogStats struct{ Records, Syncs, Unsynced uint64 }

// LogInfo describes what ReadLog found.
type LogInfo struct {
	Records int
	// Size is the byte length of the valid prefix.
	Size int64
}

// Create creates a new, empty log at path (an error wrapping os.ErrExist if one exists) and
// syncs its directory entry.
func Create(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create log %s: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("create log %s: %w", path, err)
	}
	return newLog(path, f, 0, 0, true), nil
}

// Open reads the existing log at path like Read, delivering each record to fn (may be nil),
// cuts an incomplete final record off (fsynced before it returns), and returns the log ready
// to append after the last valid record.
func Open(path, kind string, maxVersion int, fn func(Record) error) (*Log, Replay, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, Replay{}, fmt.Errorf("open log %s: %w", path, err)
	}
	rep, err := scan(f, path, kind, maxVersion, fn)
	if err == nil && rep.Cut > 0 {
		if err = f.Truncate(rep.Size); err == nil {
			err = f.Sync()
		}
		if err != nil {
			err = fmt.Errorf("open log %s: cut incomplete final record: %w", path, err)
		}
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekEnd)
	}
	if err != nil {
		f.Close()
		return nil, rep, err
	}
	return newLog(path, f, rep.LastSeq, rep.Size, true), rep, nil
}

// Read reads the log at path without changing it, delivering each record to fn (may be nil).
// An incomplete final record is reported in Replay.Cut and not delivered; any other damage is
// an error wrapping ErrCorrupt (see Log). A missing file is an error wrapping os.ErrNotExist.
func Read(path, kind string, maxVersion int, fn func(Record) error) (Replay, error) {
	f, err := os.Open(path)
	if err != nil {
		return Replay{}, fmt.Errorf("read log %s: %w", path, err)
	}
	defer f.Close()
	return scan(f, path, kind, maxVersion, fn)
}

func scan(f io.Reader, path, kind string, maxVersion int, fn func(Record) error) (Replay, error) {
	var rep Replay
	r := bufio.NewReaderSize(f, 64<<10)
	for n := uint64(1); ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			rep.Cut = int64(len(line))
			return rep, nil
		}
		if err != nil {
			return rep, fmt.Errorf("read log %s: %w", path, err)
		}
		env, err := openEnvelope(bytes.TrimSuffix(line, []byte{'\n'}), kind, maxVersion)
		if err != nil {
			return rep, fmt.Errorf("read log %s: record %d: %w", path, n, err)
		}
		// Unnumbered records (seq 0: older files, OpenLog) take their position.
		if env.Seq != 0 && env.Seq != n {
			return rep, fmt.Errorf("read log %s: record %d: %w: numbered %d (a record is missing or repeated)", path, n, ErrCorrupt, env.Seq)
		}
		if fn != nil {
			if err := fn(Record{Seq: n, Version: env.Version, Payload: env.Payload}); err != nil {
				return rep, fmt.Errorf("read log %s: record %d: %w", path, n, err)
			}
		}
		rep.Records++
		rep.Size += int64(len(line))
		rep.LastSeq = n
	}
}

// newLog returns the log of f, whose first size bytes are valid records already durable.
func newLog(path string, f *os.File, seq uint64, size int64, numbered bool) *Log {
	l := &Log{path: path, f: f, seq: seq, numbered: numbered, next: 1, size: size, synced: size}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// OpenLog opens (creating if needed) the log at path for appending unnumbered records. A newly
// created log's directory entry is synced. The caller should have validated the existing
// content with ReadLog: OpenLog refuses a log whose last line is unterminated (a torn tail),
// rather than append after it. New users should prefer Create and Open.
func OpenLog(path string) (*Log, error) {
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	if created {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("open log %s: %w", path, err)
		}
		if err := SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	if fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err != nil || last[0] != '\n' {
			f.Close()
			return nil, fmt.Errorf("open log %s: %w: torn tail (last record unterminated)", path, ErrCorrupt)
		}
	}
	return newLog(path, f, 0, fi.Size(), false), nil
}

// ReadLog reads every record of path, checking each one, and calls fn with each payload in
// order. A missing file is an empty log. Unlike Read, a torn last line is an error (wrapping
// ErrCorrupt) too; records before it were delivered.
func ReadLog(path, kind string, maxVersion int, fn func(version int, payload json.RawMessage) error) (LogInfo, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return LogInfo{}, nil
	}
	if err != nil {
		return LogInfo{}, fmt.Errorf("read log %s: %w", path, err)
	}
	defer f.Close()
	return ReadLogFrom(f, path, kind, maxVersion, fn)
}

// ReadLogFrom is ReadLog of a log the caller has already opened (or read) as r, so that what is
// checked is what is read: a caller that refuses symlinks opens the file once and reads that
// descriptor. path only names the log in errors.
func ReadLogFrom(r io.Reader, path, kind string, maxVersion int, fn func(version int, payload json.RawMessage) error) (LogInfo, error) {
	var each func(Record) error
	if fn != nil {
		each = func(r Record) error { return fn(r.Version, r.Payload) }
	}
	rep, err := scan(r, path, kind, maxVersion, each)
	info := LogInfo{Records: rep.Records, Size: rep.Size}
	switch {
	case err != nil:
		return info, err
	case rep.Cut > 0:
		return info, fmt.Errorf("read log %s: record %d: %w: torn tail (%d bytes without newline)", path, rep.Records+1, ErrCorrupt, rep.Cut)
	}
	return info, nil
}

// Append durably adds one record (see AppendSeq).
func (l *Log) Append(kind string, version int, payload any) error {
	return l.AppendSeq(kind, version, func(uint64) any { return payload })
}

// AppendSeq adds the record build returns for the next sequence number and returns once it is
// fsynced: only then is it acknowledged. build runs under the log's lock, in sequence order.
func (l *Log) AppendSeq(kind string, version int, build func(seq uint64) any) error {
	return l.appendSeq(kind, version, build, true)
}

// AppendSeqNoSync adds the record build returns like AppendSeq, in the same sequence, but does
// not wait for it to be durable: it is written (write(2), so a process killed afterwards keeps
// it) at once, or with the batch after the fsync in flight, and becomes durable with the next
// fsync of the log (the next AppendSeq, whoever calls it). A power loss before that may lose
// it, together with every later record: the log is always a prefix of what was appended. Use
// it only for a record whose loss the reader tolerates — one that guards no step taken before
// the next durable record. An error is a write error (sticky, as for AppendSeq).
func (l *Log) AppendSeqNoSync(kind string, version int, build func(seq uint64) any) error {
	return l.appendSeq(kind, version, build, false)
}

func (l *Log) appendSeq(kind string, version int, build func(seq uint64) any, wait bool) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	seq := l.seq + 1
	var envSeq uint64
	if l.numbered {
		envSeq = seq
	}
	b, err := encodeEnvelope(kind, version, envSeq, build(seq))
	if err != nil {
		l.mu.Unlock()
		return fmt.Errorf("append %s: %w", l.path, err)
	}
	l.seq = seq
	b = append(b, '\n')
	if !wait {
		l.unsynced++
		if l.flushing || len(l.queue) > 0 {
			// Goes out after the batch in flight, in sequence (see flush).
			l.queue = append(l.queue, b)
		} else {
			// Nobody else writes while nothing is flushing: write it now, under the lock.
			l.writeLocked([][]byte{b})
		}
		err = l.err
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, b)
	l.waiters++
	my := l.next
	for l.done < my && l.err == nil {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flush()
	}
	err = l.err
	l.mu.Unlock()
	return err
}

// flush writes and fsyncs the queued batch (called with the lock held and nothing flushing; it
// releases the lock during the I/O). Records appended without waiting that arrive meanwhile
// and are not followed by a waiting one are written (not synced) before it returns, so that
// no record stays in memory once its appender has returned and the flush is over.
func (l *Log) flush() {
	l.flushing = true
	batch, id, base := l.queue, l.next, l.size
	l.queue, l.waiters = nil, 0
	l.next++
	l.mu.Unlock()
	n, werr := writeSync(l.f, base, batch)
	l.mu.Lock()
	if werr != nil {
		l.err = fmt.Errorf("append %s: %w", l.path, werr)
	} else {
		l.size += n
		l.synced = l.size
		l.done = id
		l.syncs++
		l.records += uint64(len(batch))
	}
	if l.waiters == 0 {
		l.writeQueuedLocked() // l.next stays: these records belong to no batch anyone waits for
	}
	l.flushing = false
	l.cond.Broadcast()
}

// writeQueuedLocked writes (without fsync) the records queued without waiters, if the log has
// not failed; called with the lock held and nothing flushing.
func (l *Log) writeQueuedLocked() {
	if len(l.queue) == 0 || l.err != nil {
		return
	}
	q := l.queue
	l.queue = nil
	l.writeLocked(q)
}

// writeLocked writes records without fsync, with the lock held (nothing is flushing).
func (l *Log) writeLocked(batch [][]byte) {
	n, err := writeAt(l.f, l.size, batch)
	if err != nil {
		l.err = fmt.Errorf("append %s: %w", l.path, err)
		return
	}
	l.size += n
	l.records += uint64(len(batch))
}

// writeAt writes batch at the end of f, whose valid length is size; a short write is cut back.
func writeAt(f *os.File, size int64, batch [][]byte) (int64, error) {
	b := batch[0]
	if len(batch) > 1 {
		b = bytes.Join(batch, nil)
	}
	if _, err := f.Write(b); err != nil {
		// A full disk cuts a write short: take the partial record back off, or the next reader
		// finds a torn tail where no record was acknowledged.
		if terr := cutBack(f, size); terr != nil {
			return 0, fmt.Errorf("%w (and removing the partly written record: %v)", err, terr)
		}
		return 0, err
	}
	return int64(len(b)), nil
}

func writeSync(f *os.File, size int64, batch [][]byte) (int64, error) {
	n, err := writeAt(f, size, batch)
	if err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("fsync: %w", err)
	}
	return n, nil
}

// cutBack truncates f to size and syncs it, leaving the offset at the end for the next write.
func cutBack(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		return err
	}
	return f.Sync()
}

// Path is the log's file path.
func (l *Log) Path() string { return l.path }

// Stats returns the records and fsyncs done since the log was opened.
func (l *Log) Stats() LogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LogStats{Records: l.records, Syncs: l.syncs, Unsynced: l.unsynced}
}

// Durable runs fn with the byte length of the log's durable prefix (as of its last completed
// fsync) while no append can be acknowledged: what a power loss at this instant may leave of
// the file (a test cuts the file back to it to simulate one).
func (l *Log) Durable(fn func(size int64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(l.synced)
}

// Close closes the log, first writing (not syncing) any record still queued.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	for l.flushing {
		l.cond.Wait()
	}
	if l.f == nil {
		l.mu.Unlock()
		return nil
	}
	l.writeQueuedLocked()
	err := l.f.Close()
	l.f = nil
	l.mu.Unlock()
	return err
}

// Decode unmarshals the record's payload into v, refusing unknown fields (a payload this
// build does not fully understand is not guessed at).
func (r Record) Decode(v any) error {
	dec := json.NewDecoder(bytes.NewReader(r.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("payload: %w: %v", ErrCorrupt, err)
	}
	return nil
}
