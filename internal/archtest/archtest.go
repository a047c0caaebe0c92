// Package archtest states the module's dependency direction as rules over import paths and
// checks them against `go list` (TestDependencyDirection). docs/architecture.md explains the
// layers; this package is what keeps that page true.
//
// Rules name packages by path relative to the module (e.g. "internal/handlers") and match a
// package and everything below it. The executor is matched as internal/exec or
// internal/executor, so the rules hold across its rename.
package archtest

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Module is the module path every rule is relative to.
const Module = "zyvor.dev/sysbox"

// Package is one package and what it imports (module-relative paths; others as they are).
type Package struct {
	Path    string
	Imports []string
}

// Rule forbids packages matching From (but not Except) to import packages matching Forbid,
// unless the import also matches Allow. A package may always import its own subpackages.
type Rule struct {
	Name   string
	From   *regexp.Regexp
	Except *regexp.Regexp // nil: none
	Forbid *regexp.Regexp
	Allow  *regexp.Regexp // nil: none
	// Tree, when set, allows imports inside one tree: a package may import another whose path
	// starts with the same match of Tree (a driver's test commands import its test packages).
	Tree *regexp.Regexp
}

// under matches each path and everything below it.
func under(paths ...string) *regexp.Regexp {
	return regexp.MustCompile(`^(` + strings.Join(paths, "|") + `)(/|$)`)
}

// anyPkg matches every module package.
var anyPkg = regexp.MustCompile(`^`)

// Layers, as path patterns.
const (
	executor  = `internal/exec(utor)?`
	drivers   = `drivers/[^/]+`
	cli       = `internal/cli`
	fake      = `internal/driver/fake`
	substrate = `pkg`
	// planning is the pure core: decode, graph, plan, state model.
	planning = `internal/(addrs|config|graph|handlers|plans|states|secrets)`
	backends = `internal/backend`
	fluxvm   = `fluxvm`
	// procfs reads /proc/PID/stat (a process's start time): a foundation of drivers, the CLI and
	// fluxvm-upgrade, and the only reader of that file (ProcStatReaders).
	procfs = `internal/procfs`
	// guestagent is a foundation of the VM drivers and the one module package the guest binary links.
	guestagent = `internal/guestagent`
	// wiring may hold concrete drivers: the CLI, commands, agents, benchmarks, examples, tests.
	wiring = `internal/cli|internal/agent|cmd|bench|examples|test`
)

// Rules is the module's dependency direction.
var Rules = []Rule{
	{Name: "pkg/ holds neutral data: it imports nothing else of the module",
		From: under(substrate), Forbid: anyPkg, Allow: under(substrate)},
	{Name: "internal/driver (interfaces, registry) depends only on pkg/",
		From: regexp.MustCompile(`^internal/driver$`), Forbid: anyPkg, Allow: under(substrate)},
	{Name: "a driver depends only on internal/driver, pkg/ and foundations (durable, argv, feature, procfs, guestagent), and on drivers/linuxnet; never on the runtime or another driver",
		From:   under(drivers),
		Forbid: anyPkg,
		Allow:  under(substrate, `internal/driver`, `internal/durable`, `internal/argv`, `internal/feature`, procfs, guestagent, `drivers/linuxnet`),
		Tree:   regexp.MustCompile(`^` + drivers + `(/|$)`)},
	{Name: "the executor reaches drivers only through the registry and resource types only through its Resources interface: no concrete driver, no fake, no CLI, no handlers, no config",
		From: under(executor), Forbid: under(drivers, fake, cli, `cmd`, `internal/handlers`, `internal/config`)},
	{Name: "planning (addrs, config, graph, handlers, plans, states, secrets) imports no driver, executor, backend or CLI",
		From: under(planning), Forbid: under(drivers, fake, executor, backends, cli, `cmd`)},
	{Name: "state backends import no driver, executor, planner or CLI",
		From: under(backends), Forbid: under(drivers, fake, executor, `internal/(config|handlers|plans)`, cli, `cmd`)},
	{Name: "only the wiring layer (CLI, cmd, agent, bench, examples, tests) imports a concrete driver",
		From: anyPkg, Except: under(wiring, drivers), Forbid: under(drivers)},
	{Name: "the fake driver is imported by no package of a normal build (tests and -tags sysboxtest only)",
		From: anyPkg, Forbid: under(fake)},
	{Name: "fluxvm-upgrade shares only foundations (durable, argv, feature, procfs, testenv) with sysbox",
		From: under(fluxvm), Forbid: regexp.MustCompile(`^(internal|drivers|pkg)/`), Allow: under(`internal/durable`, `internal/argv`, `internal/feature`, procfs, `internal/testenv`)},
	{Name: "internal/driver/guestvm (the VM drivers' shared guest-agent glue) imports only pkg/, internal/driver and internal/guestagent: no driver, no runtime",
		From: under(`internal/driver/guestvm`), Forbid: anyPkg,
		Allow: regexp.MustCompile(`^(` + substrate + `|` + guestagent + `)(/|$)|^internal/driver$`)},
	{Name: "internal/guestagent (the guest agent protocol, linked into guest images) imports nothing else of the module",
		From: under(guestagent), Forbid: anyPkg},
	{Name: "cmd/sysbox-guest (runs inside guests) links only internal/guestagent of the module, never the sysbox runtime",
		From: under(`cmd/sysbox-guest`), Forbid: anyPkg, Allow: under(guestagent)},
	{Name: "the control plane (API server, its store) holds no host rights: it imports no driver, fake, executor, agent, CLI or cmd; host work reaches it only from agents over the signed protocol",
		From: under(`internal/controlplane`), Forbid: under(drivers, fake, executor, `internal/agent`, cli, `cmd`)},
	{Name: "internal/procfs (reads /proc/PID/stat for drivers and the CLI) imports nothing else of the module",
		From: under(procfs), Forbid: anyPkg},
	{Name: "nothing but cmd/ imports the CLI",
		From: anyPkg, Except: under(`cmd`, cli), Forbid: under(cli)},
}

// Violations returns, sorted, every import in pkgs that breaks a rule, as
// "FROM imports TO: RULE".
func Violations(pkgs []Package, rules []Rule) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.From.MatchString(p.Path) || (r.Except != nil && r.Except.MatchString(p.Path)) {
				continue
			}
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, p.Path+"/") || !r.Forbid.MatchString(imp) || (r.Allow != nil && r.Allow.MatchString(imp)) {
					continue
				}
				if r.Tree != nil && sameTree(r.Tree, p.Path, imp) {
					continue
				}
				out = append(out, fmt.Sprintf("%s imports %s: %s", p.Path, imp, r.Name))
			}
		}
	}
	sort.Strings(out)
	return out
}

func sameTree(tree *regexp.Regexp, a, b string) bool {
	ta := strings.TrimSuffix(tree.FindString(a), "/")
	return ta != "" && ta == strings.TrimSuffix(tree.FindString(b), "/")
}

// Parse reads `go list -f '{{.ImportPath}} {{join .Imports " "}}'` output, keeping only imports
// inside the module and making every path module-relative.
func Parse(listing string) []Package {
	var out []Package
	for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p := Package{Path: rel(f[0])}
		for _, imp := range f[1:] {
			if r := rel(imp); r != imp {
				p.Imports = append(p.Imports, r)
			}
		}
		out = append(out, p)
	}
	return out
}

func rel(path string) string {
	if path == Module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, Module+"/"); ok {
		return r
	}
	return path
}
