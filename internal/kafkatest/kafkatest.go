// Package kafkatest runs a real Apache Kafka broker for tests and trials:
// one KRaft node that is both controller and broker, on loopback ports,
// with its data in a directory of its own. Its jars come from Maven Central,
// pinned by SHA-256 (jars.txt), into a cache directory shared by every run;
// Java 17 or later runs it.
package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Version is the Kafka release the jars are.
const Version = "4.1.1"

//go:embed jars.txt
var jarList string

// mavenCentral is where the jars are fetched from.
const mavenCentral = "https://repo1.maven.org/maven2"

// CacheDir is where the jars are kept: $TSUBAME_KAFKA_CACHE, else the
// user's cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("TSUBAME_KAFKA_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "tsubame", "kafka-"+Version), nil
}

type jar struct{ group, artifact, version, sha256 string }

func (j jar) file() string { return j.artifact + "-" + j.version + ".jar" }

func (j jar) url() string {
	return fmt.Sprintf("%s/%s/%s/%s/%s", mavenCentral, strings.ReplaceAll(j.group, ".", "/"), j.artifact, j.version, j.file())
}

func jars() ([]jar, error) {
	var out []jar
	for n, line := range strings.Split(jarList, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		coord, sum, ok := strings.Cut(line, " ")
		parts := strings.Split(coord, ":")
		if !ok || len(parts) != 3 || len(sum) != 64 {
			return nil, fmt.Errorf("jars.txt:%d: malformed", n+1)
		}
		out = append(out, jar{parts[0], parts[1], parts[2], sum})
	}
	return out, nil
}

// Fetch makes sure every jar is in dir, downloading the missing ones and
// checking each against its SHA-256. Concurrent callers (test packages run
// in parallel) take turns through a lock file.
func Fetch(ctx context.Context, dir string) error {
	list, err := jars()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	client := &http.Client{Timeout: 5 * time.Minute}
	for _, j := range list {
		path := filepath.Join(dir, j.file())
		if sum, err := fileSHA256(path); err == nil && sum == j.sha256 {
			continue
		}
		if err := download(ctx, client, j, path); err != nil {
			return err
		}
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func download(ctx context.Context, client *http.Client, j jar, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", j.url(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", j.url(), resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("fetching %s: %w", j.url(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != j.sha256 {
		return fmt.Errorf("%s: SHA-256 %s, want %s", j.url(), got, j.sha256)
	}
	return os.Rename(tmp.Name(), path)
}

// CheckJava reports whether a Java 17 or later is on the PATH.
func CheckJava() error {
	out, err := exec.Command("java", "-version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("java not found (Kafka needs Java 17 or later; Debian: apt-get install default-jre-headless): %v", err)
	}
	m := regexp.MustCompile(`version "(\d+)`).FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("cannot tell the Java version from %q", out)
	}
	if v, _ := strconv.Atoi(string(m[1])); v < 17 {
		return fmt.Errorf("java %d found; Kafka %s needs 17 or later", v, Version)
	}
	return nil
}

// Broker is a running (or stopped) broker.
type Broker struct {
	// Addr is the broker's host:port for clients.
	Addr string
	// SASLAddr is the SASL_PLAINTEXT listener's, with Options.SCRAMUser.
	SASLAddr string

	jars, dir      string
	controllerAddr string
	mu             sync.Mutex
	cmd            *exec.Cmd
	done           chan error
	log            *bytes.Buffer
}

// Options configure a broker.
type Options struct {
	// Dir holds the broker's configuration and data. Required.
	Dir string
	// Port is the client port; 0 picks a free one.
	Port int
	// Output receives the broker's log too (nil: kept for errors only).
	Output io.Writer
	// SCRAMUser and SCRAMPassword, if set, open a second listener
	// (SASLAddr) that takes SASL/SCRAM-SHA-256 and SCRAM-SHA-512 logins
	// of this user, whose credentials are written at format time.
	SCRAMUser, SCRAMPassword string
}

// Start fetches the jars, formats the broker's storage and starts it, and
// returns once it answers clients. Stop it with Stop.
func Start(ctx context.Context, opt Options) (*Broker, error) {
	if err := CheckJava(); err != nil {
		return nil, err
	}
	jarsDir, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if err := Fetch(ctx, jarsDir); err != nil {
		return nil, err
	}
	// A port chosen free can be taken before the broker's JVM binds it,
	// seconds later (by a client socket of a test running beside: the
	// ports come from the same ephemeral range). Choose again then.
	for attempt := 1; ; attempt++ {
		b, err := startOnce(ctx, opt, jarsDir)
		if err == nil || opt.Port != 0 || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return b, err
		}
		if err := os.RemoveAll(filepath.Join(opt.Dir, "data")); err != nil {
			return nil, err
		}
	}
}

func startOnce(ctx context.Context, opt Options, jarsDir string) (*Broker, error) {
	var err error
	port := opt.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	cport, err := freePort(port) // the broker's own port may be free now: it was killed
	if err != nil {
		return nil, err
	}
	b := &Broker{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), jars: jarsDir, dir: opt.Dir,
		controllerAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(cport)), log: &bytes.Buffer{}}
	listeners := "PLAINTEXT://" + b.Addr
	var scram string
	if opt.SCRAMUser != "" {
		sport, err := freePort(port, cport)
		if err != nil {
			return nil, err
		}
		b.SASLAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
		listeners += ",SASL_PLAINTEXT://" + b.SASLAddr
		scram = `sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
inter.broker.listener.name=PLAINTEXT
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
`
	}
	props := fmt.Sprintf(`node.id=1
process.roles=broker,controller
listeners=%s,CONTROLLER://%s
advertised.listeners=%s
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@%s
log.dirs=%s
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
%s`, listeners, b.controllerAddr, listeners, b.controllerAddr, filepath.Join(opt.Dir, "data"), scram)
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(b.propsFile(), []byte(props), 0o644); err != nil {
		return nil, err
	}
	args := []string{"format", "--ignore-formatted", "-t", clusterID(), "-c", b.propsFile()}
	if opt.SCRAMUser != "" {
		for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, opt.SCRAMUser, opt.SCRAMPassword))
		}
	}
	format := b.java("kafka.tools.StorageTool", args...)
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("formatting the broker's storage: %v\n%s", err, out)
	}
	if err := b.start(ctx, opt.Output); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Broker) propsFile() string { return filepath.Join(b.dir, "server.properties") }

func (b *Broker) java(class string, args ...string) *exec.Cmd {
	all := append([]string{"-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", filepath.Join(b.jars, "*"), class}, args...)
	return exec.Command("java", all...)
}

// start runs the broker process and waits until it answers.
func (b *Broker) start(ctx context.Context, output io.Writer) error {
	b.mu.Lock()
	cmd := b.java("kafka.Kafka", b.propsFile())
	b.log.Reset()
	w := io.Writer(&lockedWriter{b: b})
	if output != nil {
		w = io.MultiWriter(w, output)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		b.mu.Unlock()
		return err
	}
	b.cmd, b.done = cmd, make(chan error, 1)
	done := b.done
	b.mu.Unlock()
	go func() { done <- cmd.Wait() }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(2 * time.Minute) // a busy machine starts a JVM slowly
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := kadm.NewClient(cl).ListBrokers(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("the broker exited (%v):\n%s", err, b.Log())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = b.Stop()
			return fmt.Errorf("the broker did not answer within 2 minutes (%v):\n%s", err, b.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type lockedWriter struct{ b *Broker }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	if w.b.log.Len() < 1<<20 {
		w.b.log.Write(p)
	}
	return len(p), nil
}

// Log returns what the broker wrote (its warnings and errors).
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// Stop stops the broker (SIGTERM, then SIGKILL after 30 s) and waits for it.
func (b *Broker) Stop() error {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// Kill stops the broker at once (SIGKILL), as a crash would.
func (b *Broker) Kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped broker again, on the same ports and data.
func (b *Broker) Restart(ctx context.Context) error {
	_ = b.Stop()
	return b.start(ctx, nil)
}

// CreateTopic creates a topic, retrying while the controller settles.
func (b *Broker) CreateTopic(ctx context.Context, name string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, name)
		if err == nil {
			err = res.Err
		}
		if err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating topic %s: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// freePort returns a port free on 127.0.0.1 now, none of taken (ports
// the broker is given already: the kernel may hand a closed one out
// again).
func freePort(taken ...int) (int, error) {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !slices.Contains(taken, port) {
			return port, nil
		}
	}
}

// clusterID is a random KRaft cluster id: 16 bytes in URL-safe base64
// without padding, as kafka-storage random-uuid makes. Like Kafka's
// Uuid.randomUuid, it never starts with '-': the storage tool would take
// such an id for an option (one broker start in 64 failed so).
func clusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// Consume reads the records of topic from its start, handing each to fn,
// until fn returns true or ctx ends.
func Consume(ctx context.Context, addr, topic string, fn func(*kgo.Record) bool) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		stop := false
		fs.EachRecord(func(r *kgo.Record) { stop = stop || fn(r) })
		if stop {
			return nil
		}
	}
}

// Pid is the broker process's id (0 while it is stopped).
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}
