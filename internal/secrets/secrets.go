package secrets

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Scheme prefixes every secret reference.
const Scheme = "secret://"

// Redacted replaces plaintext in text that is shown or stored.
const Redacted = "(redacted)"

// Ref is a reference to a secret: secret://SOURCE/NAME. The only source today is "env".
type Ref struct {
	Source string
	Name   string
}

// EnvRef returns secret://env/NAME.
func EnvRef(name string) Ref { return Ref{Source: "env", Name: name} }

// String renders secret://SOURCE/NAME.
func (r Ref) String() string { return Scheme + r.Source + "/" + r.Name }

// MarshalText renders the reference (never a value).
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses a reference.
func (r *Ref) UnmarshalText(b []byte) error {
	v, err := ParseRef(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrNotRef marks text that is not a secret reference.
var ErrNotRef = errors.New("not a secret reference")

// ParseRef parses secret://env/NAME.
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Ref{}, fmt.Errorf("%q: %w (want %senv/NAME)", s, ErrNotRef, Scheme)
	}
	src, name, ok := strings.Cut(rest, "/")
	if !ok || src != "env" || !nameRE.MatchString(name) {
		return Ref{}, fmt.Errorf("%q: %w (want %senv/NAME with NAME an environment variable name)", s, ErrNotRef, Scheme)
	}
	return Ref{Source: src, Name: name}, nil
}

// IsRef reports whether s is exactly one secret reference.
func IsRef(s string) bool {
	_, err := ParseRef(s)
	return err == nil
}

var embeddedRE = regexp.MustCompile(`secret://env/[A-Za-z_][A-Za-z0-9_]*`)

// FindRefs returns the references embedded in s (e.g. "Bearer secret://env/TOKEN"), in order.
func FindRefs(s string) []Ref {
	var out []Ref
	for _, m := range embeddedRE.FindAllString(s, -1) {
		r, _ := ParseRef(m)
		out = append(out, r)
	}
	return out
}

// ErrMissing is returned when a referenced secret has no value at execution time.
var ErrMissing = errors.New("secret value is not set")

// Resolver turns references into plaintext for one execution. Implementations are created per
// run and must not persist what they return.
type Resolver interface {
	Resolve(ctx context.Context, ref Ref) (string, error)
}

// EnvResolver reads secret://env/NAME from the process environment (or Lookup, in tests) and
// records every value it returns in Redactor.
type EnvResolver struct {
	Lookup   func(string) (string, bool) // nil: os.LookupEnv
	Redactor *Redactor                   // optional: learns every resolved value
}

var _ Resolver = (*EnvResolver)(nil)

// Resolve returns the value; an unset variable is ErrMissing.
func (r *EnvResolver) Resolve(ctx context.Context, ref Ref) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if ref.Source != "env" {
		return "", fmt.Errorf("resolve %s: unsupported secret source %q", ref, ref.Source)
	}
	look := r.Lookup
	if look == nil {
		look = os.LookupEnv
	}
	v, ok := look(ref.Name)
	if !ok {
		return "", fmt.Errorf("resolve %s: environment variable %s: %w", ref, ref.Name, ErrMissing)
	}
	if r.Redactor != nil {
		r.Redactor.Add(v)
	}
	return v, nil
}

// ResolveString replaces every reference embedded in s with its value (for attributes such as
// "Bearer secret://env/TOKEN"). The result is plaintext: hand it to the provider call only.
func ResolveString(ctx context.Context, res Resolver, s string) (string, error) {
	var firstErr error
	out := embeddedRE.ReplaceAllStringFunc(s, func(m string) string {
		if firstErr != nil {
			return m
		}
		ref, _ := ParseRef(m)
		v, err := res.Resolve(ctx, ref)
		if err != nil {
			firstErr = err
			return m
		}
		return v
	})
	if firstErr != nil {
		return "", firstErr
	}
	return out, nil
}

// Redactor removes known plaintext values (and their base64, hex and JSON-escaped encodings)
// from text. Safe for concurrent use.
type Redactor struct {
	mu     sync.RWMutex
	needle []string
}

// Add teaches the redactor a plaintext value. Values shorter than 4 bytes are still redacted
// in plain form but not in encoded forms (to avoid redacting random substrings).
func (r *Redactor) Add(v string) {
	if v == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.needle = append(r.needle, Encodings(v)...)
	sort.Slice(r.needle, func(i, j int) bool { return len(r.needle[i]) > len(r.needle[j]) })
}

// Redact replaces every known value or encoding of one in s with Redacted.
func (r *Redactor) Redact(s string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, n := range r.needle {
		if n != "" {
			s = strings.ReplaceAll(s, n, Redacted)
		}
	}
	return s
}

// Encodings lists the forms in which plaintext v could leak: itself, standard and URL base64
// (padded and raw), lower- and upper-case hex, and its JSON-escaped body.
func Encodings(v string) []string {
	out := []string{v}
	if len(v) < 4 {
		return out
	}
	b := []byte(v)
	j, _ := json.Marshal(v)
	for _, e := range []string{
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		strings.Trim(string(j), `"`),
	} {
		dupe := false
		for _, o := range out {
			if o == e {
				dupe = true
			}
		}
		if !dupe {
			out = append(out, e)
		}
	}
	return out
}

// Leaks reports which encodings of v occur in data (empty when none do). Tests use it to prove
// that durable data holds no plaintext.
func Leaks(data []byte, v string) []string {
	var found []string
	for _, e := range Encodings(v) {
		if strings.Contains(string(data), e) {
			found = append(found, e)
		}
	}
	return found
}
