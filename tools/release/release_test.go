package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// need returns the path of a program the test runs, skipping the test
// without it (failing in CI, which installs everything).
func need(t *testing.T, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: %s", name, why)
		}
		t.Skipf("%s is not installed: %s", name, why)
	}
	return p
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// signingKey makes an ed25519 key in dir and the allowed_signers file an
// operator writes from its public half, for the principal tsubame-release.
func signingKey(t *testing.T, keygen, dir, name string) (key, allowed string) {
	t.Helper()
	key = filepath.Join(dir, name)
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	allowed = filepath.Join(dir, name+".allowed_signers")
	if err := os.WriteFile(allowed, []byte(`tsubame-release namespaces="file" `+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, allowed
}

// verify runs the check docs/deploy.md gives operators.
func verify(keygen, allowed, dir string) ([]byte, error) {
	sums, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return nil, err
	}
	defer sums.Close()
	cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "tsubame-release", "-n", "file", "-s", filepath.Join(dir, "SHA256SUMS.sig"))
	cmd.Stdin = sums
	return cmd.CombinedOutput()
}

// make sign signs SHA256SUMS with the key given; the signature verifies
// against that key's allowed_signers line, and not for altered checksums,
// another key or another namespace. Without a key it refuses.
func TestSign(t *testing.T) {
	mk := need(t, "make", "the test runs make sign")
	keygen := need(t, "ssh-keygen", "make sign signs with ssh-keygen -Y sign (Debian package openssh-client)")
	dir := t.TempDir()
	dist := filepath.Join(dir, "dist")
	if err := os.Mkdir(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	sums := "394fc130f7e53a7918b94bd2aa6e9f8d13e0e790c9aa2f38a264c213dbe250f6  tsubame-1.0-linux-amd64.tar.gz\n"
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	key, allowed := signingKey(t, keygen, dir, "release")
	_, otherAllowed := signingKey(t, keygen, dir, "other")

	out, err := exec.Command(mk, "-C", repoRoot(t), "--no-print-directory", "sign", "DIST="+dist, "SIGNING_KEY=").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "set SIGNING_KEY") {
		t.Errorf("make sign without a key: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dist, "SHA256SUMS.sig")); !os.IsNotExist(err) {
		t.Fatalf("a signature without a key: %v", err)
	}

	for range 2 { // again over an existing signature
		out, err = exec.Command(mk, "-C", repoRoot(t), "--no-print-directory", "sign", "DIST="+dist, "SIGNING_KEY="+key).CombinedOutput()
		if err != nil {
			t.Fatalf("make sign: %v\n%s", err, out)
		}
	}
	fp, err := exec.Command(keygen, "-l", "-f", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(fp)); len(f) < 2 || !strings.Contains(string(out), f[1]) {
		t.Errorf("make sign does not name the key's fingerprint %q:\n%s", fp, out)
	}
	if out, err := verify(keygen, allowed, dist); err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	if out, err := verify(keygen, otherAllowed, dist); err == nil {
		t.Errorf("verified against another key:\n%s", out)
	}
	namespaced := filepath.Join(dir, "other-namespace")
	pub, _ := os.ReadFile(key + ".pub")
	if err := os.WriteFile(namespaced, []byte(`tsubame-release namespaces="git" `+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(keygen, namespaced, dist); err == nil {
		t.Errorf("verified with a key allowed only for git:\n%s", out)
	}
	altered := strings.Replace(sums, "394f", "494f", 1)
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(altered), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(keygen, allowed, dist); err == nil {
		t.Errorf("altered checksums verified:\n%s", out)
	}
}

// make release, signed, for one platform: the archive holds the binary,
// the configuration, the deploy files and the docs that docs/deploy.md
// lists, and no test file; the checksums match and are signed; the SBOM
// carries the commit's time.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release; skipped in -short mode")
	}
	mk := need(t, "make", "the test runs make release")
	keygen := need(t, "ssh-keygen", "make release signs with ssh-keygen -Y sign (Debian package openssh-client)")
	need(t, "sha256sum", "make release writes SHA256SUMS with it")
	git := need(t, "git", "make release takes the commit time from git")
	root := repoRoot(t)
	dir := t.TempDir()
	dist := filepath.Join(dir, "dist")
	key, allowed := signingKey(t, keygen, dir, "release")
	const version = "releasetest"
	// Its own tools directory: another test's make may be building the same tools.
	cmd := exec.Command(mk, "-C", root, "--no-print-directory", "release", "DIST="+dist, "VERSION="+version,
		"RELEASE_PLATFORMS=linux/amd64", "SIGNING_KEY="+key, "TOOLS_DIR="+filepath.Join(dir, "tools"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	ct, err := exec.Command(git, "-C", root, "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(strings.TrimSpace(string(ct)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	commitTime := time.Unix(epoch, 0).UTC()

	name := "tsubame-" + version + "-linux-amd64"
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	want := []string{"SHA256SUMS", "SHA256SUMS.sig", name + ".cdx.json", name + ".tar.gz"}
	if !slices.Equal(files, want) {
		t.Fatalf("dist holds %q, want %q", files, want)
	}
	if out, err := verify(keygen, allowed, dist); err != nil {
		t.Errorf("the signature: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(sums)) {
		sum, file, ok := strings.Cut(strings.TrimSpace(line), "  ")
		data, err := os.ReadFile(filepath.Join(dist, file))
		if !ok || err != nil {
			t.Fatalf("SHA256SUMS line %q: %v", line, err)
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: checksum does not match", file)
		}
		listed = append(listed, file)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, want[2:]) {
		t.Errorf("SHA256SUMS lists %q", listed)
	}

	// The archive.
	f, err := os.Open(filepath.Join(dist, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(commitTime) {
			t.Errorf("%s: time %v, want the commit's %v", h.Name, h.ModTime, commitTime)
		}
		if h.Name == name+"/tsubame" {
			exe := filepath.Join(dir, "tsubame")
			data, err := io.ReadAll(tr)
			if err == nil {
				err = os.WriteFile(exe, data, 0o755)
			}
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(exe, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
				t.Errorf("the archive's binary: %v %s", err, out)
			}
		}
		got[strings.TrimPrefix(h.Name, name+"/")] = h
	}
	for _, p := range []string{"tsubame", "tsubame.yaml", "README.md", "LICENSE", "BENCHMARKS.md",
		"deploy/systemd/tsubame.service",
		"deploy/kubernetes/kustomization.yaml", "deploy/kubernetes/statefulset.yaml", "deploy/kubernetes/redis/redis.yaml",
		"deploy/container/tsubame.yaml", "deploy/clickhouse/schema.sql",
		"docs/deploy.md", "docs/configuration.md", "docs/pacing-even.png"} {
		h := got[p]
		switch {
		case h == nil:
			t.Errorf("%s is not in the archive", p)
		case p == "tsubame" && h.Mode != 0o755, p != "tsubame" && h.Mode != 0o644:
			t.Errorf("%s: mode %o", p, h.Mode)
		}
	}
	for p := range got {
		if strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, ".go") {
			t.Errorf("%s: Go source in the archive", p)
		}
	}

	// The SBOM.
	data, err := os.ReadFile(filepath.Join(dist, name+".cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sbom struct {
		SerialNumber string
		Metadata     struct {
			Timestamp string
			Component struct {
				Name       string
				Properties []struct{ Name, Value string }
			}
		}
	}
	if err := json.Unmarshal(data, &sbom); err != nil {
		t.Fatal(err)
	}
	if ts, err := time.Parse(time.RFC3339, sbom.Metadata.Timestamp); err != nil || !ts.Equal(commitTime) {
		t.Errorf("SBOM timestamp %q, want the commit's %v", sbom.Metadata.Timestamp, commitTime)
	}
	if !strings.HasPrefix(sbom.SerialNumber, "urn:uuid:") || sbom.Metadata.Component.Name != "tsubame" {
		t.Errorf("SBOM serial %q, component %q", sbom.SerialNumber, sbom.Metadata.Component.Name)
	}
	env := map[string]string{}
	for _, p := range sbom.Metadata.Component.Properties {
		env[p.Name] = p.Value
	}
	if env["cdx:gomod:build:env:CGO_ENABLED"] != "0" || env["cdx:gomod:build:env:GOARCH"] != "amd64" {
		t.Errorf("the SBOM is not of the archive's build (no cgo, amd64): %v", env)
	}
}
