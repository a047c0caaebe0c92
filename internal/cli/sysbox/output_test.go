package sysbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
)

// TestOutputAgainstState: outputs known only after apply (a node's external_id) are evaluated
// against the saved state, printed by `output` and stored in state by apply; sensitive outputs
// and outputs holding a secret reference are redacted and never stored.
func TestOutputAgainstState(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	extra := `
variable "admin_password" {
  type      = string
  default   = "hunter2-output-test"
  sensitive = true
}

output "admin_password" {
  value     = var.admin_password
  sensitive = true
}

output "token_ref" {
  value = { token = env("WEB_TOKEN") }
}

output "gateway_generation" {
  value = sysbox_node.gw.generation
}
`
	f, err := os.OpenFile(filepath.Join(dir, "main.sysbox.hcl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(extra); err != nil {
		t.Fatal(err)
	}
	f.Close()
	world := filepath.Join(dir, "world.json")
	environ := []string{EnvTestFakeWorld + "=" + world, "WEB_TOKEN=output-test-token"}
	sb := func(args ...string) result {
		t.Helper()
		r := run(t, environ, false, append([]string{"--chdir", dir}, args...)...)
		if strings.Contains(r.stdout+r.stderr, "hunter2-output-test") || strings.Contains(r.stdout+r.stderr, "output-test-token") {
			t.Fatalf("%v printed a secret:\n%s%s", args, r.stdout, r.stderr)
		}
		return r
	}

	// Before apply: the external id is not known.
	if r := sb("output", "gateway_id"); r.code != 0 || strings.TrimSpace(r.stdout) != "(known after apply)" {
		t.Fatalf("output gateway_id before apply: exit %d, got %q, want (known after apply)\n%s", r.code, r.stdout, r.stderr)
	}
	if r := sb("apply", "-auto-approve"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st := readLocalState(t, filepath.Join(dir, ".sysbox", "state"))
	gw := st.Resource(addrs.MustParseInstance("sysbox_node.gw"))
	if gw == nil || gw.ExternalID == "" {
		t.Fatalf("gw in state: %+v", gw)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"output", "gateway_id"}, gw.ExternalID + "\n"},
		{[]string{"output", "gateway_generation"}, "1\n"},
		{[]string{"output", "web_ips", "--json"}, `["198.51.100.10/24","198.51.100.11/24"]` + "\n"},
		{[]string{"output", "admin_password"}, Redacted + "\n"},
		{[]string{"output", "token_ref"}, Redacted + "\n"},
	} {
		r := sb(tc.args...)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("%v: exit %d, got %q, want %q\n%s", tc.args, r.code, r.stdout, tc.want, r.stderr)
		}
	}
	r := sb("output")
	for _, want := range []string{
		`gateway_id = "` + gw.ExternalID + `"`, "admin_password = " + Redacted, "token_ref = " + Redacted,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output: lacks %q\n%s", want, r.stdout)
		}
	}
	r = sb("output", "--json")
	var all map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		t.Fatalf("output --json: %v\n%s", err, r.stdout)
	}
	if got, want := string(all["gateway_id"]), `"`+gw.ExternalID+`"`; got != want {
		t.Errorf("output --json gateway_id: got %s, want %s", got, want)
	}
	if got, want := string(all["admin_password"]), `"`+Redacted+`"`; got != want {
		t.Errorf("output --json admin_password: got %s, want %s", got, want)
	}

	// State holds the known, non-secret outputs the apply computed — not the redacted ones.
	if got, want := string(st.Outputs["gateway_id"].Value), `"`+gw.ExternalID+`"`; got != want {
		t.Errorf("state output gateway_id: got %s, want %s", got, want)
	}
	for _, name := range []string{"admin_password", "token_ref"} {
		if _, ok := st.Outputs[name]; ok {
			t.Errorf("state stores output %s", name)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, ".sysbox", "state"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "hunter2-output-test") {
		t.Errorf("state file holds a secret output")
	}
}
