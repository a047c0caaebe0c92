package imagetest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

func entries(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeSymlink {
			data = []byte("-> " + h.Linkname)
		}
		out[h.Name] = data
	}
}

func TestArchivesAreDeterministicAndWellFormed(t *testing.T) {
	bb := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bb, []byte("not really busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	r1, err := Rootfs(bb, "page")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := Rootfs(bb, "page")
	r3, _ := Rootfs(bb, "other page")
	if !bytes.Equal(r1, r2) || bytes.Equal(r1, r3) {
		t.Fatalf("Rootfs: same inputs must give the same bytes and another page other bytes")
	}
	fs := entries(t, r1)
	for name, want := range map[string]string{"bin/busybox": "not really busybox", "bin/sh": "-> busybox", "bin/httpd": "-> busybox", "www/index.html": "page"} {
		if string(fs[name]) != want {
			t.Errorf("rootfs %s: got %q, want %q", name, fs[name], want)
		}
	}

	da, err := DockerArchive(r1, "x:y")
	if err != nil {
		t.Fatal(err)
	}
	de := entries(t, da)
	var man []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(de["manifest.json"], &man); err != nil || len(man) != 1 || len(man[0].Layers) != 1 {
		t.Fatalf("docker-archive manifest.json: got %s, %v", de["manifest.json"], err)
	}
	if !bytes.Equal(de[man[0].Layers[0]], r1) || de[man[0].Config] == nil || man[0].RepoTags[0] != "x:y" {
		t.Fatalf("docker-archive: layer or config missing (%+v)", man[0])
	}

	oci, err := OCILayout(r1)
	if err != nil {
		t.Fatal(err)
	}
	oe := entries(t, oci)
	var names []string
	for n := range oe {
		names = append(names, n)
	}
	sort.Strings(names)
	if string(oe["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` || oe["index.json"] == nil || oe["blobs/sha256/"+hexOf(r1)] == nil {
		t.Fatalf("OCI layout: got entries %v", names)
	}
}
