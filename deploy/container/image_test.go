// Package container checks the container image that make image builds
// from the Containerfile at the top of the repository.
package container

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame/internal/config"
)

// containerTool is podman, else docker with a running daemon.
func containerTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("podman"); err == nil {
		return p
	}
	if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "info").Run() == nil {
		return p
	}
	t.Fatal("podman (or docker with a running daemon) is needed; make test installs podman")
	return ""
}

// imageConfig is the part of `podman/docker image inspect` checked here.
type imageConfig struct {
	Config struct {
		User         string
		Env          []string
		Entrypoint   []string
		Cmd          []string
		ExposedPorts map[string]struct{}
		Volumes      map[string]struct{}
		WorkingDir   string
		StopSignal   string
		Labels       map[string]string
		Healthcheck  *healthcheck // docker's place
	}
	Healthcheck *healthcheck // podman's
}

// healthcheck is the image's HEALTHCHECK; the durations are in nanoseconds.
type healthcheck struct {
	Test        []string
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// file is one regular file or directory of the image's filesystem.
type file struct {
	mode     int64
	uid, gid int
	dir      bool
	link     string
	data     []byte
}

// make image builds an image whose configuration is what an orchestrator
// needs (an unprivileged user, the entrypoint, ports, volumes, SIGTERM),
// whose filesystem is the static binary with certificates and time zones
// and nothing else (no shell), and whose binary starts and serves the demo.
// Running containers is not assumed possible on a build machine, so the
// image is exported and its binary run directly.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped in -short mode")
	}
	tool := containerTool(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	version := "imagetest-" + hex.EncodeToString(suffix)
	image := "localhost/tsubame-imagetest:" + version
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const source = "https://git.example.com/ads/tsubame"
	// Its own tools directory: another test's make may be building the same tools.
	tmp := t.TempDir()
	cmd := exec.Command("make", "-C", root, "image", "IMAGE="+image, "VERSION="+version, "IMAGE_CTX="+filepath.Join(tmp, "ctx"),
		"TOOLS_DIR="+filepath.Join(tmp, "tools"), "IMAGE_SOURCE="+source)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(tool, "rmi", "-f", image).Run() })

	// The configuration.
	out, err := exec.Command(tool, "image", "inspect", image).Output()
	if err != nil {
		t.Fatal(err)
	}
	var inspected []imageConfig
	if err := json.Unmarshal(out, &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	c := inspected[0].Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the unprivileged 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/tsubame"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	for _, p := range []string{"4000/tcp", "4001/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	for _, v := range []string{"/data", "/logs"} {
		if _, ok := c.Volumes[v]; !ok {
			t.Errorf("volume %s missing: %v", v, c.Volumes)
		}
	}
	if c.StopSignal != "SIGTERM" && c.StopSignal != "15" {
		t.Errorf("stop signal %q", c.StopSignal)
	}
	if c.Labels["org.opencontainers.image.version"] != version || c.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels %v", c.Labels)
	}
	checkProvenance(t, root, c.Labels, source)
	// podman keeps a HEALTHCHECK only in the docker format (make image asks
	// for it); the check is tsubame health, which needs no shell.
	if h := cmp.Or(c.Healthcheck, inspected[0].Healthcheck); h == nil {
		t.Error("no health check: built in the OCI format, which has none?")
	} else {
		if !slices.Equal(h.Test, []string{"CMD", "/usr/local/bin/tsubame", "health"}) {
			t.Errorf("health check %q", h.Test)
		}
		// tsubame health waits 2 s for /readyz; the runtime must wait longer.
		if h.Timeout <= 2*time.Second || h.Interval < h.Timeout || h.Retries < 1 || h.StartPeriod < 30*time.Second {
			t.Errorf("health check timing: %+v", *h)
		}
	}
	env := map[string]string{}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["TSUBAME_CONFIG"] != "/etc/tsubame/tsubame.yaml" {
		t.Errorf("TSUBAME_CONFIG=%q", env["TSUBAME_CONFIG"])
	}

	// The filesystem.
	files := exportImage(t, tool, image)
	var names []string
	for name, f := range files {
		if !f.dir {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "etc/tsubame/tsubame.yaml",
		"usr/local/bin/tsubame", "usr/share/zoneinfo.zip"}
	if !slices.Equal(names, want) {
		t.Errorf("image files %q, want exactly %q (no shell, no package manager)", names, want)
	}
	bin := files["usr/local/bin/tsubame"]
	if bin == nil || bin.mode&0o111 == 0 || bin.uid != 0 {
		t.Fatalf("binary: %+v", bin)
	}
	for _, dir := range []string{"data", "logs"} {
		if f := files[dir]; f == nil || !f.dir || f.uid != 65532 {
			t.Errorf("/%s is not a directory owned by the user: %+v", dir, f)
		}
	}
	if passwd := files["etc/passwd"]; passwd == nil || !strings.Contains(string(passwd.data), ":65532:65532:") {
		t.Errorf("no passwd entry for the user")
	}
	pool := x509.NewCertPool()
	if certs := files["etc/ssl/certs/ca-certificates.crt"]; certs == nil || !pool.AppendCertsFromPEM(certs.data) {
		t.Error("no CA certificates")
	}
	checkZoneinfo(t, files["usr/share/zoneinfo.zip"])
	checkConfig(t, files["etc/tsubame/tsubame.yaml"], env)

	// The binary: static, stamped, serving the demo.
	dir := t.TempDir()
	exe := filepath.Join(dir, "tsubame")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked; the empty base has no libc")
		}
	}
	ef.Close()
	if out, err := exec.Command(exe, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
		t.Errorf("version: %v %s", err, out)
	}
	serveDemo(t, exe, files["etc/tsubame/tsubame.yaml"].data, env)
}

// checkProvenance: the image names the commit it was built from, the
// commit's time (not the build's, so a rebuild labels the same) and the
// repository.
func checkProvenance(t *testing.T, root string, labels map[string]string, source string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	commit, ct, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if got := labels["org.opencontainers.image.revision"]; got != commit {
		t.Errorf("revision label %q, want the commit %s", got, commit)
	}
	created, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"])
	if err != nil || strconv.FormatInt(created.Unix(), 10) != ct || created.Location() != time.UTC {
		t.Errorf("created label %q (%v), want the commit time %s in UTC", labels["org.opencontainers.image.created"], err, ct)
	}
	if got := labels["org.opencontainers.image.source"]; got != source {
		t.Errorf("source label %q, want IMAGE_SOURCE %q", got, source)
	}
}

// exportImage saves the image as an archive and applies its layers in
// order, returning its filesystem.
func exportImage(t *testing.T, tool, image string) map[string]*file {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	args := []string{"save", "-o", archive}
	if filepath.Base(tool) == "podman" {
		args = append(args, "--format", "docker-archive")
	}
	if out, err := exec.Command(tool, append(args, image)...).CombinedOutput(); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	entries := readTar(t, archive)
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	files := map[string]*file{}
	for _, layer := range manifest[0].Layers {
		data, ok := entries[layer]
		if !ok {
			t.Fatalf("layer %s missing from the archive", layer)
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", layer, err)
			}
			name := strings.TrimSuffix(path.Clean(strings.TrimPrefix(h.Name, "./")), "/")
			if base := path.Base(name); strings.HasPrefix(base, ".wh.") {
				delete(files, path.Join(path.Dir(name), strings.TrimPrefix(base, ".wh.")))
				continue
			}
			f := &file{mode: h.Mode, uid: h.Uid, gid: h.Gid, dir: h.Typeflag == tar.TypeDir, link: h.Linkname}
			if h.Typeflag == tar.TypeReg {
				if f.data, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
			files[name] = f
		}
	}
	return files
}

func readTar(t *testing.T, name string) map[string][]byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkZoneinfo: the time zone database holds real zones.
func checkZoneinfo(t *testing.T, f *file) {
	t.Helper()
	if f == nil {
		t.Fatal("no time zone database")
	}
	zr, err := zip.NewReader(bytes.NewReader(f.data), int64(len(f.data)))
	if err != nil {
		t.Fatal(err)
	}
	zf, err := zr.Open("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	defer zf.Close()
	tz, err := io.ReadAll(zf)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocationFromTZData("Asia/Tokyo", tz)
	if err != nil {
		t.Fatal(err)
	}
	if _, offset := time.Date(2026, 1, 1, 0, 0, 0, 0, loc).Zone(); offset != 9*3600 {
		t.Fatalf("Asia/Tokyo offset %d", offset)
	}
}

// checkConfig: the image's configuration is valid and puts data and logs
// (the fallback too) on the volumes.
func checkConfig(t *testing.T, f *file, env map[string]string) {
	t.Helper()
	if f == nil {
		t.Fatal("no configuration file")
	}
	path := filepath.Join(t.TempDir(), "tsubame.yaml")
	if err := os.WriteFile(path, f.data, 0o644); err != nil {
		t.Fatal(err)
	}
	var environ []string
	for k, v := range env {
		if strings.HasPrefix(k, config.EnvPrefix) && k != config.EnvConfigFile {
			environ = append(environ, k+"="+v)
		}
	}
	cfg, warnings, err := config.Load(path, environ)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the image's configuration: %v %q", err, warnings)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatalf("the image's configuration: %v", errs)
	}
	if cfg.DataDir != "/data" || cfg.AccessLog.Dir != "/logs" || !strings.HasPrefix(cfg.AccessLog.FallbackDir, "/data/") {
		t.Errorf("data %q, logs %q, fallback %q: not on the volumes", cfg.DataDir, cfg.AccessLog.Dir, cfg.AccessLog.FallbackDir)
	}
	if _, port, _ := net.SplitHostPort(cfg.Admin.Listen); port != "4001" {
		t.Errorf("admin listener %q is not on the exposed port", cfg.Admin.Listen)
	}
	if _, port, _ := net.SplitHostPort(cfg.Listen); port != "4000" {
		t.Errorf("public listener %q is not on the exposed port", cfg.Listen)
	}
}

// serveDemo runs the image's binary with the image's configuration file
// and environment (its paths moved into temporary directories and its
// ports onto free loopback ones) and fetches a demo ad tag.
func serveDemo(t *testing.T, exe string, configFile []byte, imageEnv map[string]string) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, configFile, 0o644); err != nil {
		t.Fatal(err)
	}
	public, admin := freeAddr(t), freeAddr(t)
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range imageEnv {
		switch k {
		case config.EnvConfigFile:
			v = conf
		case "ZONEINFO", "PATH":
			continue
		}
		env = append(env, k+"="+v)
	}
	// The volumes and ports, moved.
	env = append(env, "TSUBAME_LISTEN="+public, "TSUBAME_ADMIN_LISTEN="+admin,
		"TSUBAME_DATA_DIR="+filepath.Join(dir, "data"), "TSUBAME_ACCESS_LOG_DIR="+filepath.Join(dir, "logs"),
		"TSUBAME_ACCESS_LOG_FALLBACK_DIR="+filepath.Join(dir, "data", "log-fallback"))
	var logs bytes.Buffer
	cmd := exec.Command(exe, "serve", "-demo")
	cmd.Env, cmd.Stderr, cmd.Dir = env, &logs, dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	url := "http://" + public + "/api/sample4.js?id=1&callback=Example.process"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := `Example.process({"urls":["http://ad1.example.com/tag.js","http://ad2.example.com/tag.js"]});`
			if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != want {
				t.Fatalf("demo ad tag: %d %q, want %q", resp.StatusCode, body, want)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the image's binary exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image's binary does not serve: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp, err := http.Get("http://" + admin + "/healthz"); err != nil {
		t.Errorf("admin listener: %v", err)
	} else {
		resp.Body.Close()
	}
	// The image's HEALTHCHECK, with the image's environment: the
	// configuration file names the port.
	health := func() error {
		c := exec.Command(exe, "health")
		c.Env, c.Dir = env, dir
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := health(); err != nil {
		t.Errorf("the health check fails on a serving server: %v", err)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stop: %v\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("did not stop\n%s", logs.String())
	}
	if err := health(); err == nil {
		t.Error("the health check passes with the server stopped")
	}
	for _, d := range []string{"data", "logs"} {
		if entries, err := os.ReadDir(filepath.Join(dir, d)); err != nil || len(entries) == 0 {
			t.Errorf("%s: nothing written (%v)", d, err)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
