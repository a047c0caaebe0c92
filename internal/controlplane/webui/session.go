package webui

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/store"
)

// CookieName is the session cookie, scoped to /ui/.
const CookieName = "sysbox_ui"

// sessionDomain starts what a session signature covers, so that no other message the server
// signs (its answers to agents start "sysbox-server-v1") can pass for a session or back.
const sessionDomain = "sysbox-ui-session-v1\n"

// session is who is looking: an admin, or a project's token holder.
type session struct {
	Kind    string // store.TokenAdmin or store.TokenProject
	Project string // the project of a project token
	Expires time.Time
}

var errSession = errors.New("ui session: invalid")

// seal encodes s signed with key: base64url(payload) "." base64url(signature).
func (s session) seal(key ed25519.PrivateKey) string {
	payload := s.Kind + "|" + s.Project + "|" + strconv.FormatInt(s.Expires.Unix(), 10)
	sig := ed25519.Sign(key, []byte(sessionDomain+payload))
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(sig)
}

// openSession checks a sealed session's signature and expiry.
func openSession(pub ed25519.PublicKey, sealed string, now time.Time) (session, error) {
	enc := base64.RawURLEncoding
	p64, s64, ok := strings.Cut(sealed, ".")
	if !ok {
		return session{}, fmt.Errorf("%w: malformed", errSession)
	}
	payload, err1 := enc.DecodeString(p64)
	sig, err2 := enc.DecodeString(s64)
	if err1 != nil || err2 != nil {
		return session{}, fmt.Errorf("%w: malformed", errSession)
	}
	if !ed25519.Verify(pub, []byte(sessionDomain+string(payload)), sig) {
		return session{}, fmt.Errorf("%w: bad signature", errSession)
	}
	parts := strings.Split(string(payload), "|")
	if len(parts) != 3 {
		return session{}, fmt.Errorf("%w: malformed", errSession)
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return session{}, fmt.Errorf("%w: malformed", errSession)
	}
	s := session{Kind: parts[0], Project: parts[1], Expires: time.Unix(exp, 0)}
	if !now.Before(s.Expires) {
		return session{}, fmt.Errorf("%w: expired", errSession)
	}
	if s.Kind != store.TokenAdmin && (s.Kind != store.TokenProject || s.Project == "") {
		return session{}, fmt.Errorf("%w: kind %q", errSession, s.Kind)
	}
	return s, nil
}
