// Package sysbox is the sysbox command line: one file per command, sharing the root command,
// global flags and helpers in root.go.
//
// Invariants:
//   - Each command splits argument parsing (cobra flags), the command's logic (packages config,
//     plans, graph …) and rendering (human text or --json).
//   - Exit codes: 0 success; 1 error; 2 from plan -detailed-exitcode when there are changes;
//     3 for a stale plan (errors wrapping plans.ErrStale). See ExitCode.
//   - Colour only when stdout is a terminal and --no-color is not given.
//   - Nothing here prints a secret: plans and diagnostics hold secret references only.
//   - Terraform-style single-dash long flags (-out, -var, -target …) are accepted and mean the
//     same as their double-dash forms.
package sysbox
