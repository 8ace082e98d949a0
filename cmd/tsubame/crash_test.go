package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// kill -9 at random moments under load, 20 times in a row on the same data
// and log directories: every response a client received has its line (each
// restart cleans and closes out what the killed process left), no line is
// there twice, none is torn, and every line lies in its file's range. With
// the default rotation, with a rotation every second (kills land in
// rotations), and with the disk filling up (a file size limit: kills land
// while requests wait for space).
func TestAccessLogSurvivesKill9(t *testing.T) {
	t.Run("rotate-5m", func(t *testing.T) { killRepeatedly(t, nil) })
	t.Run("rotate-1s", func(t *testing.T) { killRepeatedly(t, nil, "TSUBAME_ACCESS_LOG_ROTATE_EVERY=1s") })
	t.Run("full-disk", func(t *testing.T) {
		prlimit, err := exec.LookPath("prlimit")
		if err != nil {
			t.Skip("no prlimit (util-linux) on PATH: cannot limit the file size")
		}
		killRepeatedly(t, []string{prlimit, "--fsize=" + strconv.Itoa(512<<10)}) // ~2,000 lines a file
	})
}

func killRepeatedly(t *testing.T, wrapper []string, extra ...string) {
	dataDir, logDir := t.TempDir(), t.TempDir()
	env := append([]string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir}, extra...)
	received := map[string]bool{}
	var mu sync.Mutex
	for kill := range 20 {
		p := startWrapped(t, wrapper, env...)
		url := p.base + "/api/sample4.js?id=1&callback=Example.process"
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() {
				client := &http.Client{Timeout: 10 * time.Second}
				for n := 0; n < 100000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("k%d-c%d-%d", kill, c, n)
					req, _ := http.NewRequest("GET", url, nil)
					req.Header.Set("X-Request-Id", id)
					resp, err := client.Do(req)
					if err != nil {
						return // killed
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode == 200 && strings.HasPrefix(string(body), "Example.process(") {
						mu.Lock()
						received[id] = true
						mu.Unlock()
					}
				}
			})
		}
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.wait(t)
		close(stop)
		wg.Wait()
	}
	// A last start closes out what the last kill left; a clean stop closes
	// its own file.
	p := startWrapped(t, wrapper, env...)
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, p.logs)
	}

	lines, files := countFileLines(t, logDir) // whole lines, each in its file's range
	seen := map[string]int{}
	entries, _ := os.ReadDir(logDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
			continue
		}
		f, err := os.Open(filepath.Join(logDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			_, id, _ := strings.Cut(sc.Text(), "\treqid:")
			seen[id]++
		}
		f.Close()
	}
	missing, dup := 0, 0
	for id := range received {
		if seen[id] == 0 {
			missing++
		}
	}
	for _, n := range seen {
		if n > 1 {
			dup++
		}
	}
	t.Logf("20 kills: %d responses received, %d lines in %d files (%d for requests answered as the process died)",
		len(received), lines, files, lines-len(received))
	if len(received) == 0 || missing > 0 || dup > 0 {
		t.Fatalf("%d of %d received responses have no line; %d lines repeated", missing, len(received), dup)
	}
}
