package upgrade

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodPlan = `{
  "transaction_id": "tx-1",
  "state_dir": "/var/lib/x",
  "bpffs_root": "/sys/fs/bpf",
  "components": [
    {
      "name": "conntrack",
      "hooks": {
        "preflight": ["/usr/bin/true"],
        "apply": {"argv": ["/usr/bin/true", "apply"], "timeout_seconds": 30},
        "health": ["/usr/bin/true"],
        "rollback": ["/usr/bin/true"],
        "rollback_health": ["/usr/bin/true"]
      },
      "files": ["/etc/fluxvm/conntrack.conf"],
      "maps": [{"name": "ct", "pin": "fluxvm/ct", "policy": "merge", "type": "hash", "key_size": 4, "value_size": 8, "max_entries": 1024}],
      "state_abi": {"current": 2, "target": 3, "target_compatible_from": [2, 3]}
    }
  ],
  "signing": {"ssh_private_key": "/etc/fluxvm/key", "namespace": "fluxvm-upgrade"}
}`

func TestParsePlanGood(t *testing.T) {
	p, err := ParsePlan("plan.json", []byte(goodPlan))
	if err != nil {
		t.Fatalf("ParsePlan: %v", err)
	}
	c := p.Components[0]
	if got, want := c.Maps[0].Pin, "/sys/fs/bpf/fluxvm/ct"; got != want {
		t.Errorf("pin: got %s, want %s", got, want)
	}
	if got, want := c.Maps[0].Declared.Type, "Hash"; got != want {
		t.Errorf("type: got %s, want %s", got, want)
	}
	if got, want := c.Hooks.Apply.Timeout.String(), "30s"; got != want {
		t.Errorf("apply timeout: got %s, want %s", got, want)
	}
	if got, want := c.Hooks.Health.Timeout, DefaultHookTimeout; got != want {
		t.Errorf("default timeout: got %s, want %s", got, want)
	}
	if len(p.SHA256) != 64 {
		t.Errorf("sha256: got %q", p.SHA256)
	}
}

func TestParsePlanDefaults(t *testing.T) {
	p, err := ParsePlan("p", []byte(`{"transaction_id":"a","components":[{"name":"c","hooks":{"preflight":["/x"],"apply":["/x"],"health":["/x"],"rollback":["/x"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.StateDir != DefaultStateDir || p.BPFFSRoot != DefaultBPFFSRoot {
		t.Errorf("defaults: got %s %s, want %s %s", p.StateDir, p.BPFFSRoot, DefaultStateDir, DefaultBPFFSRoot)
	}
}

// mutate returns goodPlan with old replaced by new (exactly once).
func mutate(t *testing.T, old, new string) string {
	t.Helper()
	if strings.Count(goodPlan, old) != 1 {
		t.Fatalf("mutate: %q occurs %d times", old, strings.Count(goodPlan, old))
	}
	return strings.Replace(goodPlan, old, new, 1)
}

func TestParsePlanProblems(t *testing.T) {
	tests := []struct {
		name  string
		plan  string
		paths []string // JSON paths that must be reported
		msg   string   // substring of the first problem
	}{
		{"malformed JSON", `{"transaction_id": "a",`, []string{"$"}, "malformed JSON"},
		{"trailing data", goodPlan + "{}", []string{"$"}, "after the top-level value"},
		{"not an object", `[1]`, []string{"$"}, "must be an object"},
		{"duplicate key", `{"transaction_id":"a","transaction_id":"b","components":[]}`, []string{"$.transaction_id"}, "duplicate object key"},
		{"unknown top-level field", mutate(t, `"state_dir"`, `"statedir"`), []string{"$.statedir"}, "unknown field"},
		{"unknown component field", mutate(t, `"files":`, `"file":`), []string{"$.components[0].file"}, "unknown field"},
		{"unknown map field", mutate(t, `"key_size": 4`, `"keysize": 4`), []string{"$.components[0].maps[0].keysize"}, "unknown field"},
		{"unknown hook", mutate(t, `"rollback_health"`, `"rollback_healthz"`), []string{"$.components[0].hooks.rollback_healthz"}, "unknown field"},
		{"missing transaction id", mutate(t, `"transaction_id": "tx-1",`, ``), []string{"$.transaction_id"}, "missing"},
		{"bad transaction id", mutate(t, `"tx-1"`, `"tx/1"`), []string{"$.transaction_id"}, "[A-Za-z0-9._-]"},
		{"dot-dot transaction id", mutate(t, `"tx-1"`, `".."`), []string{"$.transaction_id"}, "relative directory"},
		{"long transaction id", mutate(t, `"tx-1"`, `"`+strings.Repeat("a", 129)+`"`), []string{"$.transaction_id"}, "1-128"},
		{"transaction id not a string", mutate(t, `"tx-1"`, `7`), []string{"$.transaction_id"}, "must be a string"},
		{"relative state dir", mutate(t, `"/var/lib/x"`, `"var/lib/x"`), []string{"$.state_dir"}, "absolute"},
		{"missing components", mutate(t, `"components": [`, `"xcomponents": [`), []string{"$.xcomponents", "$.components"}, ""},
		{"empty components", `{"transaction_id":"a","components":[]}`, []string{"$.components"}, "at least one"},
		{"missing name", mutate(t, `"name": "conntrack",`, ``), []string{"$.components[0].name"}, "missing"},
		{"missing hooks", `{"transaction_id":"a","components":[{"name":"c"}]}`, []string{"$.components[0].hooks"}, "missing"},
		{"missing apply hook", mutate(t, `"apply": {"argv": ["/usr/bin/true", "apply"], "timeout_seconds": 30},`, ``), []string{"$.components[0].hooks.apply"}, "missing required hook"},
		{"empty argv", mutate(t, `"health": ["/usr/bin/true"]`, `"health": []`), []string{"$.components[0].hooks.health"}, "must not be empty"},
		{"string argv", mutate(t, `"health": ["/usr/bin/true"]`, `"health": "/usr/bin/true --x"`), []string{"$.components[0].hooks.health"}, "argv array"},
		{"non-string arg", mutate(t, `"health": ["/usr/bin/true"]`, `"health": ["/usr/bin/true", 3]`), []string{"$.components[0].hooks.health[1]"}, "must be a string"},
		{"relative program", mutate(t, `"health": ["/usr/bin/true"]`, `"health": ["true"]`), []string{"$.components[0].hooks.health[0]"}, "absolute path"},
		{"bad timeout", mutate(t, `"timeout_seconds": 30`, `"timeout_seconds": 0`), []string{"$.components[0].hooks.apply.timeout_seconds"}, "between"},
		{"relative file", mutate(t, `"/etc/fluxvm/conntrack.conf"`, `"etc/conntrack.conf"`), []string{"$.components[0].files[0]"}, "absolute"},
		{"dotdot file", mutate(t, `"/etc/fluxvm/conntrack.conf"`, `"/etc/../conntrack.conf"`), []string{"$.components[0].files[0]"}, ".."},
		{"duplicate file", mutate(t, `["/etc/fluxvm/conntrack.conf"]`, `["/etc/a", "/etc/a"]`), []string{"$.components[0].files[1]"}, "already declared"},
		{"unknown policy", mutate(t, `"policy": "merge"`, `"policy": "copy"`), []string{"$.components[0].maps[0].policy"}, "unknown policy"},
		{"missing policy", mutate(t, `"policy": "merge", `, ``), []string{"$.components[0].maps[0].policy"}, "missing"},
		{"pin dotdot", mutate(t, `"fluxvm/ct"`, `"fluxvm/../../etc/passwd"`), []string{"$.components[0].maps[0].pin"}, "'..'"},
		{"pin absolute elsewhere", mutate(t, `"fluxvm/ct"`, `"/etc/passwd"`), []string{"$.components[0].maps[0].pin"}, "not beneath bpffs_root"},
		{"pin is root", mutate(t, `"fluxvm/ct"`, `"/sys/fs/bpf"`), []string{"$.components[0].maps[0].pin"}, "not beneath bpffs_root"},
		{"unknown map type", mutate(t, `"type": "hash"`, `"type": "hashish"`), []string{"$.components[0].maps[0].type"}, "unknown map type"},
		{"merge on percpu", mutate(t, `"type": "hash"`, `"type": "percpu_hash"`), []string{"$.components[0].maps[0].policy"}, "component-specific migration"},
		{"merge on map-in-map", mutate(t, `"type": "hash"`, `"type": "hash_of_maps"`), []string{"$.components[0].maps[0].policy"}, "component-specific migration"},
		{"replace on array", mutate(t, `"policy": "merge", "type": "hash"`, `"policy": "replace", "type": "array"`), []string{"$.components[0].maps[0].policy"}, "deletable"},
		{"key size zero", mutate(t, `"key_size": 4`, `"key_size": 0`), []string{"$.components[0].maps[0].key_size"}, "between"},
		{"key size fraction", mutate(t, `"key_size": 4`, `"key_size": 4.5`), []string{"$.components[0].maps[0].key_size"}, "integer"},
		{"logical ABI gate", mutate(t, `"target_compatible_from": [2, 3]`, `"target_compatible_from": [3]`), []string{"$.components[0].state_abi"}, "logical state ABI"},
		{"logical ABI missing target", mutate(t, `"target": 3, `, ``), []string{"$.components[0].state_abi.target"}, "missing"},
		{"signing relative key", mutate(t, `"/etc/fluxvm/key"`, `"key"`), []string{"$.signing.ssh_private_key"}, "absolute"},
		{"signing empty namespace", mutate(t, `"namespace": "fluxvm-upgrade"`, `"namespace": ""`), []string{"$.signing.namespace"}, "non-empty"},
		{"many problems at once",
			`{"transaction_id":"a b","bogus":1,"components":[{"name":"c","hooks":{"preflight":[],"apply":["x"],"health":["/x"],"rollback":["/x"]},"maps":[{"name":"m","pin":"../m","policy":"nope"},{"name":"m","pin":"/elsewhere","policy":"merge"}]},{"name":"c","hooks":{"preflight":["/x"],"apply":["/x"],"health":["/x"],"rollback":["/x"]},"files":["rel"]}]}`,
			[]string{"$.transaction_id", "$.bogus", "$.components[0].hooks.preflight", "$.components[0].hooks.apply[0]",
				"$.components[0].maps[0].pin", "$.components[0].maps[0].policy", "$.components[0].maps[1].name",
				"$.components[0].maps[1].pin", "$.components[1].name", "$.components[1].files[0]"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePlan("plan.json", []byte(tt.plan))
			if err == nil {
				t.Fatalf("got no error, want problems at %v", tt.paths)
			}
			if !errors.Is(err, ErrInvalidPlan) {
				t.Errorf("got %v, want it to wrap ErrInvalidPlan", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %T, want *ValidationError", err)
			}
			got := map[string]bool{}
			for _, p := range ve.Problems {
				got[p.Path] = true
				if p.Line == 0 {
					t.Errorf("problem %q has no line", p.String("plan.json"))
				}
			}
			for _, want := range tt.paths {
				if !got[want] {
					t.Errorf("got problems %v, want one at %s", ve.Problems, want)
				}
			}
			if tt.msg != "" && !strings.Contains(ve.Problems[0].Msg, tt.msg) {
				t.Errorf("got message %q, want it to contain %q", ve.Problems[0].Msg, tt.msg)
			}
			if !strings.Contains(err.Error(), "plan.json:") {
				t.Errorf("got error %q, want it to name the file", err)
			}
		})
	}
}

func TestProblemLocation(t *testing.T) {
	src := "{\n  \"transaction_id\": \"a\",\n  \"bogus\": true,\n  \"components\": []\n}"
	_, err := ParsePlan("p.json", []byte(src))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	if got, want := ve.Problems[0].String("p.json"), `p.json:3:3: $.bogus: unknown field "bogus"`; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want prefix %q", got, want)
	}
}

func TestResolvePinSymlinkEscape(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "fluxvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "fluxvm"), filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pin     string
		wantErr bool
	}{
		{"fluxvm/ct", false},
		{"fluxvm/not/yet/there", false},
		{"inside/ct", false},
		{"escape/ct", true},
		{"escape", true},
		{filepath.Join(root, "escape", "x"), true},
		{"../x", true},
		{"/etc/passwd", true},
	}
	for _, tt := range tests {
		_, err := ResolvePin(root, tt.pin)
		if (err != nil) != tt.wantErr {
			t.Errorf("ResolvePin(%q): got err %v, want error %v", tt.pin, err, tt.wantErr)
		}
	}
	// The same through validate, reported with the JSON path.
	plan := `{"transaction_id":"a","bpffs_root":"` + root + `","components":[{"name":"c","hooks":{"preflight":["/x"],"apply":["/x"],"health":["/x"],"rollback":["/x"]},"maps":[{"name":"m","pin":"escape/m","policy":"merge"}]}]}`
	_, err := ParsePlan("p", []byte(plan))
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Path != "$.components[0].maps[0].pin" || !strings.Contains(ve.Problems[0].Msg, "symlink") {
		t.Errorf("got %v, want a symlink escape at $.components[0].maps[0].pin", err)
	}
}

func TestCanonicalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`},
		{" { \"a\" : 1.0 } ", `{"a":1}`},
		{`[1e3, 0.000001, 1e-7, 1e21, 123456789012345678901234, -0, 1.5e300, 0.1]`, `[1000,0.000001,1e-7,1e+21,1.2345678901234569e+23,0,1.5e+300,0.1]`},
		{`"\u00e9\n\u001f\"\\/"`, "\"é\\n\\u001f\\\"\\\\/\""},
		{`{"\u20ac":1,"\r":2,"a":3,"\ud83d\ude00":4,"\ufb33":5}`, "{\"\\r\":2,\"a\":3,\"€\":1,\"😀\":4,\"דּ\":5}"},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if err != nil {
			t.Errorf("Canonicalize(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Canonicalize(%s): got %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPlanHashIgnoresFormattingOnly(t *testing.T) {
	a, err := ParsePlan("a", []byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	reformatted := strings.NewReplacer("\n", "", "  ", "").Replace(goodPlan)
	b, err := ParsePlan("b", []byte(reformatted))
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 {
		t.Errorf("whitespace changed the hash: got %s and %s", a.SHA256, b.SHA256)
	}
	c, err := ParsePlan("c", []byte(mutate(t, `"max_entries": 1024`, `"max_entries": 2048`)))
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 == c.SHA256 {
		t.Errorf("a semantic change kept the hash %s", a.SHA256)
	}
}
