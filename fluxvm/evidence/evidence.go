package evidence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

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

// Size limits for the files Verify reads whole (hashed files are streamed, never limited).
const (
	maxManifestSize  = 64 << 20
	maxSignatureSize = 1 << 20
	maxPlanSize      = 64 << 20
)

// Write removes leftover temporary files of interrupted durable writes, hashes every regular
// file under dir and durably writes dir/EVIDENCE.sha256. A symlink or special file anywhere in
// dir is refused: evidence covers regular files only.
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

// openDir opens a directory without following a symlink in its last component.
func openDir(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s: not a directory (symlinks are refused)", name)
		}
		return -1, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fd, nil
}

// scan hashes every regular file beneath dir, walking by directory file descriptors so that no
// symlink is ever followed. The manifest and signature at the top are left out (they are read
// separately, and must be regular files too); any symlink or special file is an error.
func scan(dir string, cleanTemps bool) ([]Entry, error) {
	fd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return nil, fmt.Errorf("evidence %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var out []Entry
	if err := walk(fd, "", cleanTemps, &out); err != nil {
		return nil, fmt.Errorf("evidence %s: %w", dir, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func walk(dirfd int, rel string, cleanTemps bool, out *[]Entry) error {
	// Read the names through a duplicate: os.File closes its descriptor.
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return fmt.Errorf("%s: %w", displayDir(rel), err)
	}
	df := os.NewFile(uintptr(dup), displayDir(rel))
	names, err := df.Readdirnames(-1)
	df.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", displayDir(rel), err)
	}
	sort.Strings(names)
	removed := false
	for _, name := range names {
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := openDir(dirfd, name)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			err = walk(sub, p, cleanTemps, out)
			unix.Close(sub)
			if err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
		default:
			return fmt.Errorf("%s is %s; only regular files and directories may be in a transaction directory", p, durable.FileTypeName(st.Mode))
		}
		if rel == "" && (name == ManifestFile || name == SignatureFile) {
			continue
		}
		if _, temp := durable.TempTarget(name); cleanTemps && temp {
			if err := unix.Unlinkat(dirfd, name, 0); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
			removed = true
			continue
		}
		sum, err := hashAt(dirfd, name, p)
		if err != nil {
			return err
		}
		*out = append(*out, Entry{SHA256: sum, Path: p})
	}
	if removed {
		if err := unix.Fsync(dirfd); err != nil {
			return fmt.Errorf("fsync %s: %w", displayDir(rel), err)
		}
	}
	return nil
}

func displayDir(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func hashAt(dirfd int, name, p string) (string, error) {
	f, err := durable.OpenRegularAt(dirfd, name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
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

// Signature outcomes in Report.Signature.
const (
	SigValid      = "valid"       // ssh-keygen -Y verify accepted it for the identity and namespace
	SigAbsent     = "absent"      // none, and none was asked for (plan without signing, no --allowed-signers)
	SigNotChecked = "not-checked" // present, well-formed, but no --allowed-signers to check it against
	SigMissing    = "missing"     // required (by --allowed-signers or the plan's signing) but not there
	SigInvalid    = "invalid"     // anything else: unreadable, not a regular file, empty, malformed, rejected
)

// Report is the outcome of Verify.
type Report struct {
	Dir       string   `json:"dir"`
	OK        bool     `json:"ok"`
	Files     int      `json:"files"`
	Missing   []string `json:"missing"`
	Modified  []string `json:"modified"`
	Extra     []string `json:"extra"`
	Signature string   `json:"signature"` // valid | absent | not-checked | missing | invalid
	SigError  string   `json:"signature_error,omitempty"`
}

// Verify recomputes every hash listed in dir's manifest, lists missing, modified and extra files
// and checks the signature (F18). It fails closed: the error wraps ErrMismatch or
// ErrBadSignature unless every regular file in dir is listed and matches, nothing in dir is a
// symlink or special file, and the signature is either valid (ssh-keygen -Y verify accepted
// exactly these manifest bytes for opt.Identity and the namespace), or not asked for.
func Verify(ctx context.Context, dir string, opt VerifyOptions) (Report, error) {
	rep := Report{Dir: dir, Missing: []string{}, Modified: []string{}, Extra: []string{}}
	if (opt.AllowedSigners == "") != (opt.Identity == "") {
		return rep, fmt.Errorf("evidence %s: %w: allowed signers and an identity go together", dir, ErrBadSignature)
	}
	dirfd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w: %w", dir, ErrMismatch, err)
	}
	defer unix.Close(dirfd)
	manifest, err := durable.ReadRegularAt(dirfd, ManifestFile, maxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("evidence %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w: %w", dir, ErrMismatch, err)
	}
	want, err := ParseManifest(manifest)
	if err != nil {
		return rep, fmt.Errorf("evidence %s: %w: %w", dir, ErrMismatch, err)
	}
	have, err := scan(dir, false)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrMismatch, err)
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
	rep.Signature, rep.SigError = checkSignature(ctx, dirfd, manifest, opt)
	rep.OK = len(rep.Missing) == 0 && len(rep.Modified) == 0 && len(rep.Extra) == 0 &&
		(rep.Signature == SigValid || rep.Signature == SigAbsent || rep.Signature == SigNotChecked)
	if len(rep.Missing)+len(rep.Modified)+len(rep.Extra) > 0 {
		return rep, fmt.Errorf("evidence %s: %w: %d missing, %d modified, %d extra", dir, ErrMismatch, len(rep.Missing), len(rep.Modified), len(rep.Extra))
	}
	if !rep.OK {
		return rep, fmt.Errorf("evidence %s: %w: signature %s: %s", dir, ErrBadSignature, rep.Signature, rep.SigError)
	}
	return rep, nil
}

// checkSignature returns the signature outcome and, unless it is valid, absent or not-checked,
// the reason.
func checkSignature(ctx context.Context, dirfd int, manifest []byte, opt VerifyOptions) (string, string) {
	required, err := planRequiresSigning(dirfd)
	if err != nil {
		return SigInvalid, err.Error()
	}
	sig, err := durable.ReadRegularAt(dirfd, SignatureFile, maxSignatureSize)
	switch {
	case errors.Is(err, fs.ErrNotExist) && opt.AllowedSigners != "":
		return SigMissing, SignatureFile + " is missing and a signature check was asked for"
	case errors.Is(err, fs.ErrNotExist) && required:
		return SigMissing, SignatureFile + " is missing and " + planFile + " asks for signing"
	case errors.Is(err, fs.ErrNotExist):
		return SigAbsent, ""
	case err != nil:
		return SigInvalid, err.Error()
	case len(bytes.TrimSpace(sig)) == 0:
		return SigInvalid, SignatureFile + " is empty"
	case !bytes.HasPrefix(bytes.TrimSpace(sig), []byte("-----BEGIN SSH SIGNATURE-----")) ||
		!bytes.HasSuffix(bytes.TrimSpace(sig), []byte("-----END SSH SIGNATURE-----")):
		return SigInvalid, SignatureFile + " is not an armored SSH signature"
	case opt.AllowedSigners == "":
		return SigNotChecked, ""
	}
	if err := verifySignature(ctx, manifest, sig, opt); err != nil {
		return SigInvalid, err.Error()
	}
	return SigValid, ""
}

// planFile is the plan as the transaction began (upgrade.PlanFile; not imported: upgrade
// imports this package).
const planFile = "plan.json"

// planRequiresSigning reads the plan kept in the transaction directory: with a signing block, a
// missing signature is a failure even when no allowed signers are given. A directory without a
// plan (not a transaction) requires nothing; an unreadable or undecodable plan is an error.
func planRequiresSigning(dirfd int) (bool, error) {
	b, err := durable.ReadRegularAt(dirfd, planFile, maxPlanSize)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var p struct {
		Signing json.RawMessage `json:"signing"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return false, fmt.Errorf("%s: %w", planFile, err)
	}
	return len(p.Signing) > 0 && string(p.Signing) != "null", nil
}

// verifySignature runs ssh-keygen -Y verify over exactly manifest with a private copy of the
// signature bytes (never the file in the directory, which could change under it), and accepts
// only exit 0 together with ssh-keygen's own "Good ... signature for IDENTITY" line for the
// namespace asked for.
func verifySignature(ctx context.Context, manifest, sig []byte, opt VerifyOptions) error {
	if opt.Identity == "" {
		return errors.New("--identity is required with --allowed-signers")
	}
	ns := opt.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	tmp, err := os.MkdirTemp("", "fluxvm-verify-")
	if err != nil {
		return fmt.Errorf("private copy of the signature: %w", err)
	}
	defer os.RemoveAll(tmp)
	sigCopy := filepath.Join(tmp, SignatureFile)
	if err := os.WriteFile(sigCopy, sig, 0o600); err != nil {
		return fmt.Errorf("private copy of the signature: %w", err)
	}
	r := opt.Runner
	if r == nil {
		r = argv.Exec{}
	}
	res, err := r.Run(ctx, argv.Cmd{
		Argv:  []string{sshKeygen(), "-Y", "verify", "-f", opt.AllowedSigners, "-I", opt.Identity, "-n", ns, "-s", sigCopy},
		Env:   []string{"PATH=/usr/bin:/bin", "LANG=C"},
		Stdin: bytes.NewReader(manifest),
	})
	if err != nil {
		msg := strings.TrimSpace(string(res.Stderr) + " " + string(res.Stdout))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("ssh-keygen -Y verify (identity %s, namespace %s): %s", opt.Identity, ns, msg)
	}
	good := "Good \"" + ns + "\" signature for " + opt.Identity + " with "
	for _, line := range strings.Split(string(res.Stdout)+"\n"+string(res.Stderr), "\n") {
		if strings.HasPrefix(line, good) {
			return nil
		}
	}
	return fmt.Errorf("ssh-keygen -Y verify (identity %s, namespace %s) exited 0 without a %q line; not trusting it", opt.Identity, ns, good+"...")
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
	manifest, err := durable.ReadRegular(filepath.Join(dir, ManifestFile), maxManifestSize)
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
