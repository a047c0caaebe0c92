package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Errorf("%s: malformed line %q", path, line)
			}
			keys[section+"."+k] = v
		}
	}
	return keys
}

// TestSystemdUnits checks the shipped timer runs every 5 minutes and the service runs a reconcile
// command line this binary accepts, with 15 stale minutes (F17).
func TestSystemdUnits(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "systemd")
	timer := unitKeys(t, filepath.Join(dir, "fluxvm-upgrade-reconcile.timer"))
	if got := timer["Timer.OnUnitActiveSec"]; got != "5min" {
		t.Errorf("timer OnUnitActiveSec: got %q, want 5min", got)
	}
	if got := timer["Install.WantedBy"]; got != "timers.target" {
		t.Errorf("timer WantedBy: got %q, want timers.target", got)
	}
	svc := unitKeys(t, filepath.Join(dir, "fluxvm-upgrade-reconcile.service"))
	if got := svc["Service.Type"]; got != "oneshot" {
		t.Errorf("service Type: got %q, want oneshot", got)
	}
	argv := strings.Fields(svc["Service.ExecStart"])
	if len(argv) < 2 || filepath.Base(argv[0]) != "fluxvm-upgrade" || argv[1] != "reconcile" {
		t.Fatalf("ExecStart: got %v, want fluxvm-upgrade reconcile ...", argv)
	}
	args := argv[1:]
	stale := ""
	for i, a := range args {
		if a == "--stale-minutes" && i+1 < len(args) {
			stale = args[i+1]
		}
		if a == "--state-dir" && i+1 < len(args) {
			args[i+1] = t.TempDir() // run the unit's command line against an empty state dir
		}
	}
	if stale != "15" {
		t.Errorf("ExecStart --stale-minutes: got %q, want 15", stale)
	}
	w := newWorld(t, "")
	if r := w.run("", args...); r.code != 0 {
		t.Errorf("unit command line %v: exit %d: %s", args, r.code, r.stderr)
	}
}
