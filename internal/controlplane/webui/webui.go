package webui

import (
	"context"
	"crypto/ed25519"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/ui"
)

// View serves /ui/. Create it with New; Close ends its open event streams.
type View struct {
	st  *store.Store
	key ed25519.PrivateKey
	log *slog.Logger
	// Every is how often a workspace with an open page is reread: well inside the 2 s in
	// which a change must show.
	Every time.Duration
	// TTL is how long a browser session lasts.
	TTL time.Duration
	Now func() time.Time

	mu     sync.Mutex
	hubs   map[string]*hub // by workspace id
	closed bool
}

// hub is one workspace's page server and its readers.
type hub struct {
	srv  *ui.Server
	subs int
	stop context.CancelFunc // ends the rereading while nobody reads
}

// New returns the view over st; sessions are signed with key (the server's key).
func New(st *store.Store, key ed25519.PrivateKey, log *slog.Logger) *View {
	return &View{st: st, key: key, log: log, Every: 500 * time.Millisecond, TTL: 12 * time.Hour, Now: time.Now,
		hubs: map[string]*hub{}}
}

// Close ends every open event stream and stops rereading (an http.Server waits for open
// streams on shutdown: register Close with RegisterOnShutdown).
func (v *View) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	for _, h := range v.hubs {
		if h.stop != nil {
			h.stop()
		}
		h.srv.Close()
	}
}

// Handler serves /ui/ (the workspace list and the login form) and /ui/w/WORKSPACE/... (the
// page, its assets, api/graph and events).
func (v *View) Handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /ui/{$}", v.index)
	m.HandleFunc("GET /ui/w/{workspace}/", v.workspace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ui.CSP)
		h.Set("Referrer-Policy", "no-referrer") // a token in a URL never leaves in a Referer
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		m.ServeHTTP(w, r)
	})
}

// who authenticates a request: a bearer token (admin or project), else the session cookie.
// ok false: nobody (the answer is the caller's to write).
func (v *View) who(r *http.Request) (session, bool, error) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return v.tokenSession(r.Context(), strings.TrimSpace(tok))
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return session{}, false, nil
	}
	s, err := openSession(v.key.Public().(ed25519.PublicKey), c.Value, v.Now())
	if err != nil {
		v.log.Warn("ui session refused", "path", r.URL.Path, "err", err)
		return session{}, false, nil
	}
	return s, true, nil
}

// tokenSession is the session a token opens: admin and project tokens only (a join token
// shows nothing).
func (v *View) tokenSession(ctx context.Context, tok string) (session, bool, error) {
	t, err := v.st.LookupToken(ctx, tok)
	if errors.Is(err, store.ErrNotFound) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, err
	}
	if t.Kind != store.TokenAdmin && t.Kind != store.TokenProject {
		return session{}, false, nil
	}
	return session{Kind: t.Kind, Project: t.Project, Expires: v.Now().Add(v.TTL)}, true, nil
}

func (v *View) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	v.log.Error("ui request failed", "path", r.URL.Path, "err", err)
	http.Error(w, "internal error (logged)", http.StatusInternalServerError)
}

var pages = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sysbox ui</title></head>
<body><header><b>sysbox ui</b></header><main style="display:block;padding:10px">
{{if .Message}}<p class="error">{{.Message}}</p>{{end}}
<form method="get" action="./"><label>Project token <input type="password" name="token" autocomplete="off"></label>
<button>Open</button></form></main></body></html>
`))

func init() {
	template.Must(pages.New("list").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sysbox ui · workspaces</title></head>
<body><header><b>sysbox ui</b> · workspaces</header><main style="display:block;padding:10px">
{{range .}}<h3>{{.Project.Name}}</h3><ul>{{range .Workspaces}}
<li><a href="w/{{.ID}}/" data-workspace="{{.ID}}">{{.Name}}</a></li>{{else}}<li>no workspace</li>{{end}}</ul>
{{end}}</main></body></html>
`))
}

type projectList struct {
	Project    store.Project
	Workspaces []store.Workspace
}

// index exchanges ?token= for the session cookie, or lists the session's workspaces, or asks
// for a token.
func (v *View) index(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		s, ok, err := v.tokenSession(r.Context(), tok)
		if err != nil {
			v.fail(w, r, err)
			return
		}
		if !ok {
			v.log.Warn("ui login refused: unknown token")
			v.login(w, http.StatusUnauthorized, "Unknown token.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.seal(v.key), Path: "/ui/", Expires: s.Expires,
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		v.log.Info("ui session opened", "kind", s.Kind, "project", s.Project)
		http.Redirect(w, r, "./", http.StatusSeeOther) // the token leaves the address bar
		return
	}
	s, ok, err := v.who(r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if !ok {
		v.login(w, http.StatusUnauthorized, "")
		return
	}
	list, err := v.workspaces(r.Context(), s)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "list", list); err != nil {
		v.log.Error("ui workspace list", "err", err)
	}
}

func (v *View) login(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = pages.ExecuteTemplate(w, "login", struct{ Message string }{msg})
}

// workspaces lists what s may see: its project's workspaces, or every project's for an admin.
func (v *View) workspaces(ctx context.Context, s session) ([]projectList, error) {
	var ps []store.Project
	if s.Kind == store.TokenAdmin {
		all, err := v.st.Projects(ctx)
		if err != nil {
			return nil, err
		}
		ps = all
	} else {
		p, err := v.st.Project(ctx, s.Project)
		if err != nil {
			return nil, err
		}
		ps = []store.Project{p}
	}
	out := []projectList{}
	for _, p := range ps {
		ws, err := v.st.Workspaces(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, projectList{Project: p, Workspaces: ws})
	}
	return out, nil
}

// projectOf finds the project of workspace ws that s may see (ErrNotFound otherwise, whether
// it does not exist or belongs to another project).
func (v *View) projectOf(ctx context.Context, s session, ws string) (string, error) {
	if s.Kind != store.TokenAdmin {
		_, err := v.st.Workspace(ctx, s.Project, ws)
		return s.Project, err
	}
	list, err := v.workspaces(ctx, s)
	if err != nil {
		return "", err
	}
	for _, p := range list {
		for _, w := range p.Workspaces {
			if w.ID == ws {
				return p.Project.ID, nil
			}
		}
	}
	return "", store.ErrNotFound
}

// workspace serves the page of a workspace and what it loads (ui.Server.Mux, under the
// workspace's prefix).
func (v *View) workspace(w http.ResponseWriter, r *http.Request) {
	s, ok, err := v.who(r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if !ok {
		http.Error(w, "a session (open /ui/?token=TOKEN) or a bearer token is required", http.StatusUnauthorized)
		return
	}
	ws := r.PathValue("workspace")
	project, err := v.projectOf(r.Context(), s, ws)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	prefix := "/ui/w/" + ws
	h, release, err := v.hub(project, ws, strings.TrimPrefix(r.URL.Path, prefix) == "/events")
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer release()
	if strings.TrimPrefix(r.URL.Path, prefix) == "/api/graph" {
		_ = h.srv.Poll(r.Context()) // fresh; a load error is published in the graph itself
	}
	http.StripPrefix(prefix, h.srv.Mux()).ServeHTTP(w, r)
}

var errClosed = errors.New("ui: shutting down")

// hub returns the workspace's page server. A reader (an event stream) keeps it rereading the
// workspace until release; the last release stops that.
func (v *View) hub(project, ws string, reader bool) (*hub, func(), error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, nil, errClosed
	}
	h := v.hubs[ws]
	if h == nil {
		h = &hub{srv: ui.NewServer(&source{st: v.st, project: project, workspace: ws})}
		v.hubs[ws] = h
	}
	if !reader {
		return h, func() {}, nil
	}
	if h.subs == 0 {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		go h.srv.Run(ctx, v.Every)
	}
	h.subs++
	return h, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if h.subs--; h.subs == 0 && h.stop != nil {
			h.stop()
			h.stop = nil
		}
	}, nil
}
