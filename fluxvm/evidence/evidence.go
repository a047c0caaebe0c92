package evidence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/durable"
)

// File names inside a transaction directory.
const (
	ManifestFile     = "EVIDENCE.sha256"
	SignatureFile    = "EVIDENCE.sha256.sig"
	DefaultNamespace = "fluxvm-upgrade"
)

// Errors callers branch on.
var (
	ErrMismatch     = errors.New("evidence does not match the directory")
	ErrBadSignature = errors.New("evidence signature not valid")
	ErrNoManifest   = errors.New("no " + ManifestFile)
)

// Entry is one manifest line.
type Entry struct {
	SHA256 string `json:"sha256"`
	Path   string `json:"path"`
}

var tempPattern = regexp.MustCompile(`^\..+\.tmp-[0-9]+$`)

// Write removes leftover temporary files of interrupted durable writes, hashes every regular
// file under dir and durably writes dir/EVIDENCE.sha256.
func Write(dir string) ([]Entry, error) {
	entries, err := scan(dir, true)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%s  %s\n", e.SHA256, e.Path)
	}
	if err := durable.WriteFile(filepath.Join(dir, ManifestFile), b.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("evidence %s: %w", dir, err)
	}
	return entries, nil
}

func scan(dir string, cleanTemps bool) ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return nil
		}
		if rel == ManifestFile || rel == SignatureFile {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("evidence %s: %s is a %s, not a regular file", dir, rel, d.Type())
		}
		if cleanTemps && tempPattern.MatchString(d.Name()) {
			if err := os.Remove(p); err != nil {
				return err
			}
			return durable.SyncDir(filepath.Dir(p))
		}
		sum, err := hashFile(p)
		if err != nil {
			return err
		}
		out = append(out, Entry{SHA256: sum, Path: filepath.ToSlash(rel)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var lineRE = regexp.MustCompile(`^([0-9a-f]{64}) [ *](.+)$`)

// ParseManifest reads sha256sum-format lines, refusing absolute or escaping paths.
func ParseManifest(data []byte) ([]Entry, error) {
	var out []Entry
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			return nil, fmt.Errorf("%s:%d: not a sha256sum line", ManifestFile, n)
		}
		p := m[2]
		if filepath.IsAbs(p) || filepath.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("%s:%d: path %q is not a clean relative path", ManifestFile, n, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("%s:%d: path %q listed twice", ManifestFile, n, p)
		}
		seen[p] = true
		out = append(out, Entry{SHA256: m[1], Path: p})
	}
	return out, sc.Err()
}

// VerifyOptions select signature verification. With AllowedSigners empty, a present signature
// is reported as not checked.
type VerifyOptions struct {
	AllowedSigners string
	Identity       string
	Namespace      string
	Runner         argv.Runner
}

// Report is the outcome of Verify.
type Report struct {
	Dir       string   `json:"dir"`
	OK        bool     `json:"ok"`
	Files     int      `json:"files"`
	Missing   []string `json:"missing"`
	Modified  []string `json:"modified"`
	Extra     []string `json:"extra"`
	Signature string   `json:"signature"` // valid | absent | not-checked | invalid
	SigError  string   `json:"signature_error,omitempty"`
}

// Verify recomputes every hash listed in dir's manifest, lists missing, modified and extra files
// and, when asked, checks the signature with ssh-keygen -Y verify (F18). The error wraps
// ErrMismatch or ErrBadSignature when the evidence does not hold.
func Verify(ctx context.Context, dir string, opt VerifyOptions) (Report, error) {
	rep := Report{Dir: dir, Missing: []string{}, Modified: []string{}, Extra: []string{}}
	manifest, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("evidence %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w", dir, err)
	}
	want, err := ParseManifest(manifest)
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w: %w", dir, ErrMismatch, err)
	}
	have, err := scan(dir, false)
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w: %w", dir, ErrMismatch, err)
	}
	haveMap := map[string]string{}
	for _, e := range have {
		haveMap[e.Path] = e.SHA256
	}
	listed := map[string]bool{}
	for _, e := range want {
		listed[e.Path] = true
		got, ok := haveMap[e.Path]
		switch {
		case !ok:
			rep.Missing = append(rep.Missing, e.Path)
		case got != e.SHA256:
			rep.Modified = append(rep.Modified, e.Path)
		}
	}
	for _, e := range have {
		if !listed[e.Path] {
			rep.Extra = append(rep.Extra, e.Path)
		}
	}
	rep.Files = len(want)

	sigPath := filepath.Join(dir, SignatureFile)
	_, sigErr := os.Stat(sigPath)
	switch {
	case opt.AllowedSigners == "" && sigErr == nil:
		rep.Signature = "not-checked"
	case opt.AllowedSigners == "" || (sigErr != nil && !errors.Is(sigErr, fs.ErrNotExist)):
		rep.Signature = "absent"
	case errors.Is(sigErr, fs.ErrNotExist):
		rep.Signature = "invalid"
		rep.SigError = SignatureFile + " is missing"
	default:
		if err := verifySignature(ctx, manifest, sigPath, opt); err != nil {
			rep.Signature, rep.SigError = "invalid", err.Error()
		} else {
			rep.Signature = "valid"
		}
	}
	rep.OK = len(rep.Missing) == 0 && len(rep.Modified) == 0 && len(rep.Extra) == 0 && rep.Signature != "invalid"
	if len(rep.Missing)+len(rep.Modified)+len(rep.Extra) > 0 {
		return rep, fmt.Errorf("evidence %s: %w: %d missing, %d modified, %d extra", dir, ErrMismatch, len(rep.Missing), len(rep.Modified), len(rep.Extra))
	}
	if rep.Signature == "invalid" {
		return rep, fmt.Errorf("evidence %s: %w: %s", dir, ErrBadSignature, rep.SigError)
	}
	return rep, nil
}

func verifySignature(ctx context.Context, manifest []byte, sigPath string, opt VerifyOptions) error {
	if opt.Identity == "" {
		return errors.New("--identity is required with --allowed-signers")
	}
	ns := opt.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	r := opt.Runner
	if r == nil {
		r = argv.Exec{}
	}
	res, err := r.Run(ctx, argv.Cmd{
		Argv:  []string{sshKeygen(), "-Y", "verify", "-f", opt.AllowedSigners, "-I", opt.Identity, "-n", ns, "-s", sigPath},
		Env:   []string{"PATH=/usr/bin:/bin", "LANG=C"},
		Stdin: bytes.NewReader(manifest),
	})
	if err != nil {
		msg := strings.TrimSpace(string(res.Stderr) + " " + string(res.Stdout))
		return fmt.Errorf("ssh-keygen -Y verify (identity %s, namespace %s): %s", opt.Identity, ns, msg)
	}
	return nil
}

func sshKeygen() string {
	for _, p := range []string{"/usr/bin/ssh-keygen", "/bin/ssh-keygen", "/usr/local/bin/ssh-keygen"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "ssh-keygen"
}

// Signer signs dir/EVIDENCE.sha256 into dir/EVIDENCE.sha256.sig.
type Signer interface {
	Sign(ctx context.Context, dir, key, namespace string) error
}

// SSHKeygen signs with `ssh-keygen -Y sign -f KEY -n NAMESPACE` (data on stdin, signature on
// stdout, written durably). The key stays where it is.
type SSHKeygen struct {
	Runner argv.Runner
}

var _ Signer = SSHKeygen{}

func (s SSHKeygen) Sign(ctx context.Context, dir, key, namespace string) error {
	manifest, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return err
	}
	r := s.Runner
	if r == nil {
		r = argv.Exec{}
	}
	res, err := r.Run(ctx, argv.Cmd{
		Argv:  []string{sshKeygen(), "-Y", "sign", "-f", key, "-n", namespace},
		Env:   []string{"PATH=/usr/bin:/bin", "LANG=C"},
		Stdin: bytes.NewReader(manifest),
	})
	if err != nil {
		return fmt.Errorf("ssh-keygen -Y sign -f %s -n %s: %w", key, namespace, err)
	}
	if !bytes.Contains(res.Stdout, []byte("BEGIN SSH SIGNATURE")) {
		return fmt.Errorf("ssh-keygen -Y sign -f %s: no signature on stdout", key)
	}
	return durable.WriteFile(filepath.Join(dir, SignatureFile), res.Stdout, 0o644)
}
