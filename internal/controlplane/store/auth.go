package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Token kinds.
const (
	TokenAdmin   = "admin"   // every project; creates projects and tokens
	TokenProject = "project" // one project's API
	TokenJoin    = "join"    // one-time: registers one agent in one project
)

// TokenPrefix starts every token, so a leaked one is recognisable (and greppable).
const TokenPrefix = "sbx_"

// Token is a stored token's record; the token itself is never stored, only its hash.
type Token struct {
	Hash    string    `json:"-"`
	Kind    string    `json:"kind"`
	Project string    `json:"project,omitempty"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// HashToken is the stored form of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateToken makes a token of kind for project ("" for an admin token) and returns its
// plaintext, which exists only in the answer.
func (s *Store) CreateToken(ctx context.Context, kind, project, name string) (string, Token, error) {
	switch kind {
	case TokenAdmin:
		if project != "" {
			return "", Token{}, fmt.Errorf("token %q: an admin token has no project", name)
		}
	case TokenProject, TokenJoin:
		if _, err := s.Project(ctx, project); err != nil {
			return "", Token{}, err
		}
	default:
		return "", Token{}, fmt.Errorf("token %q: unknown kind %q (known: admin, project, join)", name, kind)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", Token{}, err
	}
	plain := TokenPrefix + kind[:1] + "_" + base64.RawURLEncoding.EncodeToString(b[:])
	t := Token{Hash: HashToken(plain), Kind: kind, Project: project, Name: name, Created: timeOf(s.now())}
	if _, err := s.exec(ctx, s.q(`INSERT INTO cp_tokens (hash, kind, project_id, name, used_at, created_at) VALUES (?, ?, ?, ?, 0, ?)`),
		t.Hash, kind, project, name, t.Created.UnixNano()); err != nil {
		return "", Token{}, s.wrap("create token "+name, err)
	}
	return plain, t, nil
}

// LookupToken returns the admin or project token whose plaintext is token. Join tokens are
// not bearer tokens: they are only consumed (UseJoinToken).
func (s *Store) LookupToken(ctx context.Context, token string) (Token, error) {
	t, err := s.token(ctx, token)
	if err != nil {
		return Token{}, err
	}
	if t.Kind == TokenJoin {
		return Token{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	return t, nil
}

func (s *Store) token(ctx context.Context, token string) (Token, error) {
	if !strings.HasPrefix(token, TokenPrefix) {
		return Token{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	t := Token{Hash: HashToken(token)}
	var created int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT kind, project_id, name, created_at FROM cp_tokens WHERE hash = ?`), t.Hash).Scan(&t.Kind, &t.Project, &t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	if err != nil {
		return Token{}, s.wrap("token", err)
	}
	t.Created = timeOf(created)
	return t, nil
}

// ErrTokenUsed: a one-time join token was used before.
var ErrTokenUsed = errors.New("join token already used")

// UseJoinToken consumes a join token (exactly one caller succeeds) and returns it.
func (s *Store) UseJoinToken(ctx context.Context, token string) (Token, error) {
	t, err := s.token(ctx, token)
	if err != nil {
		return Token{}, err
	}
	if t.Kind != TokenJoin {
		return Token{}, fmt.Errorf("token %q is a %s token, not a join token: %w", t.Name, t.Kind, ErrNotFound)
	}
	res, err := s.exec(ctx, s.q(`UPDATE cp_tokens SET used_at = ? WHERE hash = ? AND kind = 'join' AND used_at = 0`), s.now(), t.Hash)
	if err != nil {
		return Token{}, s.wrap("use join token", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Token{}, fmt.Errorf("token %q: %w", t.Name, ErrTokenUsed)
	}
	return t, nil
}

// Agent is a registered host agent.
type Agent struct {
	ID           string    `json:"id"`
	Project      string    `json:"project"`
	Name         string    `json:"name"`
	PublicKey    []byte    `json:"public_key"`
	Capabilities []string  `json:"capabilities"`
	Revoked      bool      `json:"revoked"`
	Created      time.Time `json:"created"`
	Seen         time.Time `json:"seen,omitzero"`
}

// CreateAgent registers an agent with its public key.
func (s *Store) CreateAgent(ctx context.Context, project, name string, publicKey []byte, caps []string) (Agent, error) {
	if _, err := s.Project(ctx, project); err != nil {
		return Agent{}, err
	}
	a := Agent{ID: newID("agt_"), Project: project, Name: name, PublicKey: publicKey, Capabilities: decodeList(encodeList(caps)), Created: timeOf(s.now())}
	if _, err := s.exec(ctx, s.q(`INSERT INTO cp_agents (id, project_id, name, public_key, capabilities, revoked, created_at, seen_at) VALUES (?, ?, ?, ?, ?, 0, ?, 0)`),
		a.ID, project, name, publicKey, encodeList(caps), a.Created.UnixNano()); err != nil {
		return Agent{}, s.wrap("create agent "+name, err)
	}
	return a, nil
}

const agentColumns = `id, project_id, name, public_key, capabilities, revoked, created_at, seen_at`

func scanAgent(sc scanner) (Agent, error) {
	var a Agent
	var caps string
	var revoked int
	var created, seen int64
	if err := sc.Scan(&a.ID, &a.Project, &a.Name, &a.PublicKey, &caps, &revoked, &created, &seen); err != nil {
		return Agent{}, err
	}
	a.Capabilities, a.Revoked, a.Created, a.Seen = decodeList(caps), revoked == 1, timeOf(created), timeOf(seen)
	return a, nil
}

// Agent returns the agent id, of any project (signature checks look agents up before they
// know the project).
func (s *Store) Agent(ctx context.Context, id string) (Agent, error) {
	a, err := scanAgent(s.db.QueryRowContext(ctx, s.q(`SELECT `+agentColumns+` FROM cp_agents WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Agent{}, fmt.Errorf("agent %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Agent{}, s.wrap("agent "+id, err)
	}
	return a, nil
}

// Agents lists the agents of project by name.
func (s *Store) Agents(ctx context.Context, project string) ([]Agent, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+agentColumns+` FROM cp_agents WHERE project_id = ? ORDER BY name, id`), project)
	if err != nil {
		return nil, s.wrap("agents", err)
	}
	defer rows.Close()
	out := []Agent{}
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, s.wrap("agents", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// RevokeAgent marks an agent of project revoked: its signatures are refused from now on. The
// sticky runs of workspaces whose state lives with it can never run: they fail, with the
// reason as their result (a claim fails any that slip past this).
func (s *Store) RevokeAgent(ctx context.Context, project, id string) error {
	res, err := s.exec(ctx, s.q(`UPDATE cp_agents SET revoked = 1 WHERE id = ? AND project_id = ?`), id, project)
	if err != nil {
		return s.wrap("revoke agent "+id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("agent %s: %w", id, ErrNotFound)
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE project_id = ? AND sticky = 1 AND status IN ('queued', 'running') ORDER BY created_at, id`), project)
	if err != nil {
		return s.wrap("revoke agent "+id, err)
	}
	var open []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			rows.Close()
			return s.wrap("revoke agent "+id, err)
		}
		open = append(open, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.wrap("revoke agent "+id, err)
	}
	orphaned := map[string]bool{}
	for _, r := range open {
		held, seen := orphaned[r.Workspace]
		if !seen {
			holder, revoked, err := s.stickyHolder(ctx, s.db, r.Workspace)
			if err != nil {
				return s.wrap("revoke agent "+id, err)
			}
			held = revoked && holder == id
			orphaned[r.Workspace] = held
		}
		if held {
			if err := s.failOrphan(ctx, r, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heartbeat records that the agent was seen and what it can do now.
func (s *Store) Heartbeat(ctx context.Context, id string, caps []string) error {
	res, err := s.exec(ctx, s.q(`UPDATE cp_agents SET capabilities = ?, seen_at = ? WHERE id = ? AND revoked = 0`), encodeList(caps), s.now(), id)
	if err != nil {
		return s.wrap("heartbeat "+id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("agent %s: %w", id, ErrNotFound)
	}
	return nil
}

// pruneEvery spaces the deletions of expired nonces.
const pruneEvery = 10 * time.Second

// UseNonce records nonce for agent until expires; a nonce seen before (and not yet expired)
// is ErrReplay. Expired nonces are pruned on the way: a request that old is refused for its
// timestamp before its nonce is checked.
func (s *Store) UseNonce(ctx context.Context, agent, nonce string, expires time.Time) error {
	// Pruning is one more write (an fsync on SQLite): done at most every pruneEvery, not per
	// request.
	if now := s.now(); now-s.lastPrune.Load() >= pruneEvery.Nanoseconds() {
		s.lastPrune.Store(now)
		if _, err := s.exec(ctx, s.q(`DELETE FROM cp_nonces WHERE expires_at < ?`), now); err != nil {
			return s.wrap("prune nonces", err)
		}
	}
	res, err := s.exec(ctx, s.q(`INSERT INTO cp_nonces (agent_id, nonce, expires_at) VALUES (?, ?, ?) ON CONFLICT (agent_id, nonce) DO NOTHING`),
		agent, nonce, expires.UnixNano())
	if err != nil {
		return s.wrap("nonce", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("agent %s nonce %s: %w", agent, nonce, ErrReplay)
	}
	return nil
}
