package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serverCPU measures what a wrk run cost the server behind addr: the user
// and system time of every process that holds addr's listening socket
// (nginx: its master and workers; Tsubame or a peer: the one process),
// taken before and after the run. The processes are found once, before the
// run, from the kernel's socket table (/proc/net/tcp) and the processes'
// file descriptors, so one helper serves every server the bench starts
// without each scenario naming its pids.
type serverCPU struct {
	pids []int
	at   time.Duration
}

// startServerCPU finds the processes listening on addr and reads their CPU
// time. With none found (another user's process, or no /proc) the
// measurement is empty: stop returns 0.
func startServerCPU(addr string) *serverCPU {
	s := &serverCPU{pids: listenerPIDs(addr)}
	s.at = s.total()
	return s
}

func (s *serverCPU) total() time.Duration {
	var sum time.Duration
	for _, pid := range s.pids {
		sum += procCPU(pid)
	}
	return sum
}

// stop returns the CPU time the processes used since startServerCPU.
func (s *serverCPU) stop() time.Duration {
	if len(s.pids) == 0 {
		return 0
	}
	return max(s.total()-s.at, 0)
}

// listenerPIDs returns the processes that hold a socket listening on
// addr's port (on any local address), in /proc order.
func listenerPIDs(addr string) []int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(table, uint16(port), inodes)
	}
	if len(inodes) == 0 {
		return nil
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	var pids []int
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // another user's, or gone
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") && inodes[link[len("socket:["):len(link)-1]] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// listeningInodes adds to inodes the socket inodes of table (the format of
// /proc/net/tcp) that listen on port.
func listeningInodes(table string, port uint16, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		inodes[f[9]] = true
	}
}

// CPUPerReq is the server's CPU time over the run per successful
// response, 0 when it was not measured.
func (r wrkResult) CPUPerReq() time.Duration {
	ok := r.Requests - r.Errors
	if r.CPU <= 0 || ok <= 0 {
		return 0
	}
	return r.CPU / time.Duration(ok)
}

// us formats a CPU time per request in microseconds ("–" when not
// measured).
func us(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(d)/1e3)
}
