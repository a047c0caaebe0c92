// Package backends opens a state backend by kind — the one place that knows every backend
// implementation, so that the CLI and the agent choose a backend from configuration without
// importing each one.
package backends
