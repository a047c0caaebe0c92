// Package client is the agent's side of the control plane's signed protocol: join with a
// one-time token, then heartbeat, claim, renew, fetch the plan, send events, projections and
// the result, each request signed (package wire) and each answer's signature checked against
// the server key pinned at join. It imports no store and no driver, so an agent links only this.
package client

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/wire"
)

// JoinAgentID is the agent id a join request is signed under (the server's constant too).
const JoinAgentID = wire.JoinAgentID

// Agent talks to a server as one registered agent.
type Agent struct {
	URL       string // the server's base URL, without /v1
	HTTP      *http.Client
	ID        string
	Project   string
	Key       ed25519.PrivateKey
	ServerKey ed25519.PublicKey
	// Now is the clock requests are stamped with.
	Now func() time.Time
}

// StatusError is an answer other than the one expected.
type StatusError struct {
	Method, Path string
	Code         int
	Message      string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, http.StatusText(e.Code), e.Message)
}

// ErrFenced is what a 409 answer to a write under a lease means: the lease was lost.
var ErrFenced = errors.New("lease lost")

// Is makes a 409 StatusError match ErrFenced.
func (e *StatusError) Is(target error) bool {
	return target == ErrFenced && e.Code == http.StatusConflict
}

// ErrUnsignedAnswer: the server's answer is not signed by the pinned key.
var ErrUnsignedAnswer = errors.New("answer not signed by the server's key")

// Do sends a signed request and returns the answer's status and body. It checks the answer's
// signature when it carries one or when it is a success; a refusal (401) is not signed.
func (a *Agent) Do(ctx context.Context, method, path string, epoch int64, body []byte) (int, []byte, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(a.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	agent := a.ID
	if agent == "" {
		agent = JoinAgentID
	}
	m := wire.Message{Domain: wire.DomainRequest, Method: method, Path: req.URL.RequestURI(), Body: body,
		Timestamp: now().Unix(), Nonce: wire.NewNonce(), Agent: agent, Epoch: epoch}
	wire.Sign(req.Header, m, a.Key)
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := a.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get(wire.HeaderSignature) == "" {
		return resp.StatusCode, b, nil
	}
	if a.ServerKey != nil {
		am, sig, err := wire.Parse(resp.Header, wire.DomainAnswer, method, m.Path, b)
		if err == nil && (am.Nonce != m.Nonce || am.Agent != agent || am.Epoch != epoch) {
			err = errors.New("answer names another request")
		}
		if err == nil {
			err = wire.Verify(am, sig, a.ServerKey, now())
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w: %w", method, path, ErrUnsignedAnswer, err)
		}
	}
	return resp.StatusCode, b, nil
}

// call sends a JSON request and decodes a JSON answer of status want into out (if not nil).
func (a *Agent) call(ctx context.Context, method, path string, epoch int64, in, out any, want ...int) (int, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, err
		}
	}
	code, b, err := a.Do(ctx, method, path, epoch, body)
	if err != nil {
		return 0, err
	}
	for _, w := range want {
		if code == w {
			if out != nil && len(b) > 0 {
				if err := json.Unmarshal(b, out); err != nil {
					return code, fmt.Errorf("%s %s: answer: %w", method, path, err)
				}
			}
			return code, nil
		}
	}
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return code, &StatusError{Method: method, Path: path, Code: code, Message: e.Error}
}

// Join registers key with a one-time join token and returns the agent, with the server's key
// pinned from the join's answer.
func Join(ctx context.Context, url string, hc *http.Client, token, name string, key ed25519.PrivateKey, caps []string) (*Agent, error) {
	a := &Agent{URL: url, HTTP: hc, Key: key}
	var joined struct {
		Agent     string `json:"agent"`
		Project   string `json:"project"`
		ServerKey []byte `json:"server_key"`
	}
	if caps == nil {
		caps = []string{}
	}
	if _, err := a.call(ctx, http.MethodPost, "/v1/agents/join", 0, map[string]any{
		"token": token, "name": name, "public_key": []byte(key.Public().(ed25519.PublicKey)), "capabilities": caps,
	}, &joined, http.StatusCreated); err != nil {
		return nil, fmt.Errorf("join %s as %s: %w", url, name, err)
	}
	if len(joined.ServerKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("join %s as %s: answer holds no server key", url, name)
	}
	a.ID, a.Project, a.ServerKey = joined.Agent, joined.Project, joined.ServerKey
	return a, nil
}

// Heartbeat reports the agent alive with its capabilities.
func (a *Agent) Heartbeat(ctx context.Context, caps []string) error {
	if caps == nil {
		caps = []string{}
	}
	_, err := a.call(ctx, http.MethodPost, "/v1/agent/heartbeat", 0, map[string]any{"capabilities": caps}, nil, http.StatusNoContent)
	return err
}

// Run is what an agent needs to know of a claimed run.
type Run struct {
	ID        string   `json:"id"`
	Workspace string   `json:"workspace"`
	Plan      string   `json:"plan"`
	Op        string   `json:"op"`
	Requires  []string `json:"requires"`
	NextSeq   int64    `json:"next_seq"`
	// Revision and Args: what a command run (one without a plan) runs.
	Revision string   `json:"revision"`
	Args     []string `json:"args"`
}

// Lease is a claimed run and the epoch to act under.
type Lease struct {
	Run     Run       `json:"run"`
	Epoch   int64     `json:"epoch"`
	Expires time.Time `json:"expires"`
	// TTLSeconds is the lease's length as the server granted it.
	TTLSeconds float64 `json:"ttl_seconds"`
}

// Claim asks for a run; nil when there is none.
func (a *Agent) Claim(ctx context.Context) (*Lease, error) { return a.ClaimWait(ctx, 0) }

// ClaimWait asks for a run, letting the server wait up to wait for one to be queued (a long
// poll); nil when there was none.
func (a *Agent) ClaimWait(ctx context.Context, wait time.Duration) (*Lease, error) {
	path := "/v1/agent/claim"
	if wait > 0 {
		path += "?wait=" + strconv.FormatFloat(wait.Seconds(), 'f', -1, 64)
	}
	var l Lease
	code, err := a.call(ctx, http.MethodPost, path, 0, nil, &l, http.StatusOK, http.StatusNoContent)
	if err != nil || code == http.StatusNoContent {
		return nil, err
	}
	return &l, nil
}

// Renew extends the lease; a lost lease is an error matching ErrFenced.
func (a *Agent) Renew(ctx context.Context, l *Lease) error {
	var r struct {
		Expires time.Time `json:"expires"`
	}
	if _, err := a.call(ctx, http.MethodPost, "/v1/agent/runs/"+l.Run.ID+"/renew", l.Epoch, nil, &r, http.StatusOK); err != nil {
		return err
	}
	l.Expires = r.Expires
	return nil
}

// Plan fetches the stored plan file of the leased run.
func (a *Agent) Plan(ctx context.Context, l *Lease) ([]byte, error) {
	return a.get(ctx, "/v1/agent/runs/"+l.Run.ID+"/plan", l.Epoch)
}

// get fetches bytes with a signed GET.
func (a *Agent) get(ctx context.Context, path string, epoch int64) ([]byte, error) {
	code, b, err := a.Do(ctx, http.MethodGet, path, epoch, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, &StatusError{Method: http.MethodGet, Path: path, Code: code, Message: string(b)}
	}
	return b, nil
}

// Revision fetches the topology bundle the leased run's plan was made from.
func (a *Agent) Revision(ctx context.Context, l *Lease) ([]byte, error) {
	return a.get(ctx, "/v1/agent/runs/"+l.Run.ID+"/revision", l.Epoch)
}

// Event is one event to append.
type Event struct {
	Kind string `json:"kind"`
	Data string `json:"data,omitempty"`
}

// Events appends events under the lease and returns their sequence numbers.
func (a *Agent) Events(ctx context.Context, l *Lease, evs ...Event) ([]int64, error) {
	var r struct {
		Seqs []int64 `json:"seqs"`
	}
	_, err := a.call(ctx, http.MethodPost, "/v1/agent/runs/"+l.Run.ID+"/events", l.Epoch, map[string]any{"events": evs}, &r, http.StatusOK)
	return r.Seqs, err
}

// Projection is one resource's projection.
type Projection struct {
	Address     string `json:"address"`
	Observation string `json:"observation"`
	ExternalID  string `json:"external_id,omitempty"`
	Generation  int64  `json:"generation"`
}

// Projections stores resource projections under the lease.
func (a *Agent) Projections(ctx context.Context, l *Lease, ps ...Projection) error {
	if ps == nil {
		ps = []Projection{}
	}
	_, err := a.call(ctx, http.MethodPost, "/v1/agent/runs/"+l.Run.ID+"/projections", l.Epoch, ps, nil, http.StatusNoContent)
	return err
}

// Complete records the run's outcome ("succeeded" or "failed") and its command's exit code
// under the lease.
func (a *Agent) Complete(ctx context.Context, l *Lease, status, result string, exitCode int) error {
	_, err := a.call(ctx, http.MethodPost, "/v1/agent/runs/"+l.Run.ID+"/complete", l.Epoch,
		map[string]any{"status": status, "result": result, "exit_code": exitCode}, nil, http.StatusNoContent)
	return err
}

// PlanOutput stores the plan file a plan run made and returns the stored plan's id.
func (a *Agent) PlanOutput(ctx context.Context, l *Lease, plan []byte) (string, error) {
	path := "/v1/agent/runs/" + l.Run.ID + "/plan-output"
	code, b, err := a.Do(ctx, http.MethodPost, path, l.Epoch, plan)
	if err != nil {
		return "", err
	}
	var r struct {
		Plan  string `json:"plan"`
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &r)
	if code != http.StatusCreated {
		return "", &StatusError{Method: http.MethodPost, Path: path, Code: code, Message: r.Error}
	}
	return r.Plan, nil
}
