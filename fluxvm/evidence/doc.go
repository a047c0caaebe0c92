// Package evidence writes and verifies a transaction directory's EVIDENCE.sha256 (sha256sum
// format, relative paths, sorted) and its OpenSSH signature (ssh-keygen -Y sign / verify).
//
// Invariants: the manifest covers every regular file under the directory except the manifest and
// its signature; paths are relative, clean and never leave the directory; a symlink or other
// special file inside the directory is an error, never followed. Verification recomputes every
// hash and reports missing, modified and extra files; a signature is accepted only when
// ssh-keygen verifies it against the given allowed_signers file, identity and namespace.
// The private signing key is referenced by path and never copied.
package evidence
