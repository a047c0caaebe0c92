package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// User talks to a server with a bearer token: what the CLI's --remote commands do.
type User struct {
	URL   string // the server's base URL, without /v1
	Token string
	HTTP  *http.Client
	// Wait is the longest a read of a followed run's events waits on the server (0: 25 s).
	Wait time.Duration
}

// do sends in (JSON, or bytes as they are) and decodes an answer of status want into out (or,
// for a *[]byte, copies it).
func (u *User) do(ctx context.Context, method, path string, in, out any, want int) error {
	var body io.Reader
	ct := "application/json"
	switch v := in.(type) {
	case nil:
	case []byte:
		body, ct = bytes.NewReader(v), "application/octet-stream"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(u.URL, "/")+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+u.Token)
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	hc := u.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want && !(want == http.StatusCreated && resp.StatusCode == http.StatusOK) {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: e.Error}
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = b
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: answer: %w", method, path, err)
		}
	}
	return nil
}

type named struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Project is the project the token is scoped to (an admin token, which sees every project,
// is refused: a remote command acts for one project).
func (u *User) Project(ctx context.Context) (string, error) {
	var ps []named
	if err := u.do(ctx, http.MethodGet, "/v1/projects", nil, &ps, http.StatusOK); err != nil {
		return "", err
	}
	if len(ps) != 1 {
		return "", fmt.Errorf("%s: the token sees %d projects; use a project token", u.URL, len(ps))
	}
	return ps[0].ID, nil
}

// Workspace returns the id of the project's workspace called name, creating it if needed.
func (u *User) Workspace(ctx context.Context, project, name string) (string, error) {
	var ws []named
	if err := u.do(ctx, http.MethodGet, "/v1/projects/"+project+"/workspaces", nil, &ws, http.StatusOK); err != nil {
		return "", err
	}
	for _, w := range ws {
		if w.Name == name {
			return w.ID, nil
		}
	}
	var w named
	if err := u.do(ctx, http.MethodPost, "/v1/projects/"+project+"/workspaces", map[string]string{"name": name}, &w, http.StatusCreated); err != nil {
		return "", err
	}
	return w.ID, nil
}

// PutRevision stores a topology bundle and returns its digest.
func (u *User) PutRevision(ctx context.Context, project string, bundle []byte) (string, error) {
	var r struct {
		Digest string `json:"digest"`
	}
	err := u.do(ctx, http.MethodPost, "/v1/projects/"+project+"/revisions", bundle, &r, http.StatusCreated)
	return r.Digest, err
}

// PutPlan stores a plan file made from revision for workspace and returns its id.
func (u *User) PutPlan(ctx context.Context, project, workspace, revision string, plan []byte) (string, error) {
	var r named
	err := u.do(ctx, http.MethodPost, "/v1/projects/"+project+"/workspaces/"+workspace+"/plans",
		map[string]any{"revision": revision, "plan": plan}, &r, http.StatusCreated)
	return r.ID, err
}

// PlanFile fetches a stored plan file.
func (u *User) PlanFile(ctx context.Context, project, plan string) ([]byte, error) {
	var b []byte
	err := u.do(ctx, http.MethodGet, "/v1/projects/"+project+"/plans/"+url.PathEscape(plan), nil, &b, http.StatusOK)
	return b, err
}

// RunRequest queues a run: a stored plan to apply or destroy, or a command (Op and Args) on
// a workspace's revision.
type RunRequest struct {
	Plan      string   `json:"plan,omitempty"`
	Op        string   `json:"op"`
	Sticky    bool     `json:"sticky"`
	Workspace string   `json:"workspace,omitempty"`
	Revision  string   `json:"revision,omitempty"`
	Args      []string `json:"args,omitempty"`
	Requires  []string `json:"requires,omitempty"`
}

// RunStatus is a run as its user sees it.
type RunStatus struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Agent      string `json:"agent"`
	Epoch      int64  `json:"epoch"`
	Result     string `json:"result"`
	ExitCode   int    `json:"exit_code"`
	OutputPlan string `json:"output_plan"`
}

// Done reports whether the run ended.
func (r RunStatus) Done() bool { return r.Status == "succeeded" || r.Status == "failed" }

// QueueRun queues a run.
func (u *User) QueueRun(ctx context.Context, project string, req RunRequest) (RunStatus, error) {
	var r RunStatus
	err := u.do(ctx, http.MethodPost, "/v1/projects/"+project+"/runs", req, &r, http.StatusCreated)
	return r, err
}

// Run reads a run.
func (u *User) Run(ctx context.Context, project, id string) (RunStatus, error) {
	var r RunStatus
	err := u.do(ctx, http.MethodGet, "/v1/projects/"+project+"/runs/"+id, nil, &r, http.StatusOK)
	return r, err
}

// RunEvent is one event of a run's log.
type RunEvent struct {
	Seq   int64  `json:"seq"`
	Epoch int64  `json:"epoch"`
	Kind  string `json:"kind"`
	Data  string `json:"data"`
}

// Events reads a run's events after sequence number after.
func (u *User) Events(ctx context.Context, project, run string, after int64) ([]RunEvent, error) {
	return u.EventsWait(ctx, project, run, after, 0)
}

// EventsWait reads a run's events after sequence number after, letting the server wait up to
// wait for one (or for the run's end) when there is none yet: a long poll.
func (u *User) EventsWait(ctx context.Context, project, run string, after int64, wait time.Duration) ([]RunEvent, error) {
	path := fmt.Sprintf("/v1/projects/%s/runs/%s/events?after=%d", project, run, after)
	if wait > 0 {
		path += "&wait=" + strconv.FormatFloat(wait.Seconds(), 'f', -1, 64)
	}
	var evs []RunEvent
	err := u.do(ctx, http.MethodGet, path, nil, &evs, http.StatusOK)
	return evs, err
}

// Follow hands each of the run's events to emit, in order, until the run ended and every
// event it wrote was handed over; it returns the run as it ended. Each read of the event log
// is a long poll: it answers as soon as the agent wrote an event or ended the run. The agent
// writes all of a run's events before it completes it, so reading the log once more after
// the end misses none.
func (u *User) Follow(ctx context.Context, project, run string, emit func(RunEvent)) (RunStatus, error) {
	wait := u.Wait
	if wait <= 0 {
		wait = 25 * time.Second
	}
	var after int64
	read := func(wait time.Duration) (int, error) {
		evs, err := u.EventsWait(ctx, project, run, after, wait)
		for _, e := range evs {
			emit(e)
			after = e.Seq
		}
		return len(evs), err
	}
	for {
		n, err := read(wait)
		if err != nil {
			return RunStatus{}, err
		}
		if n > 0 {
			continue
		}
		// Nothing new: the run ended, or the wait ran out.
		st, err := u.Run(ctx, project, run)
		if err != nil {
			return RunStatus{}, err
		}
		if st.Done() {
			for {
				if n, err := read(0); err != nil || n == 0 {
					return st, err
				}
			}
		}
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
	}
}
