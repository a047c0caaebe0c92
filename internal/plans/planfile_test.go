package plans_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/secrets"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var baseDir string

// basePlan plans baseLab from one directory per test binary, so two calls give equal plans.
func basePlan(t *testing.T) (*plans.Plan, *config.Topology) {
	t.Helper()
	if baseDir == "" {
		baseDir, _ = os.MkdirTemp("", "sysbox-plans-test")
		os.WriteFile(filepath.Join(baseDir, "main.sysbox.hcl"), []byte(baseLab), 0o644)
	}
	tp := load(t, baseDir, nil)
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{LineageID: "lineage-1", SerialNo: 7}, Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return p, tp
}

func TestPlanFileRoundTrip(t *testing.T) {
	p, _ := basePlan(t)
	path := filepath.Join(t.TempDir(), "lab.plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := plans.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := plans.Verify(p, got); err != nil {
		t.Errorf("Verify of identical plans: %v", err)
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Errorf("plan file mode: got %v, want 0600", info.Mode().Perm())
	}
}

func TestPlanFileRejectsDamageAndNewerVersions(t *testing.T) {
	p, _ := basePlan(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	tampered := strings.Replace(string(b), `\"create\"`, `\"no-op\"`, 1)
	if tampered == string(b) {
		tampered = strings.Replace(string(b), `create`, `no-op`, 1)
	}
	os.WriteFile(path, []byte(tampered), 0o600)
	if _, err := plans.ReadFile(path); !errors.Is(err, durable.ErrCorrupt) {
		t.Errorf("tampered: got %v, want ErrCorrupt", err)
	}
	os.WriteFile(path, b[:len(b)/2], 0o600)
	if _, err := plans.ReadFile(path); !errors.Is(err, durable.ErrCorrupt) {
		t.Errorf("torn: got %v, want ErrCorrupt", err)
	}
	newer, _ := durable.EncodeRecord(plans.RecordKind, 2, p)
	os.WriteFile(path, newer, 0o600)
	if _, err := plans.ReadFile(path); !errors.Is(err, durable.ErrUnknownVersion) {
		t.Errorf("newer record: got %v, want ErrUnknownVersion", err)
	}
	// A newer sysbox's plan says so by name, read before its (changed) payload is looked at.
	os.WriteFile(path, []byte(`{"kind":"sysbox-plan","version":2,"sha256":"elsewhere","payload":{"actions":{"new":"shape"}},"signature":"x"}`+"\n"), 0o600)
	_, err := plans.ReadFile(path)
	var nf *durable.NewerFormatError
	if !errors.As(err, &nf) || nf.Version != 2 || nf.Newest != 1 || !strings.Contains(err.Error(), "plan format 2 is newer than this sysbox (1)") {
		t.Errorf("plan of a newer format: got %v, want a *durable.NewerFormatError saying plan format 2 is newer than this sysbox (1)", err)
	}
	// The payload no longer repeats the version; an old file's copy must agree with its record.
	q := *p
	q.FormatVersion = "9"
	rec, _ := durable.EncodeRecord(plans.RecordKind, 1, &q)
	os.WriteFile(path, rec, 0o600)
	if _, err := plans.ReadFile(path); !errors.Is(err, durable.ErrCorrupt) {
		t.Errorf("payload format_version disagreeing with the record: got %v, want ErrCorrupt", err)
	}
	q.FormatVersion = "1" // as files before this change were written
	rec, _ = durable.EncodeRecord(plans.RecordKind, 1, &q)
	os.WriteFile(path, rec, 0o600)
	if got, err := plans.ReadFile(path); err != nil || got.FormatVersion != plans.FormatVersion {
		t.Errorf("plan file with the old payload version: got %v, %v", got, err)
	}
}

// TestPlanFileOneVersionField: the stored plan carries its format version once, in the record.
func TestPlanFileOneVersionField(t *testing.T) {
	p, _ := basePlan(t)
	path := filepath.Join(t.TempDir(), "lab.plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var rec struct {
		Version int                        `json:"version"`
		Payload map[string]json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if _, dup := rec.Payload["format_version"]; rec.Version != 1 || dup {
		t.Fatalf("stored plan: record version %d, payload format_version %s; want 1 and none", rec.Version, rec.Payload["format_version"])
	}
}

// One test per bound field: change only that field in the fresh plan.
func TestVerifyReportsEachStaleField(t *testing.T) {
	tests := []struct {
		field  string
		mutate func(p *plans.Plan)
	}{
		{plans.FieldToolVersion, func(p *plans.Plan) { p.ToolVersion = "other" }},
		{plans.FieldMode, func(p *plans.Plan) { p.Mode = "destroy" }},
		{plans.FieldTargets, func(p *plans.Plan) { p.Targets = []string{"sysbox_node.web"} }},
		{plans.FieldSourceDigest, func(p *plans.Plan) { p.Fingerprint.SourceDigest = "sha256:edited" }},
		{plans.FieldInputDigest, func(p *plans.Plan) { p.Fingerprint.InputDigest = "sha256:othervars" }},
		{plans.FieldLineage, func(p *plans.Plan) { p.Fingerprint.Lineage = "lineage-2" }},
		{plans.FieldSerial, func(p *plans.Plan) { p.Fingerprint.Serial++ }},
		{plans.FieldSchemaVersions, func(p *plans.Plan) { p.Fingerprint.SchemaVersions["sysbox_node"] = 2 }},
		{plans.FieldDrivers, func(p *plans.Plan) { p.Fingerprint.Drivers[0].Version = "test-2" }},
		{plans.FieldDrivers + " (capability contract)", func(p *plans.Plan) {
			p.Fingerprint.Drivers[0].Capabilities = p.Fingerprint.Drivers[0].Capabilities[1:]
		}},
		{plans.FieldArtifacts, func(p *plans.Plan) { p.Fingerprint.Artifacts["sysbox_artifact.img"] = "sha256:new" }},
		{plans.FieldActions, func(p *plans.Plan) {
			p.Actions[0].Reason = "different"
			p.Fingerprint.ActionsDigest = plans.ActionsDigest(p.Actions)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			stored, _ := basePlan(t)
			fresh, _ := basePlan(t)
			if err := plans.Verify(stored, fresh); err != nil {
				t.Fatalf("unchanged: %v", err)
			}
			tt.mutate(fresh)
			err := plans.Verify(stored, fresh)
			if !errors.Is(err, plans.ErrStale) {
				t.Fatalf("got %v, want ErrStale", err)
			}
			var se *plans.StaleError
			if !errors.As(err, &se) {
				t.Fatalf("got %T, want *StaleError", err)
			}
			want := strings.Fields(tt.field)[0]
			if se.Field != want {
				t.Errorf("field: got %q, want %q (%v)", se.Field, want, err)
			}
			if n := strings.Count(err.Error(), "stale plan:"); n != 1 {
				t.Errorf("got %d stale fields, want exactly 1: %v", n, err)
			}
		})
	}
}

func TestVerifyDetectsTamperedActionList(t *testing.T) {
	stored, _ := basePlan(t)
	fresh, _ := basePlan(t)
	stored.Actions[0].Action = plans.NoOp // digest in fingerprint no longer matches the list
	var se *plans.StaleError
	if err := plans.Verify(stored, fresh); !errors.As(err, &se) || se.Field != plans.FieldActions {
		t.Fatalf("got %v, want stale actions", err)
	}
}

func TestPlanHoldsNoSecretPlaintext(t *testing.T) {
	const value = "s3cr3t-Value/+=="
	src := `resource "sysbox_node" "web" {
  environment = { TOKEN = env("WEB_TOKEN"), AUTH = "Bearer ${env("WEB_TOKEN")}" }
}`
	t.Setenv("WEB_TOKEN", value)
	tp := topo(t, map[string]string{"main.sysbox.hcl": src}, nil)
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(path)
	js, _ := json.Marshal(p)
	for name, data := range map[string][]byte{"plan file": file, "plan json": js} {
		if leaks := secrets.Leaks(data, value); len(leaks) > 0 {
			t.Errorf("%s contains the secret as %q", name, leaks)
		}
		if !strings.Contains(string(data), "secret://env/WEB_TOKEN") {
			t.Errorf("%s lacks the reference secret://env/WEB_TOKEN", name)
		}
	}
}

func TestGoldenExamplePlans(t *testing.T) {
	for _, ex := range []string{"lab-small", "modules-foreach"} {
		t.Run(ex, func(t *testing.T) { goldenPlan(t, ex) })
	}
}

func goldenPlan(t *testing.T, ex string) {
	tp := load(t, "../../examples/"+ex, nil)
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{LineageID: "golden"}, Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	p.Fingerprint.SourceDigest = "(varies with checkout)" // the example is edited over time
	got, _ := json.MarshalIndent(p, "", "  ")
	golden := filepath.Join("testdata", ex+".plan.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
		t.Errorf("plan differs from %s (-want +got):\n%s", golden, diff)
	}
}

var _ = driver.CapPolicy

// A stored plan whose record checksum was recomputed after its fingerprint was blanked or
// mangled (what anyone who can write the file can do) is refused on read: every digest must be
// well formed and the actions digest must cover the stored actions.
func TestPlanFileRefusesEmptyOrMalformedFingerprint(t *testing.T) {
	p, _ := basePlan(t)
	path := filepath.Join(t.TempDir(), "lab.plan")
	for _, tc := range []struct {
		name  string
		field string
		edit  func(fp *plans.Fingerprint, q *plans.Plan)
	}{
		{"empty source digest", "source_digest", func(fp *plans.Fingerprint, _ *plans.Plan) { fp.SourceDigest = "" }},
		{"empty input digest", "input_digest", func(fp *plans.Fingerprint, _ *plans.Plan) { fp.InputDigest = "" }},
		{"empty actions digest", "actions_digest", func(fp *plans.Fingerprint, _ *plans.Plan) { fp.ActionsDigest = "" }},
		{"truncated source digest", "source_digest", func(fp *plans.Fingerprint, _ *plans.Plan) { fp.SourceDigest = fp.SourceDigest[:20] }},
		{"uppercase input digest", "input_digest", func(fp *plans.Fingerprint, _ *plans.Plan) {
			fp.InputDigest = strings.ToUpper(fp.InputDigest)
		}},
		{"no algorithm", "actions_digest", func(fp *plans.Fingerprint, _ *plans.Plan) {
			fp.ActionsDigest = strings.TrimPrefix(fp.ActionsDigest, "sha256:")
		}},
		{"empty artifact digest", "artifacts", func(fp *plans.Fingerprint, _ *plans.Plan) {
			fp.Artifacts = map[string]string{"sysbox_artifact.img": ""}
		}},
		{"actions edited, digest kept", "actions_digest", func(_ *plans.Fingerprint, q *plans.Plan) {
			q.Actions = q.Actions[:len(q.Actions)-1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := *p
			q.Actions = append([]plans.ResourceAction(nil), p.Actions...)
			tc.edit(&q.Fingerprint, &q)
			rec, err := durable.EncodeRecord(plans.RecordKind, 1, &q)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, rec, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := plans.ReadFile(path)
			if got != nil || !errors.Is(err, durable.ErrCorrupt) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, %v; want ErrCorrupt naming %s and %s", got, err, tc.field, path)
			}
		})
	}
	// Not a file: a directory and a dangling symlink are errors, never an empty plan.
	dir := filepath.Join(t.TempDir(), "dir.plan")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.plan")
	if err := os.Symlink(filepath.Join(t.TempDir(), "gone"), link); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{dir, link} {
		if got, err := plans.ReadFile(bad); got != nil || err == nil {
			t.Fatalf("ReadFile(%s): got %v, %v; want an error", bad, got, err)
		}
	}
}
