// Package imagetest writes small, deterministic busybox images for the docker driver's tests
// and benchmarks, with no registry: a root filesystem tarball, a docker-archive (as `docker save`
// writes) and an OCI image layout tarball, all built from Debian's busybox-static binary.
//
// The same inputs always give the same bytes, so digests are stable across runs.
package imagetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// Busybox is where Debian's busybox-static installs its binary.
const Busybox = "/bin/busybox"

// Applets are linked to busybox in /bin.
var Applets = []string{"sh", "sleep", "httpd", "ping", "ip", "ifconfig", "cat", "echo", "wget", "nc",
	"ls", "hostname", "env", "true", "false", "ps", "kill", "mkdir", "touch", "grep", "route"}

var epoch = time.Unix(946684800, 0).UTC() // fixed mtime for reproducible archives

// Rootfs returns a root filesystem tarball holding busybox (read from busyboxPath), its applet
// links, /etc/passwd and an index page at /www/index.html whose body is marker.
func Rootfs(busyboxPath, marker string) ([]byte, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("imagetest: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "tmp", "www", "var", "root"} {
		if err := dir(d); err != nil {
			return nil, err
		}
	}
	if err := file("bin/busybox", 0o755, bin); err != nil {
		return nil, err
	}
	for _, a := range Applets {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\n")); err != nil {
		return nil, err
	}
	if err := file("www/index.html", 0o644, []byte(marker)); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func hexOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// imageConfig is the image config both archive formats carry.
func imageConfig(layer []byte) ([]byte, error) {
	return json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Env": []string{"PATH=/bin"},
			"Cmd": []string{"/bin/sleep", "3600"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{digestOf(layer)}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "imagetest"}},
	})
}

func writeTar(w io.Writer, files []struct {
	name string
	data []byte
}) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range files {
		for i := 0; i < len(f.name); i++ {
			if f.name[i] == '/' && !dirs[f.name[:i]] {
				dirs[f.name[:i]] = true
				if err := tw.WriteHeader(&tar.Header{Name: f.name[:i] + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
					return err
				}
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

type entry = struct {
	name string
	data []byte
}

// DockerArchive returns a docker-archive (the `docker save` format) of a one-layer image whose
// layer is rootfs, tagged tag (none when empty).
func DockerArchive(rootfs []byte, tag string) ([]byte, error) {
	cfg, err := imageConfig(rootfs)
	if err != nil {
		return nil, err
	}
	cfgName := hexOf(cfg) + ".json"
	layerName := hexOf(rootfs) + "/layer.tar"
	var tags []string
	if tag != "" {
		tags = []string{tag}
	}
	man, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": tags, "Layers": []string{layerName}}})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = writeTar(&buf, []entry{{cfgName, cfg}, {layerName, rootfs}, {"manifest.json", man}})
	return buf.Bytes(), err
}

// OCILayout returns an OCI image layout tarball of a one-layer image whose layer is rootfs.
func OCILayout(rootfs []byte) ([]byte, error) {
	cfg, err := imageConfig(rootfs)
	if err != nil {
		return nil, err
	}
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digestOf(cfg), "size": len(cfg)},
		"layers": []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar",
			"digest": digestOf(rootfs), "size": len(rootfs)}},
	})
	if err != nil {
		return nil, err
	}
	idx, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest": digestOf(man), "size": len(man),
			"platform": map[string]string{"architecture": runtime.GOARCH, "os": "linux"}}},
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = writeTar(&buf, []entry{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idx},
		{"blobs/sha256/" + hexOf(cfg), cfg},
		{"blobs/sha256/" + hexOf(man), man},
		{"blobs/sha256/" + hexOf(rootfs), rootfs},
	})
	return buf.Bytes(), err
}
