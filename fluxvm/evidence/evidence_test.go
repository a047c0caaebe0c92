package evidence

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/testenv"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var tree = map[string]string{
	"plan.json":                  "{}",
	"journal.log":                "rec\n",
	"journal.final.json":         "{}",
	"snapshots/a/maps/m.snap":    "snap",
	"snapshots/a/files/000.json": "meta",
	"logs/a.apply.1.log":         "log",
}

func TestWriteIsSha256sumFormat(t *testing.T) {
	dir := writeTree(t, tree)
	// a leftover temp file of an interrupted durable write is removed, not covered
	if err := os.WriteFile(filepath.Join(dir, ".journal.final.json.tmp-123"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".journal.final.json.tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp file: got %v, want removed", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(tree) {
		t.Fatalf("manifest: got %d lines, want %d:\n%s", len(lines), len(tree), b)
	}
	if !lineRE.MatchString(lines[0]) || !strings.HasSuffix(lines[0], "  journal.final.json") {
		t.Errorf("first line: got %q, want sorted relative paths", lines[0])
	}
	// Last, so that a host without sha256sum still ran every check above before skipping.
	sha := testenv.RequireBinary(t, "sha256sum")
	cmd := exec.Command(sha, "--check", "--strict", "--quiet", ManifestFile)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(dir string)
		check  func(r Report) bool
	}{
		{"modified", func(d string) { os.WriteFile(filepath.Join(d, "journal.log"), []byte("forged\n"), 0o600) },
			func(r Report) bool { return len(r.Modified) == 1 && r.Modified[0] == "journal.log" }},
		{"missing", func(d string) { os.Remove(filepath.Join(d, "snapshots/a/maps/m.snap")) },
			func(r Report) bool { return len(r.Missing) == 1 && r.Missing[0] == "snapshots/a/maps/m.snap" }},
		{"extra", func(d string) { os.WriteFile(filepath.Join(d, "logs/injected.log"), []byte("x"), 0o600) },
			func(r Report) bool { return len(r.Extra) == 1 && r.Extra[0] == "logs/injected.log" }},
		{"manifest line edited", func(d string) {
			p := filepath.Join(d, ManifestFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(b), "  plan.json", "  plan2.json", 1)), 0o600)
		}, func(r Report) bool { return len(r.Missing) == 1 && len(r.Extra) == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tree)
			if _, err := Write(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := Verify(context.Background(), dir, VerifyOptions{}); err != nil {
				t.Fatalf("untouched: %v", err)
			}
			tt.tamper(dir)
			rep, err := Verify(context.Background(), dir, VerifyOptions{})
			if !errors.Is(err, ErrMismatch) || rep.OK {
				t.Errorf("got %v (ok %v), want ErrMismatch", err, rep.OK)
			}
			if !tt.check(rep) {
				t.Errorf("report: got missing %v modified %v extra %v", rep.Missing, rep.Modified, rep.Extra)
			}
		})
	}
}

func TestParseManifestRefusesEscapes(t *testing.T) {
	sum := strings.Repeat("a", 64)
	for _, line := range []string{sum + "  /etc/passwd", sum + "  ../x", sum + "  a/../../x", "nothex  a", sum + "  a\n" + sum + "  a"} {
		if _, err := ParseManifest([]byte(line + "\n")); err == nil {
			t.Errorf("ParseManifest(%q): got nil error, want refusal", line)
		}
	}
}

// TestSSHSignature signs with a fresh key through ssh-keygen -Y sign and checks that
// ssh-keygen -Y verify accepts it directly, that Verify accepts it, and that a wrong identity,
// wrong namespace, other key and tampered manifest are refused.
func TestSSHSignature(t *testing.T) {
	keygen := testenv.RequireBinary(t, "ssh-keygen")
	ctx := context.Background()
	keys := t.TempDir()
	key := filepath.Join(keys, "signing")
	other := filepath.Join(keys, "other")
	for _, k := range []string{key, other} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	pub, _ := os.ReadFile(key + ".pub")
	otherPub, _ := os.ReadFile(other + ".pub")
	allowed := filepath.Join(keys, "allowed_signers")
	os.WriteFile(allowed, []byte(`release@zyvor.dev namespaces="fluxvm-upgrade" `+string(pub)), 0o644)
	allowedOther := filepath.Join(keys, "allowed_other")
	os.WriteFile(allowedOther, []byte(`release@zyvor.dev namespaces="fluxvm-upgrade" `+string(otherPub)), 0o644)

	dir := writeTree(t, tree)
	if _, err := Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := (SSHKeygen{}).Sign(ctx, dir, key, "fluxvm-upgrade"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	// the key stays where it is: nothing but the signature was added
	if rep, err := Verify(ctx, dir, VerifyOptions{}); err != nil || rep.Signature != "not-checked" {
		t.Errorf("Verify without allowed signers: got %v %v, want OK and not-checked", rep.Signature, err)
	}
	// ssh-keygen itself accepts it
	cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "release@zyvor.dev", "-n", "fluxvm-upgrade", "-s", filepath.Join(dir, SignatureFile))
	cmd.Stdin, _ = os.Open(filepath.Join(dir, ManifestFile))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y verify: %v\n%s", err, out)
	}
	good := VerifyOptions{AllowedSigners: allowed, Identity: "release@zyvor.dev", Namespace: "fluxvm-upgrade"}
	if rep, err := Verify(ctx, dir, good); err != nil || rep.Signature != "valid" {
		t.Errorf("Verify good signature: got %s %v", rep.Signature, err)
	}
	bad := []struct {
		name string
		opt  VerifyOptions
	}{
		{"wrong identity", VerifyOptions{AllowedSigners: allowed, Identity: "mallory@zyvor.dev", Namespace: "fluxvm-upgrade"}},
		{"wrong namespace", VerifyOptions{AllowedSigners: allowed, Identity: "release@zyvor.dev", Namespace: "other"}},
		{"other key", VerifyOptions{AllowedSigners: allowedOther, Identity: "release@zyvor.dev", Namespace: "fluxvm-upgrade"}},
	}
	for _, b := range bad {
		if rep, err := Verify(ctx, dir, b.opt); !errors.Is(err, ErrBadSignature) || rep.Signature != "invalid" {
			t.Errorf("%s: got %s %v, want ErrBadSignature", b.name, rep.Signature, err)
		}
	}
	// A re-written (tampered) manifest that still matches the files fails the signature.
	os.WriteFile(filepath.Join(dir, "logs/a.apply.1.log"), []byte("forged"), 0o600)
	if _, err := Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, dir, good); !errors.Is(err, ErrBadSignature) {
		t.Errorf("re-hashed tampered dir: got %v, want ErrBadSignature", err)
	}
	// A missing signature is invalid when one is required.
	os.Remove(filepath.Join(dir, SignatureFile))
	if _, err := Verify(ctx, dir, good); !errors.Is(err, ErrBadSignature) {
		t.Errorf("missing signature: got %v, want ErrBadSignature", err)
	}
}

// TestVerifySignatureNeedsTheGoodLine: ssh-keygen exiting 0 is not enough; its "Good ...
// signature for IDENTITY" line for the namespace asked for must be there. A failing or missing
// ssh-keygen is an invalid signature, never "absent".
func TestVerifySignatureNeedsTheGoodLine(t *testing.T) {
	ctx := context.Background()
	dir := writeTree(t, tree)
	if _, err := Write(dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, SignatureFile), []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"), 0o644)
	opt := func(resp argv.FakeResponse) VerifyOptions {
		return VerifyOptions{AllowedSigners: "/nonexistent/allowed", Identity: "release@zyvor.dev", Namespace: "fluxvm-upgrade",
			Runner: &argv.Fake{Script: map[string]argv.FakeResponse{sshKeygen(): resp}}}
	}
	for _, tc := range []struct {
		name string
		resp argv.FakeResponse
		ok   bool
	}{
		{"good line", argv.FakeResponse{Result: argv.Result{Stdout: []byte("Good \"fluxvm-upgrade\" signature for release@zyvor.dev with ED25519 key SHA256:x\n")}}, true},
		{"exit 0, silent", argv.FakeResponse{}, false},
		{"exit 0, other identity", argv.FakeResponse{Result: argv.Result{Stdout: []byte("Good \"fluxvm-upgrade\" signature for mallory@zyvor.dev with ED25519 key SHA256:x\n")}}, false},
		{"exit 0, other namespace", argv.FakeResponse{Result: argv.Result{Stdout: []byte("Good \"file\" signature for release@zyvor.dev with ED25519 key SHA256:x\n")}}, false},
		{"exit 1", argv.FakeResponse{Result: argv.Result{ExitCode: 1, Stderr: []byte("Could not verify signature.")}, Err: errors.New("exit code 1")}, false},
		{"cannot start", argv.FakeResponse{Err: errors.New("exec: ssh-keygen: not found")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Verify(ctx, dir, opt(tc.resp))
			if tc.ok != (err == nil) || tc.ok != (rep.Signature == SigValid) {
				t.Errorf("got %s (%s), %v; want ok=%v", rep.Signature, rep.SigError, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrBadSignature) {
				t.Errorf("got %v, want ErrBadSignature", err)
			}
		})
	}
}
