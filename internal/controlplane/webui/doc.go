// Package webui serves the control plane's read-only web view at /ui/: the list of the
// workspaces a token may see, and per workspace (/ui/w/WORKSPACE/) the same page, assets,
// /api/graph and /events as `sysbox ui` (package ui), built from the workspace's projections
// and the plan of its latest run, with that run's progress lines.
//
// Invariants:
//   - Read only: every route is GET (HEAD); the view writes nothing to the store.
//   - A browser authenticates once with a project (or admin) token, as /ui/?token=TOKEN; the
//     answer sets an HttpOnly, SameSite=Strict cookie scoped to /ui/ that holds no token: a
//     session (kind, project, expiry) signed with the server's key. Scripts may send
//     `Authorization: Bearer TOKEN` instead. Another project's workspace answers 404, as the
//     API does.
//   - What is served comes from projections (address, observation, external id) and stored
//     plans, which hold no secret plaintext and no private envelope; run lines are the
//     progress lines agents already send.
//   - Event ids derive from stored data (the latest run, its event sequence and status, and
//     the projections' last change), so Last-Event-ID resumes across restarts and replicas.
//   - A workspace is reread only while a page has its event stream open (every Every).
package webui
