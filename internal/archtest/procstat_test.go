package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyProcfsReadsProcStat fails on every /proc/PID/stat path outside internal/procfs, in
// production and test code alike: read it with procfs.ReadStat.
func TestOnlyProcfsReadsProcStat(t *testing.T) {
	got, err := ProcStatReaders("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range got {
		t.Errorf("%s: reads /proc/PID/stat by hand; use %s (ReadStat, StartTime, Alive)", at, ProcStatOwner)
	}
}

// TestProcStatReadersFinds checks the scan on a generated tree: each way the module's code
// spelled a stat path is reported, in test files too; the system-wide /proc/stat, other /proc
// files, a "stat" in a file naming no /proc path, testdata and procfs itself are not.
func TestProcStatReadersFinds(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) { writeTree(t, root, rel, "package p\n\n"+body) }
	write("a/concat.go", "var a = \"/proc/\" + pid + \"/stat\"\n")
	write("a/sprintf_test.go", "var b = fmt.Sprintf(\"/proc/%d/stat\", pid)\n")
	write("b/join.go", "var c = filepath.Join(\"/proc\", pid,\n\t\"stat\")\n")
	write("b/fine.go", "var d = []string{\"/proc/stat\", \"/proc/self/status\", \"/proc/%d/cmdline\"}\n")
	write("c/nostat.go", "var e = exec.Command(\"stat\", \"-c\", \"%s\", path)\n")
	write("internal/procfs/stat.go", "var f = \"/proc/\" + pid + \"/stat\"\n")
	write("a/testdata/x.go", "var g = \"/proc/1/stat\"\n")

	got, err := ProcStatReaders(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`a/concat.go:3: "/stat"`, `a/sprintf_test.go:3: "/proc/%d/stat"`, `b/join.go:4: "stat"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// writeTree writes content to root/rel, making its directories.
func writeTree(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
