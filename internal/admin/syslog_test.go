package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rsyslog is a real rsyslogd (Debian's package) on a random loopback TCP
// port and a unix socket, writing what it receives to a file, one message
// a line: PRI|HOSTNAME|APP-NAME|PROCID|MSGID|SD|MSG.
type rsyslog struct {
	dir, port, sock, out string
	cmd                  *exec.Cmd
}

func rsyslogd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("rsyslogd")
	if err != nil {
		bin = "/usr/sbin/rsyslogd"
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") != "" || !testing.Short() {
				t.Fatal("rsyslogd is not installed (make test-tools installs Debian's rsyslog)")
			}
			t.Skip("rsyslogd is not installed (make test-tools installs Debian's rsyslog); the syslog tests need a real one")
		}
	}
	return bin
}

func startRsyslog(t *testing.T, port string) *rsyslog {
	t.Helper()
	dir, err := os.MkdirTemp("", "rsyslog") // a short path: a unix socket's name is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &rsyslog{dir: dir, sock: filepath.Join(dir, "log.sock"), out: filepath.Join(dir, "out.log")}
	if port == "" {
		port = "0"
	}
	conf := fmt.Sprintf(`global(workDirectory=%q)
module(load="imtcp")
module(load="imuxsock" SysSock.Use="off")
input(type="imtcp" address="127.0.0.1" port=%q listenPortFileName=%q)
input(type="imuxsock" Socket=%q UseSpecialParser="off" ParseHostname="on")
template(name="fields" type="string" string="%%pri%%|%%hostname%%|%%app-name%%|%%procid%%|%%msgid%%|%%structured-data%%|%%msg%%\n")
action(type="omfile" file=%q template="fields")
`, dir, port, filepath.Join(dir, "port"), r.sock, r.out)
	if err := os.WriteFile(filepath.Join(dir, "rsyslog.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(rsyslogd(t), "-n", "-f", filepath.Join(dir, "rsyslog.conf"), "-i", filepath.Join(dir, "pid"))
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	r.cmd.Stdout, r.cmd.Stderr = stderr, stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	// Up when the socket exists and the TCP port (written to the port file
	// when it was 0) takes a connection.
	deadline := time.Now().Add(time.Minute)
	for {
		if port == "0" {
			if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
				r.port = string(bytes.TrimSpace(b))
			}
		} else {
			r.port = port
		}
		if _, err := os.Stat(r.sock); err == nil && r.port != "" {
			if c, err := net.Dial("tcp", "127.0.0.1:"+r.port); err == nil {
				c.Close()
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "stderr"))
			t.Fatalf("rsyslogd did not start: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rsyslog) stop() {
	if r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
}

// received waits until rsyslogd has written n messages, and returns them.
func (r *rsyslog) received(t *testing.T, n int) [][]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(r.out)
		var msgs [][]string
		for line := range strings.Lines(string(b)) {
			msgs = append(msgs, strings.SplitN(strings.TrimSuffix(line, "\n"), "|", 7))
		}
		if len(msgs) >= n {
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("rsyslogd got %d of %d messages: %q", len(msgs), n, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// Every audit line, checkpoints too, reaches a real rsyslogd as an RFC 5424
// message over TCP and over a unix socket: facility authpriv, notice for a
// success and warning for a failure, the line itself as the message.
func TestAuditCopiedToSyslog(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			rs := startRsyslog(t, "")
			addr := "tcp://127.0.0.1:" + rs.port
			if network == "unix" {
				addr = "unix://" + rs.sock
			}
			copyTo, err := NewSyslog(SyslogOptions{Address: addr, Facility: "authpriv"})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "audit.log")
			a := openTestAudit(t, AuditOptions{Path: path, MaxSize: 1024, Syslog: copyTo})
			for i := range 8 {
				result := "ok"
				if i%3 == 2 {
					result = "denied"
				}
				a.Record(AuditRecord{Actor: "ålice", Remote: "192.0.2.7", Action: "placement.put",
					Target: fmt.Sprintf("キャンペーン-%d|\"x\"\n", i), Result: result})
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			files, err := AuditFiles(path)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, name := range files {
				b, _ := os.ReadFile(name)
				lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
			}
			if len(files) < 2 || len(lines) < 9 {
				t.Fatalf("%d files, %d lines: the test wants a rotation in it", len(files), len(lines))
			}
			msgs := rs.received(t, len(lines))
			if len(msgs) != len(lines) {
				t.Fatalf("%d messages for %d lines", len(msgs), len(lines))
			}
			host, _ := os.Hostname()
			for i, m := range msgs {
				var rec AuditRecord
				if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
					t.Fatal(err)
				}
				pri := 10*8 + 5
				if rec.Result != "ok" {
					pri = 10*8 + 4
				}
				want := []string{strconv.Itoa(pri), host, "tsubame", strconv.Itoa(os.Getpid()), "audit", "-"}
				if len(m) != 7 || strings.Join(m[:6], "|") != strings.Join(want, "|") {
					t.Fatalf("message %d: %q, want %q", i, m, want)
				}
				if !sameJSON(m[6], lines[i]) || strings.ContainsFunc(m[6], func(r rune) bool { return r > 127 }) {
					t.Fatalf("message %d: %s\nline: %s", i, m[6], lines[i])
				}
			}
			if st, _ := a.SyslogStats(); st.Sent != uint64(len(lines)) || st.Dropped != 0 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

// With the syslog server gone the copy fails, says so, and keeps what was
// written since in its queue; when the server is back those lines arrive.
// Admin actions never wait for it.
func TestAuditSyslogReconnects(t *testing.T) {
	rs := startRsyslog(t, "")
	port := rs.port
	copyTo, err := NewSyslog(SyslogOptions{Address: "tcp://127.0.0.1:" + port, Facility: "local3"})
	if err != nil {
		t.Fatal(err)
	}
	a := openTestAudit(t, AuditOptions{Path: filepath.Join(t.TempDir(), "audit.log"), Syslog: copyTo})
	defer a.Close()
	a.Record(AuditRecord{Actor: "alice", Action: "login", Target: "before", Result: "ok"})
	rs.received(t, 1)
	rs.stop()
	// TCP takes the first write after the peer has gone; a later one fails.
	deadline := time.Now().Add(time.Minute)
	for i := 0; !copyTo.Stats().Failing; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the copy did not notice rsyslogd stopped")
		}
		a.Record(AuditRecord{Actor: "alice", Action: "login", Target: fmt.Sprint("probe-", i), Result: "ok"})
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 5 {
		a.Record(AuditRecord{Actor: "bob", Action: "placement.delete", Target: fmt.Sprint("while-down-", i), Result: "ok"})
	}
	// Back on the same port.
	back := startRsyslog(t, port)
	deadline = time.Now().Add(time.Minute)
	for {
		var got []string
		for _, m := range back.received(t, 0) {
			if len(m) == 7 && strings.Contains(m[6], `"while-down-`) {
				if m[0] != strconv.Itoa(19*8+5) {
					t.Fatalf("facility local3, notice: %q", m)
				}
				got = append(got, m[6])
			}
		}
		if len(got) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lines queued while rsyslogd was down: %d of 5 arrived", len(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := copyTo.Stats(); st.Failing {
		t.Fatalf("still failing after the server is back: %+v", st)
	}
}

func TestSyslogAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"tcp://logs.internal:514": "tcp logs.internal:514", "tls://[2001:db8::1]:6514": "tls [2001:db8::1]:6514",
		"unix:///dev/log": "unix /dev/log", "tcp://logs.internal": "error", "udp://logs:514": "error",
		"unix://dev/log": "error", "tcp://u:p@logs:514": "error", "logs:514": "error", "": "error",
	} {
		network, a, err := ParseSyslogAddress(addr)
		got := network + " " + a
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%q: %s, want %s", addr, got, want)
		}
	}
	if _, err := NewSyslog(SyslogOptions{Address: "tcp://127.0.0.1:1", Facility: "nope"}); err == nil {
		t.Fatal("an unknown facility was taken")
	}
}
