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
	raw, err := readTarEntry(path, "index.json")
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("archive %s: index.json: %w", path, err)
	}
	var man ocispec.Manifest
	for depth := 0; ; depth++ {
		desc, err := pickManifest(idx, arch)
		if err != nil {
			return nil, fmt.Errorf("archive %s: %w", path, err)
		}
		blob, err := readTarEntry(path, blobPath(desc.Digest.String()))
		if err != nil {
			return nil, err
		}
		if desc.MediaType == mediaOCIIndex || desc.MediaType == mediaDockerList {
			if depth >= maxIndexIndirections {
				return nil, fmt.Errorf("archive %s: indexes nested deeper than %d", path, maxIndexIndirections)
			}
			idx = ocispec.Index{}
			if err := json.Unmarshal(blob, &idx); err != nil {
				return nil, fmt.Errorf("archive %s: index %s: %w", path, desc.Digest, err)
			}
			continue
		}
		if err := json.Unmarshal(blob, &man); err != nil {
			return nil, fmt.Errorf("archive %s: manifest %s: %w", path, desc.Digest, err)
		}
		break
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
		tw := tar.NewWriter(pw)
		err := func() error {
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
		}()
		if err != nil {
			err = fmt.Errorf("archive %s: convert OCI layout: %w", path, err)
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
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
