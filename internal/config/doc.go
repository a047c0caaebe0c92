// Package config decodes a sysbox topology directory (`*.sysbox.hcl`) into evaluated resource
// instances (requirement S1).
//
// Loading is two steps:
//
//  1. Load reads the files of the root module and of every local module it calls, and decodes
//     the static structure: substrate, variable, locals, module, data, resource and output
//     blocks. Nothing is evaluated yet.
//  2. Evaluate expands count and for_each on modules and resources, evaluates expressions with
//     OpenTofu's function library (funcs*.go) plus env and env_optional, and hands each resource body to
//     the schema registered for its type, which returns the typed, stored form of the resource.
//
// Invariants:
//   - Evaluation is demand-driven and memoised: every variable, local, output, module call and
//     resource is evaluated at most once per module instance, so the work is linear in the size
//     of the expanded configuration. A reference cycle is a diagnostic naming the cycle.
//   - A file is parsed in pieces split between top-level blocks (parse.go), which keeps the HCL
//     lexer's token slices small; the result is exactly that of one hclsyntax.ParseConfig of
//     the file (any piece with a diagnostic makes it parse the whole file again).
//   - A resource body is decoded straight from its syntax tree when its type's hcldec spec has
//     only the parts fastdecode.go covers and the body is valid; otherwise, and for every
//     diagnostic, hcldec.Decode decodes it. Both give the same value (this package's tests
//     compare them on every body they decode).
//   - Files are parsed in parallel; resources that no expression refers to are decoded in
//     parallel after the sequential pass (nothing can observe the difference). A resource's
//     value for expressions is built only when something refers to it. Diagnostics are sorted
//     by position, so the output does not depend on scheduling.
//   - Every problem is an hcl.Diagnostic with a source range; Evaluate collects all of them.
//   - env("X") yields the string secret://env/X marked sensitive and never reads X. A sensitive
//     value that is not a secret reference must not reach a resource attribute (it would be
//     stored in plan and state as plaintext).
//   - The only I/O is reading the configuration files, var files, and files named by the file
//     functions, which open them through an os.Root on the topology directory;
//     env_optional and SYSBOX_VAR_* read the environment passed in Options, never os.Getenv.
//   - Resource attributes must be known when planning; a value known only after apply
//     (external_id, generation, observation) may be used in outputs only.
package config
