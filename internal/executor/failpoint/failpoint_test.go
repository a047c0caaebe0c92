package failpoint

import (
	"path/filepath"
	"strings"
	"testing"
)

var known = []string{"checkpoint", "state"}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want map[string]int
		err  string
	}{
		{spec: "", want: map[string]int{}},
		{spec: "checkpoint@3", want: map[string]int{"checkpoint": 3}},
		{spec: "checkpoint@3, state@1", want: map[string]int{"checkpoint": 3, "state": 1}},
		{spec: "chekpoint@3", err: `unknown point "chekpoint" (known: checkpoint, state)`},
		{spec: "checkpoint", err: "want POINT@N"},
		{spec: "checkpoint@0", err: "want POINT@N"},
		{spec: "checkpoint@x", err: "want POINT@N"},
		{spec: "state@1,state@2", err: "given twice"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := Parse(tc.spec, known)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.want) != len(tc.want) {
				t.Fatalf("got %v, want %v", s.want, tc.want)
			}
			for k, v := range tc.want {
				if s.want[k] != v {
					t.Fatalf("got %v, want %v", s.want, tc.want)
				}
			}
		})
	}
}

func TestFromEnvTraceCounts(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace")
	env := map[string]string{EnvTrace: trace}
	s, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, known)
	if err != nil || s == nil {
		t.Fatalf("FromEnv: %v, %v", s, err)
	}
	for _, p := range []string{"checkpoint", "state", "checkpoint"} {
		s.Hit(p)
	}
	n, err := Count(trace)
	if err != nil {
		t.Fatal(err)
	}
	if n["checkpoint"] != 2 || n["state"] != 1 || len(n) != 2 {
		t.Fatalf("got %v, want checkpoint:2 state:1", n)
	}
	env[EnvSpec] = "nope@1"
	if _, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, known); err == nil || !strings.Contains(err.Error(), EnvSpec) {
		t.Fatalf("unknown name: got %v, want an error naming %s", err, EnvSpec)
	}
	if s, err := FromEnv(func(string) (string, bool) { return "", false }, known); s != nil || err != nil {
		t.Fatalf("unset: got %v, %v, want nil, nil", s, err)
	}
}

func TestHitUndeclaredPanics(t *testing.T) {
	s, _ := Parse("", known)
	defer func() {
		if recover() == nil {
			t.Fatal("Hit of an undeclared point did not panic")
		}
	}()
	s.Hit("other")
}

// TestFromEnvAction: "stop" is the only other action; a misspelled one is refused, or a fault
// test would get a SIGKILL where it expects a stopped process.
func TestFromEnvAction(t *testing.T) {
	for action, ok := range map[string]bool{"": true, "kill": true, "stop": true, "pause": false, "STOP": false} {
		env := map[string]string{EnvSpec: "state@1", EnvAction: action}
		s, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, known)
		if ok != (err == nil) {
			t.Errorf("action %q: %v", action, err)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), EnvAction) {
			t.Errorf("action %q: %v does not name %s", action, err, EnvAction)
		}
		if err == nil && s.stop != (action == "stop") {
			t.Errorf("action %q: stop = %v", action, s.stop)
		}
	}
}
