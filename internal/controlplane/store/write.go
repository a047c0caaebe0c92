package store

import (
	"context"
	"database/sql"
	"sync"
)

// writer serialises a store's writes on SQLite. SQLite has one writer at a time anyway; left
// to itself, a writer that finds the database busy sleeps in SQLite's busy handler (with
// back-off up to 100 ms), which under 50 concurrent agents costs latency and, when a deferred
// read upgrades to a write, fails outright. Waiting here instead queues writers in order and
// honours ctx. PostgreSQL takes row locks itself: no writer there.
type writer chan struct{}

func (w writer) lock(ctx context.Context) (unlock func(), err error) {
	if w == nil {
		return func() {}, nil
	}
	select {
	case w <- struct{}{}:
		return func() { <-w }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// exec runs one write statement.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	unlock, err := s.writes.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.db.ExecContext(ctx, query, args...)
}

// write runs fn in a write transaction (IMMEDIATE on SQLite) and commits it; op names it in
// errors. An error from fn rolls back and is returned as it is.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	unlock, err := s.writes.lock(ctx)
	if err != nil {
		return s.wrap(op, err)
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(op+": commit", err)
	}
	return nil
}

// watch wakes the waiters of a topic when the store wrote what they wait for. It is
// in-process: a second server process on the same PostgreSQL database does not wake this
// one's waiters, so every wait is bounded and re-reads the database.
type watch struct {
	mu     sync.Mutex
	topics map[string]chan struct{}
}

// changed returns a channel closed at the next notify of topic.
func (w *watch) changed(topic string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.topics == nil {
		w.topics = map[string]chan struct{}{}
	}
	c, ok := w.topics[topic]
	if !ok {
		c = make(chan struct{})
		w.topics[topic] = c
	}
	return c
}

func (w *watch) notify(topics ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range topics {
		if c, ok := w.topics[t]; ok {
			close(c)
			delete(w.topics, t)
		}
	}
}

// RunsTopic changes when a run of project may have become claimable (one was queued).
func RunsTopic(project string) string { return "runs/" + project }

// RunTopic changes when the run got events or its status changed.
func RunTopic(run string) string { return "run/" + run }

// Changed returns a channel closed at the next change of topic (RunsTopic, RunTopic) that
// this store handle writes. Take it before reading what it guards, so a change between the
// read and the wait is not missed.
func (s *Store) Changed(topic string) <-chan struct{} { return s.watch.changed(topic) }
