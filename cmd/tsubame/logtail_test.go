package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// log tail prints the live file's last whole lines, never the zeros of
// the space allocated ahead nor a record still being copied in; -f prints
// the lines as they are written, then, after a rotation, the rest of the
// old file and the new one's.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "access.log")
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"n":%d,"path":"/api/sample4.js"}`, i))
	}
	live := []byte(strings.Join(lines, "\n") + "\n")
	space := make([]byte, 1<<20) // allocated ahead: zeros
	if err := os.WriteFile(file, append(live, space...), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "3", file}, strings.Join(lines[27:], "\n") + "\n"},
		{[]string{file}, strings.Join(lines[20:], "\n") + "\n"},
		{[]string{"-n", "100", file}, string(live)},
		{[]string{"-n", "0", file}, ""},
	} {
		code, out, stderr := runCmd(t, env, "", append([]string{"log", "tail"}, tc.args...)...)
		if code != exitOK || out != tc.want {
			t.Errorf("log tail %v: exit %d, %q (%s); want %q", tc.args, code, out, stderr, tc.want)
		}
	}
	if code, _, stderr := runCmd(t, env, "", "log", "tail", filepath.Join(dir, "none.log")); code != exitFailed || !strings.Contains(stderr, "does not exist") {
		t.Errorf("a missing file: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "log", "tail", "-n", "-1", file); code != exitUsage || !strings.Contains(stderr, "-n -1") {
		t.Errorf("-n -1: exit %d, %s", code, stderr)
	}

	// -f, as records come: one whole, one whose copy is under way (its
	// bytes reserved, still zeros, before a later record's), then the
	// copy done.
	ctx, cancel := context.WithCancel(t.Context())
	var out lockedBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"log", "tail", "-f", "-n", "1", file}, strings.NewReader(""), &out, &out, env)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the last line", func() bool { return out.String() == lines[29]+"\n" })
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := int64(len(live))
	write := func(s string, off int64) {
		t.Helper()
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := `{"n":"a"}`+"\n", `{"n":"b, copied in late"}`+"\n", `{"n":"c"}`+"\n"
	write(a, at)
	write(c, at+int64(len(a)+len(b))) // b's bytes are reserved, not yet copied
	waitUntil(t, "the whole line", func() bool { return strings.HasSuffix(out.String(), a) })
	write(b, at+int64(len(a)))
	waitUntil(t, "the late copy and the line after it", func() bool { return strings.HasSuffix(out.String(), a+b+c) })
	if bytes.IndexByte(out.Bytes(), 0) >= 0 {
		t.Fatal("a zero byte was printed")
	}

	// A rotation: the file is closed out (a last line, its space cut) and
	// renamed; the active name is a new file.
	end := at + int64(len(a)+len(b)+len(c))
	d := `{"n":"d, the old file's last"}` + "\n"
	write(d, end)
	if err := f.Truncate(end + int64(len(d))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file, filepath.Join(dir, "access.log.1")); err != nil {
		t.Fatal(err)
	}
	e := `{"n":"e, the new file's first"}` + "\n"
	if err := os.WriteFile(file, append([]byte(e), space...), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old file's rest, then the new file", func() bool { return strings.HasSuffix(out.String(), a+b+c+d+e) })
	if got := strings.Count(out.String(), "\n"); got != 6 {
		t.Errorf("-f printed %d lines, want 6:\n%s", got, out.String())
	}
}

// On a running server, log tail reads the configured access log: the
// requests' lines, whole.
func TestLogTailOnTheServer(t *testing.T) {
	env := testEnv(t)
	m := openMain(t, env, true)
	for i := range 3 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/api/decide?placement=1&uid=u%d", m.PublicAddr(), i), nil)
		req.Header.Set("User-Agent", browserUA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var out string
	waitUntil(t, "the requests' lines", func() bool {
		_, out, _ = runCmd(t, env, "", "log", "tail", "-n", "50")
		return strings.Count(out, "\tevent:request\t") == 3 // LTSV, the default format
	})
	if bytes.IndexByte([]byte(out), 0) >= 0 || !strings.HasSuffix(out, "\n") {
		t.Errorf("log tail printed zeros or a cut line:\n%q", out)
	}
}
