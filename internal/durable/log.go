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
	next     uint64 // id of the batch being filled
	done     uint64 // id of the last batch made durable
	flushing bool
	err      error // sticky

	syncs, records uint64
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

// LogStats counts a log's records and fsyncs since it was opened (for benchmarks).
type LogStats struct{ Records, Syncs uint64 }

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
	return newLog(path, f, 0, true), nil
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
	return newLog(path, f, rep.LastSeq, true), rep, nil
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

func newLog(path string, f *os.File, seq uint64, numbered bool) *Log {
	l := &Log{path: path, f: f, seq: seq, numbered: numbered, next: 1}
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
	} else if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err != nil || last[0] != '\n' {
			f.Close()
			return nil, fmt.Errorf("open log %s: %w: torn tail (last record unterminated)", path, ErrCorrupt)
		}
	}
	return newLog(path, f, 0, false), nil
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
	l.queue = append(l.queue, append(b, '\n'))
	my := l.next
	for l.done < my && l.err == nil {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flushing = true
		batch, id := l.queue, l.next
		l.queue = nil
		l.next++
		l.mu.Unlock()
		werr := writeSync(l.f, batch)
		l.mu.Lock()
		l.flushing = false
		if werr != nil {
			l.err = fmt.Errorf("append %s: %w", l.path, werr)
		} else {
			l.done = id
			l.syncs++
			l.records += uint64(len(batch))
		}
		l.cond.Broadcast()
	}
	err = l.err
	l.mu.Unlock()
	return err
}

func writeSync(f *os.File, batch [][]byte) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := f.Write(bytes.Join(batch, nil)); err != nil {
		// A full disk cuts a write short: take the partial record back off, or the next reader
		// finds a torn tail where no record was acknowledged.
		if terr := cutBack(f, fi.Size()); terr != nil {
			return fmt.Errorf("%w (and removing the partly written record: %v)", err, terr)
		}
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
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
	return LogStats{Records: l.records, Syncs: l.syncs}
}

// Close closes the log.
func (l *Log) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
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
