package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idleResult is what holding many idle keep-alive connections cost Tsubame.
type idleResult struct {
	Conns       int   // connections held open, each after one answered request
	Before, RSS int64 // Tsubame's resident memory before and while held (peak of samples)
	Helpers     int
	StillServes bool // a new connection was answered while they were held
}

// idleEnv starts the bench binary as a helper holding idle connections.
const idleEnv = "TSUBAME_BENCH_IDLE_CLIENT"

// idleHelpers split the connections so that no process needs more file
// descriptors than a per-process limit of 20,000 allows, and no source
// address more ports than the ephemeral range has.
const idleHelpers = 4

// holdIdle opens n keep-alive connections to addr from idleHelpers helper
// processes on 127.0.0.2, 127.0.0.3, ..., sends one request on each, and
// reads the RSS of process pid while they are all open and idle.
func holdIdle(ctx context.Context, addr string, pid, n int) (idleResult, error) {
	res := idleResult{Before: readRSS(pid), Helpers: idleHelpers}
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	type helper struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var hs []helper
	defer func() {
		for _, h := range hs {
			h.stdin.Close() // the helper exits, closing its connections
			_ = h.cmd.Wait()
		}
	}()
	for i := range idleHelpers {
		count := n / idleHelpers
		if i < n%idleHelpers {
			count++
		}
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,127.0.0.%d,%d", idleEnv, addr, i+2, count))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		hs = append(hs, helper{cmd, stdin, bufio.NewReader(stdout)})
	}
	for _, h := range hs {
		line, err := h.out.ReadString('\n')
		if err != nil {
			return res, fmt.Errorf("idle helper: %w", err)
		}
		var got int
		if _, err := fmt.Sscanf(line, "ready %d", &got); err != nil {
			return res, fmt.Errorf("idle helper said %q", line)
		}
		res.Conns += got
	}
	// Every connection is open and idle: sample the RSS for a second and
	// check that the server still takes a new connection.
	for range 10 {
		res.RSS = max(res.RSS, readRSS(pid))
		time.Sleep(100 * time.Millisecond)
	}
	body, err := httpGet("http://" + addr + "/json")
	res.StillServes = err == nil && strings.Contains(body, "Hello")
	return res, nil
}

// idleClient is the helper's side: spec is "addr,source-ip,count". It opens
// count connections from source-ip, sends one GET /json on each and reads
// the answer, prints "ready N", and keeps them until stdin closes.
func idleClient(spec string) error {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fmt.Errorf("bad %s %q", idleEnv, spec)
	}
	addr, src := parts[0], net.ParseIP(parts[1])
	n, err := strconv.Atoi(parts[2])
	if err != nil || src == nil {
		return fmt.Errorf("bad %s %q", idleEnv, spec)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 10 * time.Second}
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := d.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "GET /json HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
			if err != nil {
				errs <- err
			}
			_ = c.SetDeadline(time.Time{})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("ready %d\n", n)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return nil
}
