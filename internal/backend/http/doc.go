// Package http keeps topology state behind a plain HTTP endpoint: GET reads it, PUT replaces
// it, DELETE removes it (S13).
//
// Invariants: the backend declares neither locking nor compare-and-swap — a PUT cannot know
// whether someone else wrote in between — so the state Manager refuses to mutate through it
// unless the caller passes --allow-unsafe-state and guarantees a single writer. What it
// reads is still checked like any state (version, checksum, ownership). Credentials in the
// URL never appear in its location or errors.
package http
