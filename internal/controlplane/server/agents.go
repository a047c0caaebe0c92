package server

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/wire"
	"zyvor.dev/sysbox/internal/plans"
)

// JoinAgentID is the agent id a join request is signed under (the agent has no id yet; the
// signature proves possession of the key being registered).
const JoinAgentID = wire.JoinAgentID

// signedAnswer buffers an answer so it can be signed before it is sent.
type signedAnswer struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (a *signedAnswer) Header() http.Header         { return a.h }
func (a *signedAnswer) WriteHeader(code int)        { a.code = code }
func (a *signedAnswer) Write(b []byte) (int, error) { return a.body.Write(b) }

// send signs the buffered answer over the request's method, path, nonce, agent and epoch, and
// writes it.
func (s *Server) send(w http.ResponseWriter, r *http.Request, req wire.Message, a *signedAnswer) {
	for k, v := range a.h {
		w.Header()[k] = v
	}
	wire.Sign(w.Header(), wire.Message{Domain: wire.DomainAnswer, Method: r.Method, Path: r.URL.RequestURI(), Body: a.body.Bytes(),
		Timestamp: s.Now().Unix(), Nonce: req.Nonce, Agent: req.Agent, Epoch: req.Epoch}, s.key)
	w.WriteHeader(a.code)
	w.Write(a.body.Bytes())
}

// refuse answers 401 to a signed request that failed a check, and logs the failure's class.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, class, agent string, err error) {
	s.refused.WithLabelValues(class).Inc()
	s.log.Warn("agent request refused", "class", class, "agent", agent, "method", r.Method, "path", r.URL.Path, "err", err)
	writeErr(w, http.StatusUnauthorized, "signed request refused: "+class)
}

// verify checks a signed request's form, timestamp, signature (against key) and nonce.
func (s *Server) verify(w http.ResponseWriter, r *http.Request, body []byte, key ed25519.PublicKey, want string) (wire.Message, bool) {
	m, sig, err := wire.Parse(r.Header, wire.DomainRequest, r.Method, r.URL.RequestURI(), body)
	if err != nil {
		s.refuse(w, r, "malformed", r.Header.Get(wire.HeaderAgent), err)
		return m, false
	}
	if m.Agent != want {
		s.refuse(w, r, "unknown-agent", m.Agent, errors.New("agent id does not match"))
		return m, false
	}
	if err := wire.Verify(m, sig, key, s.Now()); err != nil {
		class := "bad-signature"
		if errors.Is(err, wire.ErrStale) {
			class = "stale-timestamp"
		}
		s.refuse(w, r, class, m.Agent, err)
		return m, false
	}
	// A nonce is remembered for as long as its timestamp would be accepted.
	if err := s.store.UseNonce(r.Context(), m.Agent, m.Nonce, time.Unix(m.Timestamp, 0).Add(wire.MaxSkew+time.Second)); err != nil {
		if errors.Is(err, store.ErrReplay) {
			s.refuse(w, r, "replay", m.Agent, err)
		} else {
			s.fail(w, r, err)
		}
		return m, false
	}
	return m, true
}

// agentCall is a verified agent request.
type agentCall struct {
	agent store.Agent
	msg   wire.Message
	body  []byte
}

// agent authenticates a signed agent request and signs the answer.
func (s *Server) agent(h func(http.ResponseWriter, *http.Request, agentCall)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		id := r.Header.Get(wire.HeaderAgent)
		a, err := s.store.Agent(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			s.refuse(w, r, "unknown-agent", id, err)
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if a.Revoked {
			s.refuse(w, r, "revoked", id, errors.New("agent revoked"))
			return
		}
		m, ok := s.verify(w, r, body, ed25519.PublicKey(a.PublicKey), a.ID)
		if !ok {
			return
		}
		ans := &signedAnswer{h: http.Header{}, code: http.StatusOK}
		h(ans, r, agentCall{agent: a, msg: m, body: body})
		s.send(w, r, m, ans)
	}
}

type joinRequest struct {
	Token        string   `json:"token"`
	Name         string   `json:"name"`
	PublicKey    []byte   `json:"public_key"`
	Capabilities []string `json:"capabilities"`
}

// Joined answers a join.
type Joined struct {
	Agent     string `json:"agent"`
	Project   string `json:"project"`
	ServerKey []byte `json:"server_key"`
}

func (s *Server) join(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req joinRequest
	if !unmarshal(w, body, &req) {
		return
	}
	if req.Name == "" || len(req.PublicKey) != ed25519.PublicKeySize {
		writeErr(w, http.StatusBadRequest, "join: a name and a 32-byte Ed25519 public key are required")
		return
	}
	m, ok := s.verify(w, r, body, ed25519.PublicKey(req.PublicKey), JoinAgentID)
	if !ok {
		return
	}
	tok, err := s.store.UseJoinToken(r.Context(), req.Token)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTokenUsed) {
		class := "unknown-join-token"
		if errors.Is(err, store.ErrTokenUsed) {
			class = "join-token-reused"
		}
		s.refuse(w, r, class, req.Name, err)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := s.store.CreateAgent(r.Context(), tok.Project, req.Name, req.PublicKey, req.Capabilities)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("agent joined", "project", tok.Project, "agent", a.ID, "name", a.Name, "capabilities", a.Capabilities)
	ans := &signedAnswer{h: http.Header{}}
	writeJSON(ans, http.StatusCreated, Joined{Agent: a.ID, Project: a.Project, ServerKey: s.key.Public().(ed25519.PublicKey)})
	s.send(w, r, m, ans)
}

type heartbeat struct {
	Capabilities []string `json:"capabilities"`
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c agentCall) {
	var req heartbeat
	if !unmarshal(w, c.body, &req) {
		return
	}
	if err := s.store.Heartbeat(r.Context(), c.agent.ID, req.Capabilities); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxWait bounds a long poll (claim, events).
const maxWait = wire.MaxWait

// waitParam reads the query's "wait" (seconds, at most maxWait); false after answering 400.
func waitParam(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	q := r.URL.Query().Get("wait")
	if q == "" {
		return 0, true
	}
	f, err := strconv.ParseFloat(q, 64)
	if err != nil || f < 0 || f > maxWait.Seconds() || math.IsNaN(f) {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("wait %q: want seconds from 0 to %v", q, maxWait.Seconds()))
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// wait outcomes.
const (
	waitWoken   = iota // changed, or the time ran out
	waitClosing        // the server shuts down
	waitGone           // the request ended
)

// waitChange waits up to d for changed (a long poll's wake-up), counted in the in-flight
// gauge.
func (s *Server) waitChange(r *http.Request, changed <-chan struct{}, d time.Duration) int {
	s.polls.Inc()
	defer s.polls.Dec()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-s.closing:
		return waitClosing
	case <-r.Context().Done():
		return waitGone
	}
	return waitWoken
}

// claim gives the agent a run, waiting up to the query's "wait" for one (a long poll: a run
// queued meanwhile, or a lease lapsing, ends the wait at once).
func (s *Server) claim(w http.ResponseWriter, r *http.Request, c agentCall) {
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	deadline := time.Now().Add(wait)
	for {
		changed := s.store.Changed(store.RunsTopic(c.agent.Project))
		l, err := s.store.ClaimRun(r.Context(), c.agent.Project, c.agent.ID, c.agent.Capabilities, s.LeaseTTL)
		if err == nil {
			s.claims.Inc()
			s.log.Info("run claimed", "run", l.Run.ID, "agent", l.Agent, "epoch", l.Epoch)
			writeJSON(w, http.StatusOK, l)
			return
		}
		if !errors.Is(err, store.ErrNoRun) {
			s.fail(w, r, err)
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// A lapsing lease makes a run claimable without a write to wake us: wake then too.
		if lapse, err := s.store.NextLapse(r.Context(), c.agent.Project); err == nil && !lapse.IsZero() {
			left = min(left, max(lapse.Sub(s.store.Now())+time.Millisecond, 10*time.Millisecond))
		}
		switch s.waitChange(r, changed, left) {
		case waitGone:
			return
		case waitClosing:
			deadline = time.Now() // answer what there is
		}
		// The agent may have been revoked while it waited: check again before claiming.
		a, err := s.store.Agent(r.Context(), c.agent.ID)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if a.Revoked {
			s.refuse(w, r, "revoked", a.ID, errors.New("agent revoked during a claim's wait"))
			return
		}
		c.agent = a
	}
}

// held checks the agent holds the path's run at the signed epoch with a live lease: reads go
// through the same fence as writes.
func (s *Server) held(w http.ResponseWriter, r *http.Request, c agentCall) (store.Run, bool) {
	run, err := s.store.Held(r.Context(), c.agent.Project, r.PathValue("run"), c.agent.ID, c.msg.Epoch)
	if err != nil {
		s.fail(w, r, err)
		return store.Run{}, false
	}
	return run, true
}

func (s *Server) agentPlan(w http.ResponseWriter, r *http.Request, c agentCall) {
	run, ok := s.held(w, r, c)
	if !ok {
		return
	}
	if run.Plan == "" {
		writeErr(w, http.StatusNotFound, "run "+run.ID+": a "+run.Op+" command run has no stored plan")
		return
	}
	_, data, err := s.store.PlanData(r.Context(), c.agent.Project, run.Plan)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

func (s *Server) agentRevision(w http.ResponseWriter, r *http.Request, c agentCall) {
	run, ok := s.held(w, r, c)
	if !ok {
		return
	}
	b, err := s.store.RevisionBundle(r.Context(), c.agent.Project, run.Revision)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(b)
}

// ownRun answers 404 unless the path's run belongs to the agent's project (fencing then
// decides whether the agent may write to it).
func (s *Server) ownRun(w http.ResponseWriter, r *http.Request, c agentCall) bool {
	if _, err := s.store.Run(r.Context(), c.agent.Project, r.PathValue("run")); err != nil {
		s.fail(w, r, err)
		return false
	}
	return true
}

type renewed struct {
	Expires time.Time `json:"expires"`
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, c agentCall) {
	if !s.ownRun(w, r, c) {
		return
	}
	exp, err := s.store.RenewLease(r.Context(), r.PathValue("run"), c.agent.ID, c.msg.Epoch, s.LeaseTTL)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, renewed{Expires: exp})
}

type eventBatch struct {
	Events []struct {
		Kind string `json:"kind"`
		Data string `json:"data"`
	} `json:"events"`
}

type appended struct {
	Seqs []int64 `json:"seqs"`
}

func (s *Server) appendEvents(w http.ResponseWriter, r *http.Request, c agentCall) {
	var req eventBatch
	if !unmarshal(w, c.body, &req) {
		return
	}
	evs := make([]store.Event, 0, len(req.Events))
	for _, e := range req.Events {
		if e.Kind == "" {
			writeErr(w, http.StatusBadRequest, "event: empty kind")
			return
		}
		evs = append(evs, store.Event{Kind: e.Kind, Data: e.Data})
	}
	if !s.ownRun(w, r, c) {
		return
	}
	seqs, err := s.store.AppendEvents(r.Context(), r.PathValue("run"), c.agent.ID, c.msg.Epoch, evs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.events.Add(float64(len(seqs)))
	writeJSON(w, http.StatusOK, appended{Seqs: append([]int64{}, seqs...)})
}

func (s *Server) putProjections(w http.ResponseWriter, r *http.Request, c agentCall) {
	var req []store.Projection
	if !unmarshal(w, c.body, &req) {
		return
	}
	for _, p := range req {
		if p.Address == "" {
			writeErr(w, http.StatusBadRequest, "projection: empty address")
			return
		}
	}
	if !s.ownRun(w, r, c) {
		return
	}
	if err := s.store.PutProjections(r.Context(), r.PathValue("run"), c.agent.ID, c.msg.Epoch, req); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type completion struct {
	Status   string `json:"status"`
	Result   string `json:"result"`
	ExitCode int    `json:"exit_code"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, c agentCall) {
	var req completion
	if !unmarshal(w, c.body, &req) {
		return
	}
	if req.Status != store.RunSucceeded && req.Status != store.RunFailed {
		writeErr(w, http.StatusBadRequest, "status "+req.Status+": want succeeded or failed")
		return
	}
	if !s.ownRun(w, r, c) {
		return
	}
	if err := s.store.CompleteRun(r.Context(), r.PathValue("run"), c.agent.ID, c.msg.Epoch, req.Status, req.Result, req.ExitCode); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("run completed", "run", r.PathValue("run"), "agent", c.agent.ID, "epoch", c.msg.Epoch, "status", req.Status)
	w.WriteHeader(http.StatusNoContent)
}

type planned struct {
	Plan string `json:"plan"`
}

// putRunPlan stores the plan file a plan run made; its requirements are read from it, as for
// a plan a user uploads.
func (s *Server) putRunPlan(w http.ResponseWriter, r *http.Request, c agentCall) {
	p, err := plans.Decode(c.body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "plan: "+err.Error())
		return
	}
	if !s.ownRun(w, r, c) {
		return
	}
	pl, err := s.store.PutRunPlan(r.Context(), r.PathValue("run"), c.agent.ID, c.msg.Epoch, c.body, Requirements(p))
	s.reply(w, r, http.StatusCreated, planned{Plan: pl.ID}, err)
}
