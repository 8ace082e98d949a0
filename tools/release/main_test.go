package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Two archives of the same files are the same bytes, whatever the files'
// times, permission bits beyond the owner's execute bit, and owner; the
// entries are sorted, with their directories, at the given time.
func TestArchiveIsReproducible(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	bin := write("build/tsubame.bin", "\x7fELF binary", 0o700)
	conf := write("defaults.yaml", "listen: :4000\n", 0o600)
	unit := write("deploy/systemd/tsubame.service", "[Unit]\n", 0o664)
	redis := write("deploy/kubernetes/redis/redis.yaml", "kind: Service\n", 0o644)
	files := map[string]string{"tsubame": bin, "tsubame.yaml": conf,
		"deploy/systemd/tsubame.service": unit, "deploy/kubernetes/redis/redis.yaml": redis}
	epoch := time.Unix(1795781038, 0).UTC()

	var first bytes.Buffer
	if err := writeArchive(&first, "tsubame-1.0-linux-amd64", files, epoch); err != nil {
		t.Fatal(err)
	}
	// Another checkout: other times and group/other bits.
	for _, p := range []string{bin, conf, unit, redis} {
		if err := os.Chtimes(p, time.Now(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(unit, 0o644); err != nil {
		t.Fatal(err)
	}
	var second bytes.Buffer
	if err := writeArchive(&second, "tsubame-1.0-linux-amd64", files, epoch); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Fatal("two archives of the same files differ")
	}

	zr, err := gzip.NewReader(&first)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", zr.Name, zr.ModTime)
	}
	type entry struct {
		name string
		mode int64
		data string
	}
	var got []entry
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(epoch) || len(h.PAXRecords) != 0 {
			t.Errorf("%s: time %v, PAX records %v; want %v and none", h.Name, h.ModTime, h.PAXRecords, epoch)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, entry{h.Name, h.Mode, string(data)})
	}
	p := "tsubame-1.0-linux-amd64/"
	want := []entry{
		{p, 0o755, ""},
		{p + "deploy/", 0o755, ""},
		{p + "deploy/kubernetes/", 0o755, ""},
		{p + "deploy/kubernetes/redis/", 0o755, ""},
		{p + "deploy/kubernetes/redis/redis.yaml", 0o644, "kind: Service\n"},
		{p + "deploy/systemd/", 0o755, ""},
		{p + "deploy/systemd/tsubame.service", 0o644, "[Unit]\n"},
		{p + "tsubame", 0o755, "\x7fELF binary"},
		{p + "tsubame.yaml", 0o644, "listen: :4000\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%+v\nwant\n%+v", got, want)
	}
}

func TestArchiveRefuses(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	for _, files := range []map[string]string{
		{"../f": f}, {"/etc/f": f}, {"a/../../f": f}, // outside the top directory
		{"link": link}, // a symbolic link would point outside the archive
		{"dir": dir},   // only files: the directories follow from them
		{"f": filepath.Join(dir, "missing")},
	} {
		if err := writeArchive(io.Discard, "top", files, time.Unix(0, 0)); err == nil {
			t.Errorf("%v: archived", files)
		}
	}
}

// cyclonedxOut is what cyclonedx-gomod app -json -noserial -notimestamp
// writes, shortened.
const cyclonedxOut = `{
  "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
  "bomFormat": "CycloneDX",
  "specVersion": "1.6",
  "version": 1,
  "metadata": {
    "tools": {"components": [{"type": "application", "name": "cyclonedx-gomod", "version": "v1.10.0", "hashes": [{"alg": "SHA-256", "content": "2a4a6c26"}]}]},
    "component": {"bom-ref": "pkg:golang/tsubame@v1.0.0?type=module", "type": "application", "name": "tsubame", "version": "v1.0.0"}
  },
  "components": [{"bom-ref": "pkg:golang/github.com/twmb/franz-go@v1.20.0?type=module", "name": "github.com/twmb/franz-go", "version": "v1.20.0"}],
  "dependencies": [{"ref": "pkg:golang/tsubame@v1.0.0?type=module", "dependsOn": ["pkg:golang/github.com/twmb/franz-go@v1.20.0?type=module"]}]
}
`

func TestStampSBOM(t *testing.T) {
	ts := time.Unix(1795781038, 0)
	const commit = "6cafc6f0e1d2c3b4a5968778695a4b3c2d1e0f00"
	out, err := stampSBOM([]byte(cyclonedxOut), commit, ts)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SerialNumber string `json:"serialNumber"`
		Metadata     struct {
			Timestamp string `json:"timestamp"`
			Component struct{ Name, Version string }
		}
		Components []struct{ Name string }
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(doc.SerialNumber) {
		t.Errorf("serial %q is not a version 5 UUID URN", doc.SerialNumber)
	}
	if doc.Metadata.Timestamp != "2026-11-27T12:03:58Z" {
		t.Errorf("timestamp %q, want the commit time in UTC", doc.Metadata.Timestamp)
	}
	if doc.Metadata.Component.Version != "v1.0.0" || len(doc.Components) != 1 {
		t.Errorf("members lost: %s", out)
	}
	if bytes.Contains(out, []byte("hashes")) || !bytes.Contains(out, []byte(`"name": "cyclonedx-gomod"`)) {
		t.Errorf("the generator's hashes kept, or the generator lost:\n%s", out)
	}
	// The array form of metadata.tools (CycloneDX 1.4, what cyclonedx-gomod
	// v1.10.0 writes).
	legacy := strings.Replace(cyclonedxOut, `{"components": [{"type": "application", "name": "cyclonedx-gomod", "version": "v1.10.0", `,
		`[{"vendor": "CycloneDX", "name": "cyclonedx-gomod", "version": "v1.10.0", "externalReferences": [{"url": "https://cyclonedx.org", "type": "website"}], `, 1)
	legacy = strings.Replace(legacy, `"2a4a6c26"}]}]},`, `"2a4a6c26"}]}],`, 1)
	if !strings.Contains(legacy, `"tools": [{"vendor"`) || !strings.Contains(legacy, `}]}],`) {
		t.Fatalf("the array form was not made:\n%s", legacy)
	}
	if b, err := stampSBOM([]byte(legacy), commit, ts); err != nil || bytes.Contains(b, []byte("hashes")) ||
		!bytes.Contains(b, []byte(`"url": "https://cyclonedx.org"`)) {
		t.Errorf("array of tools: %v\n%s", err, b)
	}
	// The members stay in their order, the serial where CycloneDX puts it
	// and the timestamp first in metadata ("components" after "tools" is
	// the top-level one: the first is inside tools).
	order := []string{`"$schema"`, `"bomFormat"`, `"specVersion"`, `"serialNumber"`, `"version"`, `"metadata"`,
		`"timestamp"`, `"tools"`, `"component"`, `"components"`, `"dependencies"`}
	rest := out
	for _, key := range order {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			t.Fatalf("%s missing or out of order:\n%s", key, out)
		}
		rest = rest[i+len(key):]
	}

	again, err := stampSBOM(out, commit, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, out) {
		t.Errorf("stamping a stamped SBOM changed it:\n%s\n%s", out, again)
	}
	other, _ := stampSBOM([]byte(cyclonedxOut), "0000000000000000000000000000000000000000", ts)
	changed, _ := stampSBOM([]byte(strings.Replace(cyclonedxOut, "v1.20.0", "v1.20.1", -1)), commit, ts)
	for _, b := range [][]byte{other, changed} {
		var d struct{ SerialNumber string }
		if err := json.Unmarshal(b, &d); err != nil || d.SerialNumber == doc.SerialNumber {
			t.Errorf("another commit or another SBOM has the serial %q (%v)", d.SerialNumber, err)
		}
	}
	if _, err := stampSBOM([]byte(`{"bomFormat":"SPDX"}`), commit, ts); err == nil {
		t.Error("stamped a document that is not CycloneDX")
	}
	if _, err := stampSBOM([]byte(`{"bomFormat":"CycloneDX"} {}`), commit, ts); err == nil {
		t.Error("stamped a file with two documents")
	}
}

func TestSourceURL(t *testing.T) {
	for remote, want := range map[string]string{
		"https://github.com/example/tsubame.git":                 "https://github.com/example/tsubame",
		"https://github.com/example/tsubame":                     "https://github.com/example/tsubame",
		"https://github.com/example/tsubame/\n":                  "https://github.com/example/tsubame",
		"https://user:ghp_secret@github.com/example/tsubame.git": "https://github.com/example/tsubame",
		"https://git.example.com:8443/ads/tsubame.git":           "https://git.example.com:8443/ads/tsubame",
		"http://git.example.com/ads/tsubame":                     "https://git.example.com/ads/tsubame",
		"ssh://git@github.com/example/tsubame.git":               "https://github.com/example/tsubame",
		"ssh://git@git.example.com:2222/ads/tsubame.git":         "https://git.example.com/ads/tsubame",
		"git@github.com:example/tsubame.git":                     "https://github.com/example/tsubame",
		"github.com:example/tsubame":                             "https://github.com/example/tsubame",
		"git://git.example.com/tsubame.git":                      "https://git.example.com/tsubame",
		"":                                                       "",
		"/srv/git/tsubame.git":                                   "",
		"../tsubame":                                             "",
		"./tsubame":                                              "",
		"file:///srv/git/tsubame.git":                            "",
		"src/tsubame:old":                                        "", // a relative path with a colon
		"https://github.com/":                                    "",
	} {
		if got := sourceURL(remote); got != want {
			t.Errorf("sourceURL(%q) = %q, want %q", remote, got, want)
		}
	}
}
