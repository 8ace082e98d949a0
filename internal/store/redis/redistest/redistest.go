// Package redistest starts real Redis servers (Debian's redis-server) for
// tests: standalone or a 6-node cluster, on random loopback ports, in a
// temporary directory, stopped by PID when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	args []string
}

// Require skips the test when redis-server is missing, saying why, except
// under CI, where a missing server is a failure (CI installs it).
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed; .ci/run installs it (apt-get install redis-server redis-tools)", bin)
			}
			t.Skipf("%s is not installed (apt-get install redis-server redis-tools): this test needs a real Redis", bin)
		}
	}
}

// freePort returns a loopback port free now; with bus, one whose cluster
// bus port (the port + 10000) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if !bus {
			ln.Close()
			return port
		}
		if port+10000 <= 65535 {
			if busLn, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
				busLn.Close()
				ln.Close()
				return port
			}
		}
		ln.Close()
	}
	t.Fatal("no free port with a free cluster bus port")
	return 0
}

// Start runs a standalone server; extra arguments go to redis-server. A
// port taken by someone else between choosing it and the server's bind
// (other tests run beside) is chosen again.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	bus := slices.Contains(extra, "--cluster-enabled")
	var err error
	for range 5 {
		dir := t.TempDir()
		port := freePort(t, bus)
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis.log")}, extra...)
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
		s.Kill()
		if !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	t.Fatal(err)
	return nil
}

// start runs the server and waits until it answers PING.
func (s *Server) start() error {
	s.cmd = exec.Command("redis-server", s.args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func(c *exec.Cmd) { _ = c.Wait() }(s.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", s.port(), "ping").Output(); err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		if time.Now().After(deadline) || strings.Contains(string(log), "Address already in use") {
			return fmt.Errorf("redis-server on %s did not start:\n%s", s.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) port() string { return s.Addr[strings.LastIndexByte(s.Addr, ':')+1:] }

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd = nil
	}
}

// Pause freezes the server (SIGSTOP): it keeps its connections but answers nothing.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Restart starts a killed server again on the same port and directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	time.Sleep(50 * time.Millisecond)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// CLI runs redis-cli against the server and returns its output.
func (s *Server) CLI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", s.port()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Cluster is a running Redis Cluster of 3 masters with a replica each.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// StartCluster starts six nodes and joins them with redis-cli --cluster create.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	c := &Cluster{}
	for range 6 {
		c.Nodes = append(c.Nodes, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	c.Nodes[0].CLI(t, args...)
	c.WaitOK(t)
	// A replica that never finished its first sync will not stand in for a
	// dead master: wait until every replication link is up.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			info := n.CLI(t, "info", "replication")
			if strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never synced:\n%s", n.Addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// WaitOK waits until every live node reports cluster_state:ok.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		for !strings.Contains(n.CLI(t, "cluster", "info"), "cluster_state:ok") {
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok on %s:\n%s", n.Addr, n.CLI(t, "cluster", "info"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// MasterOf returns the node currently serving key's slot as master.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		slot := strings.TrimSpace(n.CLI(t, "cluster", "keyslot", key))
		sc := bufio.NewScanner(strings.NewReader(n.CLI(t, "cluster", "nodes")))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			s, _ := strconv.Atoi(slot)
			for _, r := range f[8:] {
				lo, hi, _ := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if hi != "" {
					b, _ = strconv.Atoi(hi)
				}
				if s >= a && s <= b {
					addr := f[1][:strings.IndexByte(f[1], '@')]
					for _, m := range c.Nodes {
						if m.Addr == addr {
							return m
						}
					}
				}
			}
		}
		break
	}
	t.Fatalf("no master found for %q", key)
	return nil
}

// ReplicaOf returns the live node that replicates master.
func (c *Cluster) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	for _, n := range c.Nodes {
		if n.cmd == nil || n == master {
			continue
		}
		info := n.CLI(t, "info", "replication")
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+master.port()+"\r") {
			return n
		}
	}
	t.Fatalf("no replica of %s", master.Addr)
	return nil
}

// String lists the addresses.
func (c *Cluster) String() string { return fmt.Sprint(c.Addrs()) }

// WaitReplicated waits until every replica of the master s has every write
// s has taken so far (its offset reaches the master's), so that killing s
// loses nothing the test wrote.
func (s *Server) WaitReplicated(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := s.CLI(t, "info", "replication")
		master := int64(-1)
		var offsets []int64 // INFO lists the replicas before the master's offset
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master, _ = strconv.ParseInt(v, 10, 64)
			}
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
				_, rest, _ := strings.Cut(line, "offset=")
				off, _, _ := strings.Cut(rest, ",")
				n, _ := strconv.ParseInt(off, 10, 64)
				offsets = append(offsets, n)
			}
		}
		caughtUp := len(offsets) > 0
		for _, n := range offsets {
			caughtUp = caughtUp && n >= master
		}
		if master >= 0 && caughtUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas of %s did not catch up:\n%s", s.Addr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
