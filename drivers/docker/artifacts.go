package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Artifact kinds this driver loads.
const (
	KindOCIImage = "oci_image" // docker-archive (docker save) or OCI image layout tarball
	KindRootfs   = "rootfs"    // a root filesystem tarball, imported as a single-layer image
)

// artifactRepo is the repository under which loaded artifacts are tagged by content digest.
const artifactRepo = "sysbox-artifact"

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// artifactTag is the tag tying a daemon image to the archive whose sha256 is digest.
func artifactTag(digest string) string {
	return artifactRepo + ":" + strings.TrimPrefix(digest, "sha256:")
}

// ResolveArtifact hashes the archive, checks a pinned digest before touching the daemon, then
// loads (oci_image) or imports (rootfs) it unless an image tagged with that digest is already
// there. The identity's Digest is the archive's sha256 and its Ref the daemon's image id.
func (d *Driver) ResolveArtifact(ctx context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error) {
	what := fmt.Sprintf("artifact %s (%s %s)", spec.Owner.Address, spec.Kind, spec.Source)
	if spec.Kind != KindOCIImage && spec.Kind != KindRootfs {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: kind %q: the docker driver loads %s or %s: %w",
			what, spec.Kind, KindOCIImage, KindRootfs, driver.ErrInvalid)
	}
	if spec.Digest != "" && !digestRE.MatchString(spec.Digest) {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: digest %q: want sha256:<64 lowercase hex>", what, spec.Digest)
	}
	path := spec.Source
	if !filepath.IsAbs(path) {
		path = filepath.Join(spec.BaseDir, path)
	}
	digest, size, err := hashFile(path)
	if err != nil {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: %w", what, err)
	}
	if spec.Digest != "" && spec.Digest != digest {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: archive %s has digest %s, pinned %s: %w",
			what, path, digest, spec.Digest, driver.ErrDigestMismatch)
	}

	tag := artifactTag(digest)
	img, err := d.cli.ImageInspect(ctx, tag)
	if err != nil {
		if e := apiErr(what, err); !errors.Is(e, driver.ErrNotFound) {
			return substrate.ArtifactIdentity{}, e
		}
		var id string
		if spec.Kind == KindRootfs {
			id, err = d.importRootfs(ctx, path, tag)
		} else {
			id, err = d.loadArchive(ctx, path, spec.Architecture)
		}
		if err != nil {
			return substrate.ArtifactIdentity{}, fmt.Errorf("%s: %w", what, err)
		}
		if spec.Kind == KindOCIImage {
			if err := d.cli.ImageTag(ctx, id, tag); err != nil {
				return substrate.ArtifactIdentity{}, apiErr(what+": tag "+tag, err)
			}
		}
		if img, err = d.cli.ImageInspect(ctx, tag); err != nil {
			return substrate.ArtifactIdentity{}, apiErr(what+": inspect "+tag, err)
		}
	}
	if spec.Architecture != "" && img.Architecture != spec.Architecture {
		return substrate.ArtifactIdentity{}, fmt.Errorf("%s: image architecture is %q, declared %q", what, img.Architecture, spec.Architecture)
	}
	family := spec.GuestFamily
	if family == "" {
		family = img.Os
	}
	return substrate.ArtifactIdentity{
		Kind: spec.Kind, Source: spec.Source, Architecture: img.Architecture, GuestFamily: family,
		Size: size, Digest: digest, Ref: img.ID,
	}, nil
}

// VerifyArtifact re-checks a resolved identity before a destructive step: an image tagged with
// the content tag for Digest must still be in the daemon and, when the identity carries a Ref,
// be that very image; when Source is an absolute path that still exists, its bytes must still
// hash to Digest. (The digest is the identity; Ref is the driver's handle on it and may be left
// out by a caller that only kept the digest.)
func (d *Driver) VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error {
	what := fmt.Sprintf("artifact %s %s", id.Kind, id.Source)
	if !digestRE.MatchString(id.Digest) {
		return fmt.Errorf("%s: identity lacks a sha256 digest (%q): %w", what, id.Digest, driver.ErrDigestMismatch)
	}
	if filepath.IsAbs(id.Source) {
		// Only an archive that is gone falls back to the content tag below; an archive that is
		// there but cannot be hashed (unreadable, a directory, an I/O error) refuses.
		digest, _, err := hashFile(id.Source)
		switch {
		case err == nil && digest != id.Digest:
			return fmt.Errorf("%s: archive now has digest %s, recorded %s: %w", what, digest, id.Digest, driver.ErrDigestMismatch)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s: cannot re-hash the archive: %w", what, err)
		}
	}
	if id.Ref != "" {
		if _, err := d.cli.ImageInspect(ctx, id.Ref); err != nil {
			return apiErr(what+": image "+id.Ref, err)
		}
	}
	tagged, err := d.cli.ImageInspect(ctx, artifactTag(id.Digest))
	if err != nil {
		if e := apiErr(what, err); !errors.Is(e, driver.ErrNotFound) {
			return e
		}
		return fmt.Errorf("%s: no image is tagged %s any more (resolve the artifact again): %w", what, artifactTag(id.Digest), driver.ErrNotFound)
	}
	if id.Ref != "" && tagged.ID != id.Ref {
		return fmt.Errorf("%s: %s is image %s, recorded %s: %w", what, artifactTag(id.Digest), tagged.ID, id.Ref, driver.ErrDigestMismatch)
	}
	return nil
}

func hashFile(path string) (digest string, size int64, err error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return "", 0, fmt.Errorf("source %s is a directory: the docker driver loads tarballs (tar it, e.g. tar -C DIR -cf rootfs.tar .)", path)
	}
	sum, n, err := substrate.FileSHA256(path)
	if err != nil {
		return "", 0, fmt.Errorf("archive: %w", err)
	}
	return "sha256:" + sum, n, nil
}

// importRootfs imports a root filesystem tarball as an image tagged tag and returns its id.
func (d *Driver) importRootfs(ctx context.Context, path, tag string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	rc, err := d.cli.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, tag, image.ImportOptions{})
	if err != nil {
		return "", apiErr("import rootfs "+path, err)
	}
	defer rc.Close()
	var id string
	err = readMessages(rc, func(m daemonMessage) {
		if strings.HasPrefix(m.Status, "sha256:") {
			id = strings.TrimSpace(m.Status)
		}
	})
	if err != nil {
		return "", fmt.Errorf("import rootfs %s: %w", path, err)
	}
	if id == "" {
		return "", fmt.Errorf("import rootfs %s: daemon reported no image id", path)
	}
	return id, nil
}

// loadArchive loads a docker-archive, or an OCI layout converted on the fly, and returns the
// id of the one image it holds.
func (d *Driver) loadArchive(ctx context.Context, path, arch string) (string, error) {
	format, err := archiveFormat(path)
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	var in io.Reader = f
	if format == formatOCILayout {
		conv, err := ociToDockerArchive(path, arch)
		if err != nil {
			return "", err
		}
		defer conv.Close()
		in = conv
	}
	resp, err := d.cli.ImageLoad(ctx, in, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", apiErr("load "+path, err)
	}
	defer resp.Body.Close()
	var ids, refs []string
	err = readMessages(resp.Body, func(m daemonMessage) {
		for _, line := range strings.Split(m.Stream, "\n") {
			if s, ok := strings.CutPrefix(line, "Loaded image ID: "); ok {
				ids = append(ids, strings.TrimSpace(s))
			} else if s, ok := strings.CutPrefix(line, "Loaded image: "); ok {
				refs = append(refs, strings.TrimSpace(s))
			}
		}
	})
	if err != nil {
		return "", fmt.Errorf("load %s: %w", path, err)
	}
	for _, r := range refs {
		img, err := d.cli.ImageInspect(ctx, r)
		if err != nil {
			return "", apiErr("load "+path+": inspect "+r, err)
		}
		ids = append(ids, img.ID)
	}
	ids = uniq(ids)
	if len(ids) != 1 {
		return "", fmt.Errorf("load %s: archive holds %d images (%v), want exactly one", path, len(ids), ids)
	}
	return ids[0], nil
}

func uniq(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// daemonMessage is one object of the daemon's progress stream (load, import).
type daemonMessage struct {
	Stream string `json:"stream"`
	Status string `json:"status"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	ErrorMessage string `json:"error"`
}

// readMessages decodes the daemon's JSON message stream, failing on the first error message.
func readMessages(r io.Reader, fn func(daemonMessage)) error {
	dec := json.NewDecoder(r)
	for {
		var m daemonMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("daemon response: %w", err)
		}
		if m.Error != nil {
			return fmt.Errorf("daemon: %s", m.Error.Message)
		}
		if m.ErrorMessage != "" {
			return fmt.Errorf("daemon: %s", m.ErrorMessage)
		}
		fn(m)
	}
}

type archiveKind int

const (
	formatDockerArchive archiveKind = iota + 1
	formatOCILayout
)

// openTar opens path as a tar stream, gunzipping it when it starts with the gzip magic.
func openTar(path string) (*tar.Reader, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open archive: %w", err)
	}
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("archive %s: gzip: %w", path, err)
		}
		return tar.NewReader(zr), f, nil
	}
	return tar.NewReader(br), f, nil
}

// archiveFormat tells a docker-archive (manifest.json) from an OCI image layout (oci-layout +
// index.json). An archive holding both is loaded as a docker-archive.
func archiveFormat(path string) (archiveKind, error) {
	tr, c, err := openTar(path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var manifest, layout, index bool
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("archive %s: %w", path, err)
		}
		switch cleanName(h.Name) {
		case "manifest.json":
			manifest = true
		case "oci-layout":
			layout = true
		case "index.json":
			index = true
		}
	}
	switch {
	case manifest:
		return formatDockerArchive, nil
	case layout && index:
		return formatOCILayout, nil
	}
	return 0, fmt.Errorf("archive %s: neither a docker-archive (manifest.json) nor an OCI image layout (oci-layout, index.json)", path)
}

func cleanName(n string) string { return strings.TrimPrefix(filepath.Clean("/"+n), "/") }
