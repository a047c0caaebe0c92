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
)

// Log is an append-only file of records, one per line. Append syncs before returning.
type Log struct {
	f    *os.File
	path string
}

// LogInfo describes what ReadLog found.
type LogInfo struct {
	Records int
	// Size is the byte length of the valid prefix.
	Size int64
}

// OpenLog opens (creating if needed) the log at path for appending. A newly created log's
// directory entry is synced. The caller should have validated the existing content with ReadLog:
// OpenLog refuses a log whose last line is unterminated (a torn tail), rather than append after it.
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
	return &Log{f: f, path: path}, nil
}

// Append writes one record and fsyncs. Only after it returns nil is the record acknowledged.
func (l *Log) Append(kind string, version int, payload any) error {
	b, err := EncodeRecord(kind, version, payload)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("append %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("append %s: fsync: %w", l.path, err)
	}
	return nil
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

// ReadLog reads every record of path, checking each one, and calls fn with each payload in
// order. A missing file is an empty log. A torn last line or any corrupt record is returned as an
// error wrapping ErrCorrupt that names the record number; records before it were delivered.
func ReadLog(path, kind string, maxVersion int, fn func(version int, payload json.RawMessage) error) (LogInfo, error) {
	var info LogInfo
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("read log %s: %w", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				return info, fmt.Errorf("read log %s: record %d: %w: torn tail (%d bytes without newline)", path, n, ErrCorrupt, len(line))
			}
			return info, nil
		}
		if err != nil {
			return info, fmt.Errorf("read log %s: %w", path, err)
		}
		v, payload, err := openRecord(bytes.TrimSuffix(line, []byte{'\n'}), kind, maxVersion)
		if err != nil {
			return info, fmt.Errorf("read log %s: record %d: %w", path, n, err)
		}
		if fn != nil {
			if err := fn(v, payload); err != nil {
				return info, fmt.Errorf("read log %s: record %d: %w", path, n, err)
			}
		}
		info.Records++
		info.Size += int64(len(line))
	}
}
