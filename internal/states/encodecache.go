package states

import (
	"bytes"
	"context"
	"slices"
	"sync"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// An EncodeCache keeps each resource's encoded JSON between encodes of one evolving state (the
// executor's working state, saved after every batch of changes), so that a save re-encodes
// only the resources that changed since the last one instead of all of them. It rides in the
// context (WithEncodeCache) so that every backend's save path uses it without a new parameter;
// EncodeContext and EncodeToContext read it.
//
// An entry is used only when the resource equals, field by field and byte by byte, the private
// copy taken when it was encoded. A resource changed in place (against the copy-on-write habit
// of the executor) is therefore encoded again, never served stale. The one exception is the
// dependency list: it is shared with the plan and with other resources and never edited in
// place (State.Move copies it before rewriting it), so the same list (same backing array and
// length) counts as equal without comparing its elements; comparing 100-entry lists cost as
// much as encoding them. It costs a copy of each resource (its dependency list shared) and of
// its encoding.
type EncodeCache struct {
	mu    sync.Mutex
	m     map[*Resource]*cachedResource
	round uint64 // bumped by each encode; entries not used in a round are dropped after it
	hits  int    // encodings reused by the current round (for tests)
}

type cachedResource struct {
	copy  *Resource // deep copy of the resource as encoded, sharing its dependency list
	json  []byte    // appendResource's output for it (times in UTC)
	round uint64
}

// NewEncodeCache returns an empty cache.
func NewEncodeCache() *EncodeCache {
	return &EncodeCache{m: map[*Resource]*cachedResource{}}
}

type encodeCacheKey struct{}

// WithEncodeCache returns ctx carrying c for EncodeContext and EncodeToContext.
func WithEncodeCache(ctx context.Context, c *EncodeCache) context.Context {
	return context.WithValue(ctx, encodeCacheKey{}, c)
}

func encodeCacheFrom(ctx context.Context) *EncodeCache {
	c, _ := ctx.Value(encodeCacheKey{}).(*EncodeCache)
	return c
}

// begin starts an encode; the caller must call end (successful or not).
func (c *EncodeCache) begin() {
	c.mu.Lock()
	c.round++
	c.hits = 0
}

// end drops the entries of resources the encode did not see (removed or replaced ones).
func (c *EncodeCache) end(ok bool) {
	if ok {
		for r, e := range c.m {
			if e.round != c.round {
				delete(c.m, r)
			}
		}
	}
	c.mu.Unlock()
}

// lookup returns r's cached encoding, or nil when there is none or r changed since.
func (c *EncodeCache) lookup(r *Resource) []byte {
	e := c.m[r]
	if e == nil || !sameResource(e.copy, r) {
		return nil
	}
	e.round = c.round
	c.hits++
	return e.json
}

// store remembers enc as r's encoding (enc is copied).
func (c *EncodeCache) store(r *Resource, enc []byte) {
	shallow := *r
	shallow.Dependencies = nil
	cp := shallow.Clone()
	cp.Dependencies = r.Dependencies
	c.m[r] = &cachedResource{copy: cp, json: slices.Clone(enc), round: c.round}
}

// appendCached appends r's encoding (times in UTC), from c when c is not nil and holds it.
func appendCached(b []byte, c *EncodeCache, r *Resource) ([]byte, error) {
	if c != nil {
		if enc := c.lookup(r); enc != nil {
			return append(b, enc...), nil
		}
	}
	start := len(b)
	u := *r
	u.CreatedAt, u.UpdatedAt, u.Observation.At = u.CreatedAt.UTC(), u.UpdatedAt.UTC(), u.Observation.At.UTC()
	b, err := appendResource(b, &u)
	if err == nil && c != nil {
		c.store(r, b[start:])
	}
	return b, err
}

// sameResource reports whether a and b encode alike because every field is equal. It is strict
// where encoding is not (times compare with ==, so a time in another zone counts as changed):
// a false "changed" costs one encode, a false "same" would write a stale document.
func sameResource(a, b *Resource) bool {
	return a.Addr.Equal(b.Addr) && a.SchemaVersion == b.SchemaVersion && a.Driver == b.Driver &&
		a.ExternalID == b.ExternalID && bytes.Equal(a.Attributes, b.Attributes) &&
		sameDependencies(a.Dependencies, b.Dependencies) &&
		slices.EqualFunc(a.Attachments, b.Attachments, sameAttachment) &&
		a.Observation == b.Observation && a.Owner == b.Owner &&
		(a.Private == nil) == (b.Private == nil) && (a.Private == nil || sameEnvelope(*a.Private, *b.Private)) &&
		a.CreatedAt == b.CreatedAt && a.UpdatedAt == b.UpdatedAt
}

// sameDependencies: the same list (backing array and length), else element by element.
func sameDependencies(a, b []addrs.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.EqualFunc(a, b, func(x, y addrs.Instance) bool { return x.Equal(y) })
}

func sameAttachment(a, b substrate.AttachmentState) bool {
	return a.Name == b.Name && a.MAC == b.MAC && slices.Equal(a.IPv4, b.IPv4) && a.Gateway == b.Gateway &&
		sameEnvelope(a.Private, b.Private)
}

func sameEnvelope(a, b substrate.Envelope) bool {
	return a.Driver == b.Driver && a.Version == b.Version && bytes.Equal(a.Data, b.Data)
}
