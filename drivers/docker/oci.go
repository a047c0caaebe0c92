package docker

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Engine 20.10 loads only docker-archives, so an OCI image layout is converted on the fly: its
// entries are copied unchanged and a manifest.json pointing at the chosen manifest's config and
// layer blobs is appended. The daemon still checks every layer against the config's diff ids.

const (
	mediaOCIIndex        = "application/vnd.oci.image.index.v1+json"
	mediaDockerList      = "application/vnd.docker.distribution.manifest.list.v2+json"
	maxJSONBlob          = 4 << 20
	maxIndexIndirections = 4
)

type dockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// ociToDockerArchive returns a docker-archive stream for the image in the OCI layout at path
// whose platform matches arch (the host's when empty).
func ociToDockerArchive(path, arch string) (io.ReadCloser, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	man, err := resolveOCIManifest(path, arch)
	if err != nil {
		return nil, err
	}
	entry := dockerManifestEntry{Config: blobPath(man.Config.Digest.String())}
	for _, l := range man.Layers {
		entry.Layers = append(entry.Layers, blobPath(l.Digest.String()))
	}
	mj, err := json.Marshal([]dockerManifestEntry{entry})
	if err != nil {
		return nil, err
	}

	tr, c, err := openTar(path)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer c.Close()
		err := copyWithManifest(tar.NewWriter(pw), tr, mj)
		if err != nil {
			err = fmt.Errorf("archive %s: convert OCI layout: %w", path, err)
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// resolveOCIManifest follows index.json of the OCI layout at path, through at most
// maxIndexIndirections nested indexes, to the manifest for arch.
func resolveOCIManifest(path, arch string) (ocispec.Manifest, error) {
	var man ocispec.Manifest
	raw, err := readTarEntry(path, "index.json")
	if err != nil {
		return man, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return man, fmt.Errorf("archive %s: index.json: %w", path, err)
	}
	for depth := 0; ; depth++ {
		desc, err := pickManifest(idx, arch)
		if err != nil {
			return man, fmt.Errorf("archive %s: %w", path, err)
		}
		blob, err := readTarEntry(path, blobPath(desc.Digest.String()))
		if err != nil {
			return man, err
		}
		if desc.MediaType == mediaOCIIndex || desc.MediaType == mediaDockerList {
			if depth >= maxIndexIndirections {
				return man, fmt.Errorf("archive %s: indexes nested deeper than %d", path, maxIndexIndirections)
			}
			idx = ocispec.Index{}
			if err := json.Unmarshal(blob, &idx); err != nil {
				return man, fmt.Errorf("archive %s: index %s: %w", path, desc.Digest, err)
			}
			continue
		}
		if err := json.Unmarshal(blob, &man); err != nil {
			return man, fmt.Errorf("archive %s: manifest %s: %w", path, desc.Digest, err)
		}
		return man, nil
	}
}

// copyWithManifest copies every entry of tr to tw but a manifest.json, then appends
// manifest.json holding mj and closes tw.
func copyWithManifest(tw *tar.Writer, tr *tar.Reader, mj []byte) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if cleanName(h.Name) == "manifest.json" {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(mj)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(mj); err != nil {
		return err
	}
	return tw.Close()
}

// pickManifest chooses the index entry for arch: the only entry, or the one whose platform
// matches.
func pickManifest(idx ocispec.Index, arch string) (ocispec.Descriptor, error) {
	if len(idx.Manifests) == 0 {
		return ocispec.Descriptor{}, errors.New("index lists no manifests")
	}
	if len(idx.Manifests) == 1 {
		return idx.Manifests[0], nil
	}
	var found []ocispec.Descriptor
	for _, m := range idx.Manifests {
		if m.Platform == nil || m.Platform.Architecture == arch {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("index lists %d manifests, %d for architecture %q: want exactly one", len(idx.Manifests), len(found), arch)
	}
	return found[0], nil
}

func blobPath(digest string) string {
	alg, hex, _ := strings.Cut(digest, ":")
	return "blobs/" + alg + "/" + hex
}

// readTarEntry returns one small file of the archive.
func readTarEntry(path, name string) ([]byte, error) {
	tr, c, err := openTar(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("archive %s: no %s", path, name)
		}
		if err != nil {
			return nil, fmt.Errorf("archive %s: %w", path, err)
		}
		if cleanName(h.Name) != name {
			continue
		}
		if h.Size > maxJSONBlob {
			return nil, fmt.Errorf("archive %s: %s is %d bytes, more than %d", path, name, h.Size, maxJSONBlob)
		}
		return io.ReadAll(tr)
	}
}
