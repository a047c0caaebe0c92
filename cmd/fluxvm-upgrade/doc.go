// Package main is the fluxvm-upgrade command line: argument parsing (cobra), then a call into
// fluxvm/upgrade or fluxvm/evidence, then rendering (human or --json). Exit codes are listed in
// exitcodes.go and docs/fluxvm-upgrade.md.
//
// Test-only switches (a fake, file-backed map store; SIGKILL failpoints; the fake-map helper
// command) exist only in binaries built with -tags fluxvmtest; a release build ignores them.
package main
