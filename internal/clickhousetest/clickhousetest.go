// Package clickhousetest runs a real ClickHouse server for tests: Debian's
// clickhouse-server, on random loopback ports, with its data in a
// temporary directory, stopped when the test ends. Queries go over its
// HTTP interface, which every ClickHouse release since 2016 speaks the
// same way (Debian's package is 18.16; the native protocol of current Go
// clients is not).
package clickhousetest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one running clickhouse-server.
type Server struct {
	// HTTP is the address of its HTTP interface (host:port).
	HTTP string
	Dir  string
	cmd  *exec.Cmd
	out  *os.File
	// exited is closed when the process has ended, with its wait error in
	// waitErr.
	exited  chan struct{}
	waitErr error
}

// Require skips the test when clickhouse-server is missing, saying why,
// except under CI, where a missing server is a failure (CI installs it).
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("clickhouse-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("clickhouse-server is not installed; .ci/run installs it (apt-get install clickhouse-server)")
		}
		t.Skip("clickhouse-server is not installed (apt-get install clickhouse-server): this test needs a real ClickHouse")
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// config is the server's configuration: loopback only, the default user
// without a password from 127.0.0.1, JSON lines read with their unknown
// fields skipped (the access log's request lines carry fields the events
// table has not), and a new Kafka consumer group reading its topic from
// the start (librdkafka's default is the end: what was shipped before
// the group joined would be skipped).
const config = `<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/server.err.log</errorlog></logger>
    <http_port>%[2]d</http_port>
    <tcp_port>%[3]d</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>%[1]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>
    <mark_cache_size>5368709</mark_cache_size>
    <uncompressed_cache_size>8589934</uncompressed_cache_size>
</yandex>
`

const users = `<?xml version="1.0"?>
<yandex>
    <profiles><default>
        <max_memory_usage>1000000000</max_memory_usage>
        <input_format_skip_unknown_fields>1</input_format_skip_unknown_fields>
    </default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`

// Start runs a server and waits until it answers.
func Start(t testing.TB) *Server {
	t.Helper()
	Require(t)
	var last error
	for range 5 {
		dir := t.TempDir()
		s := &Server{Dir: dir}
		httpPort, tcpPort := freePort(t), freePort(t)
		s.HTTP = "127.0.0.1:" + strconv.Itoa(httpPort)
		if err := os.WriteFile(filepath.Join(dir, "config.xml"), fmt.Appendf(nil, config, dir, httpPort, tcpPort), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o600); err != nil {
			t.Fatal(err)
		}
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			return s
		}
		s.Kill()
	}
	t.Fatal(last)
	return nil
}

func (s *Server) start() error {
	out, err := os.Create(filepath.Join(s.Dir, "console.log"))
	if err != nil {
		return err
	}
	s.out = out
	s.cmd = exec.Command("clickhouse-server", "--config-file="+filepath.Join(s.Dir, "config.xml"))
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, exited chan struct{}) {
		s.waitErr = c.Wait()
		close(exited)
	}(s.cmd, s.exited)
	deadline := time.Now().Add(60 * time.Second) // a busy machine starts it slowly
	for {
		if v, err := s.query("SELECT 1"); err == nil && strings.TrimSpace(v) == "1" {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "server.err.log"))
			return fmt.Errorf("clickhouse-server on %s did not start:\n%s", s.HTTP, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the server at once.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	if s.out != nil {
		s.out.Close()
	}
}

// Version is the server's version.
func (s *Server) Version() (string, error) {
	v, err := s.Query("SELECT version()")
	return strings.TrimSpace(v), err
}

// Query runs one statement over HTTP and returns its output
// (TabSeparated unless the statement says FORMAT). Each statement has a
// connection of its own: a POST on a kept-alive connection the server has
// just closed fails with EOF, and Go does not send a POST again.
func (s *Server) Query(sql string) (string, error) {
	out, err := s.query(sql)
	var status statusError
	if err != nil && !errors.As(err, &status) {
		err = s.explain(err)
	}
	return out, err
}

// statusError is the server's answer to a statement it refused.
type statusError struct {
	status, body string
}

func (e statusError) Error() string { return "clickhouse: " + e.status + ": " + e.body }

func (s *Server) query(sql string) (string, error) {
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post("http://"+s.HTTP+"/?"+url.Values{"database": {"default"}}.Encode(), "text/plain", strings.NewReader(sql))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", statusError{resp.Status, strings.TrimSpace(string(b))}
	}
	return string(b), nil
}

// explain adds to a failed request what became of the server: whether
// its process ended, and how, with the end of its error log. A request
// the server dropped says only EOF.
func (s *Server) explain(err error) error {
	if s.exited == nil {
		return err
	}
	select {
	case <-s.exited:
	case <-time.After(time.Second): // a crash's exit follows its dropped connections closely
		return fmt.Errorf("%w (clickhouse-server still running)", err)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "server.err.log"))
	if len(log) > 4096 {
		log = log[len(log)-4096:]
	}
	return fmt.Errorf("%w (clickhouse-server exited: %v); the end of its error log:\n%s", err, s.waitErr, log)
}

// Exec runs each statement of a script (separated by lines that end with
// ";"), skipping comments.
func (s *Server) Exec(script string) error {
	for _, stmt := range Statements(script) {
		if _, err := s.Query(stmt); err != nil {
			return fmt.Errorf("%w\nin: %s", err, stmt)
		}
	}
	return nil
}

// Statements splits a SQL script at the semicolons that end its lines,
// dropping "--" comment lines.
func Statements(script string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}
