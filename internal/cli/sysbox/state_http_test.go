package sysbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/states"
)

func TestStateThroughUnsafeBackendNeedsAllowUnsafe(t *testing.T) {
	srv := backendtest.NewDocServer(t)
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.db"))
	st.Serial = 1
	doc, err := states.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDoc(doc)
	dir := t.TempDir()
	hcl := "substrate \"lab\" {\n  backend \"http\" {\n    address = \"" + srv.URL + "/state\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, dir, "", "state", "list"); code != 0 || out != "sysbox_node.db\nsysbox_node.web\n" {
		t.Fatalf("list (reads need no lock): exit %d %q %q", code, out, errOut)
	}
	_, errOut, code := runCLI(t, dir, "", "state", "rm", "sysbox_node.db")
	if code != 1 || !strings.Contains(errOut, "http backend lacks locking, compare-and-swap") || !strings.Contains(errOut, "--allow-unsafe-state") || srv.Puts() != 0 {
		t.Fatalf("rm without --allow-unsafe-state: exit %d %q, %d PUTs; want a refusal naming the missing capabilities and no PUT", code, errOut, srv.Puts())
	}
	if out, errOut, code := runCLI(t, dir, "", "state", "rm", "--allow-unsafe-state", "sysbox_node.db"); code != 0 || !strings.Contains(out, "Removed sysbox_node.db") {
		t.Fatalf("rm with --allow-unsafe-state: exit %d %q %q", code, out, errOut)
	}
	got, err := states.Decode(srv.Doc())
	if err != nil || got.Serial != 2 || len(got.Resources) != 1 {
		t.Fatalf("stored after rm: %v serial %d, want serial 2 with one resource", err, got.Serial)
	}
}
