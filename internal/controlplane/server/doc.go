// Package server is the control plane's HTTP JSON API (under /v1, described by the OpenAPI
// document it serves at /v1/openapi.json) and its /metrics endpoint.
//
// Invariants:
//   - Every user endpoint needs a bearer token; a project token sees only its project, and an
//     object of another project answers 404, never 403, so ids of other projects leak nothing.
//   - Every agent endpoint needs a request signed by a registered, unrevoked agent (package
//     wire): unknown keys, bad signatures, stale timestamps, replayed nonces and revoked agents
//     are refused with 401 and logged with the class of failure. Every answer to a signed
//     request is signed with the server's key over the request's nonce.
//   - Writes on a run's behalf carry the lease epoch in the signed headers; the store refuses
//     old epochs (409), so a paused agent cannot write after another claimed its run.
//   - No token plaintext is logged or stored; the admin token exists in plaintext only in the
//     data directory's admin.token file (0600, written durably at first start).
package server
