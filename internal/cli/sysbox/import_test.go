package sysbox

import (
	"strings"
	"testing"
)

// TestImportHelpPerDriver: import's help says per driver how ownership is proven — the netns
// driver writes markers onto an unclaimed namespace, docker cannot label an existing container
// and requires it to be created with the labels — instead of claiming every driver writes
// markers.
func TestImportHelpPerDriver(t *testing.T) {
	r := run(t, nil, false, "import", "--help")
	if r.code != 0 {
		t.Fatalf("import --help: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"netns   EXTERNAL_ID is a named namespace",
		"sysbox writes\n          this topology's ownership markers onto it",
		"docker  EXTERNAL_ID is a container. Docker cannot add labels to an existing container",
		"sysbox writes nothing onto it",
		"dev.zyvor.sysbox.topology, .address, .type and\n          .generation=1) and --network none",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("import --help lacks %q\ngot:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "it then writes this\ntopology's ownership markers on it") {
		t.Errorf("import --help still claims every driver writes markers:\n%s", r.stdout)
	}
}
