// Package wire is the signed protocol between the control plane's server and its agents: the
// canonical string both sides sign, the headers that carry it, and the checks a receiver
// makes, and the key file each side keeps. It imports only internal/durable, so the agent and
// the server share it without sharing anything else.
//
// A signed message (an agent's request, or the server's answer to one) carries the headers
//
//	Sysbox-Agent      the agent's id
//	Sysbox-Timestamp  unix seconds when it was signed
//	Sysbox-Nonce      16 random bytes, base64url (an answer echoes its request's nonce)
//	Sysbox-Epoch      the lease epoch the sender acts under (0: none)
//	Sysbox-Signature  base64 Ed25519 signature of the canonical string
//
// and the canonical string is, one field a line (lines end in "\n"):
//
//	sysbox-agent-v1 | sysbox-server-v1
//	METHOD
//	PATH (with its query, as sent)
//	hex SHA-256 of the body
//	timestamp
//	nonce
//	agent id
//	epoch
//
// The first line keeps a request's signature from being replayed as an answer and back.
package wire

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names.
const (
	HeaderAgent     = "Sysbox-Agent"
	HeaderTimestamp = "Sysbox-Timestamp"
	HeaderNonce     = "Sysbox-Nonce"
	HeaderEpoch     = "Sysbox-Epoch"
	HeaderSignature = "Sysbox-Signature"
)

// Domains of the canonical string.
const (
	DomainRequest = "sysbox-agent-v1"
	DomainAnswer  = "sysbox-server-v1"
)

// JoinAgentID is the agent id a join request is signed under: the agent has no id yet, and
// the signature proves it holds the key it registers.
const JoinAgentID = "join"

// MaxSkew is how far a timestamp may be from the receiver's clock, either way.
const MaxSkew = 60 * time.Second

// MaxWait bounds a long poll (a claim's or an event read's "wait"): well inside MaxSkew, so the
// answer's signature is fresh, and short enough that a waiter re-reads the database often
// when the write it waits for happened in another server process (the wake-up is in-process).
const MaxWait = 30 * time.Second

// Message is what a signature covers.
type Message struct {
	Domain    string
	Method    string
	Path      string
	Body      []byte
	Timestamp int64
	Nonce     string
	Agent     string
	Epoch     int64
}

// Canonical is the string signed.
func (m Message) Canonical() []byte {
	sum := sha256.Sum256(m.Body)
	return []byte(strings.Join([]string{m.Domain, m.Method, m.Path, hex.EncodeToString(sum[:]),
		strconv.FormatInt(m.Timestamp, 10), m.Nonce, m.Agent, strconv.FormatInt(m.Epoch, 10)}, "\n") + "\n")
}

// NewNonce is a fresh random nonce.
func NewNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Sign sets m's headers on h, signed with key.
func Sign(h http.Header, m Message, key ed25519.PrivateKey) {
	h.Set(HeaderAgent, m.Agent)
	h.Set(HeaderTimestamp, strconv.FormatInt(m.Timestamp, 10))
	h.Set(HeaderNonce, m.Nonce)
	h.Set(HeaderEpoch, strconv.FormatInt(m.Epoch, 10))
	h.Set(HeaderSignature, base64.StdEncoding.EncodeToString(ed25519.Sign(key, m.Canonical())))
}

// Failure classes a receiver refuses; each wraps ErrRefused.
var (
	ErrRefused      = errors.New("signed message refused")
	ErrMalformed    = fmt.Errorf("%w: malformed or missing signature headers", ErrRefused)
	ErrStale        = fmt.Errorf("%w: timestamp outside the allowed skew", ErrRefused)
	ErrBadSignature = fmt.Errorf("%w: signature does not verify", ErrRefused)
)

// Parse reads the signed headers of h into a Message for domain, method, path and body, and
// returns it with the signature bytes. It checks only their form.
func Parse(h http.Header, domain, method, path string, body []byte) (Message, []byte, error) {
	m := Message{Domain: domain, Method: method, Path: path, Body: body,
		Agent: h.Get(HeaderAgent), Nonce: h.Get(HeaderNonce)}
	var err1, err2, err3 error
	m.Timestamp, err1 = strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	m.Epoch, err2 = strconv.ParseInt(h.Get(HeaderEpoch), 10, 64)
	sig, err3 := base64.StdEncoding.DecodeString(h.Get(HeaderSignature))
	if err := errors.Join(err1, err2, err3); err != nil || m.Agent == "" || len(m.Nonce) < 16 || len(sig) != ed25519.SignatureSize || m.Epoch < 0 {
		return Message{}, nil, ErrMalformed
	}
	return m, sig, nil
}

// Verify checks m's timestamp against now and its signature against key.
func Verify(m Message, sig []byte, key ed25519.PublicKey, now time.Time) error {
	ts := time.Unix(m.Timestamp, 0)
	if d := now.Sub(ts); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("%w: signed at %s, %s from now", ErrStale, ts.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, m.Canonical(), sig) {
		return ErrBadSignature
	}
	return nil
}
