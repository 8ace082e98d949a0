package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/certs/certstest"
	"tsubame/internal/config"
	"tsubame/internal/kafkatest"
	"tsubame/internal/logship"
)

// The shipper in the real binary, with rotation every second: a load runs
// while the broker is killed and restarted, then while the server is
// killed with SIGKILL and started again, then it stops cleanly. Every
// response a client received has its line in Kafka, the topic holds
// exactly the lines of the files once repeated ids are dropped, and no id
// names two lines.
func TestKafkaShipperSurvivesBrokerAndServerKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker and the real binary; skipped in -short mode")
	}
	ctx := context.Background()
	b, err := kafkatest.Start(ctx, kafkatest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	if err := b.CreateTopic(ctx, "access", 3); err != nil {
		t.Fatal(err)
	}
	dataDir, logDir := t.TempDir(), t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir,
		"TSUBAME_ACCESS_LOG_ROTATE_EVERY=1s", "TSUBAME_ACCESS_LOG_KAFKA_BROKERS=" + b.Addr,
		"TSUBAME_ACCESS_LOG_KAFKA_TOPIC=access", "TSUBAME_ACCESS_LOG_KAFKA_NODE_ID=node-1"}
	var mu sync.Mutex
	received := map[string]bool{}
	run := func(p *proc, phase string, during func()) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		url := p.base + "/api/sample4.js?id=1&callback=Example.process"
		for c := range 3 {
			wg.Go(func() {
				client := &http.Client{Timeout: 10 * time.Second}
				for n := 0; n < 50000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("%s-c%d-%d", phase, c, n)
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
		during()
		close(stop)
		wg.Wait()
	}

	p := startBinary(t, env...)
	run(p, "broker", func() {
		time.Sleep(500 * time.Millisecond)
		b.Kill()
		time.Sleep(1500 * time.Millisecond) // served and logged while Kafka is down
		if err := b.Restart(ctx); err != nil {
			t.Error(err)
		}
		time.Sleep(500 * time.Millisecond)
	})
	run(p, "kill", func() {
		time.Sleep(700 * time.Millisecond)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Error(err)
		}
		_ = p.wait(t)
	})
	p = startBinary(t, env...)
	run(p, "after", func() { time.Sleep(time.Second) })
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, p.logs)
	}

	lines := readLogLines(t, logDir)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	byID := map[string]string{}
	records := 0
	err = kafkatest.Consume(cctx, b.Addr, "access", func(r *kgo.Record) bool {
		records++
		var id string
		for _, h := range r.Headers {
			if h.Key == logship.IDHeader {
				id = string(h.Value)
			}
		}
		if prev, ok := byID[id]; ok && prev != string(r.Value) {
			t.Errorf("id %q names two lines", id)
		}
		byID[id] = string(r.Value)
		return len(byID) >= len(lines)
	})
	if err != nil {
		t.Fatalf("%d distinct ids of %d lines in the files: %v\n%s", len(byID), len(lines), err, p.logs)
	}
	shipped := map[string]bool{}
	for id, v := range byID {
		if !strings.HasPrefix(id, "node-1/") {
			t.Fatalf("id %q does not start with the node id", id)
		}
		if shipped[v] {
			t.Fatalf("a line shipped under two ids: %q", v)
		}
		shipped[v] = true
		if !lines[v] {
			t.Fatalf("shipped a line no file holds: %q", v)
		}
	}
	missing := 0
	reqIDs := map[string]bool{}
	for v := range shipped {
		_, id, _ := strings.Cut(v, "\treqid:")
		reqIDs[id] = true
	}
	for id := range received {
		if !reqIDs[id] {
			missing++
		}
	}
	t.Logf("%d responses, %d lines in the files, %d distinct in Kafka, %d records (%d resent, dropped by id)",
		len(received), len(lines), len(shipped), records, records-len(shipped))
	if len(received) == 0 || missing > 0 || len(shipped) != len(lines) {
		t.Fatalf("%d of %d received responses not in Kafka; %d distinct lines shipped of %d", missing, len(received), len(shipped), len(lines))
	}
}

// readLogLines reads the lines of every access-log file in dir.
func readLogLines(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "access.") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out[sc.Text()] = true
		}
		f.Close()
	}
	return out
}

// tsubame log ship backfills closed files (plain and gzipped) through a
// broker that requires SASL/SCRAM: each line once, under the id the
// running shipper would give it; a wrong password is refused with a clear
// error, and no record is written.
func TestLogShipBackfillWithSCRAM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker; skipped in -short mode")
	}
	ctx := context.Background()
	b, err := kafkatest.Start(ctx, kafkatest.Options{Dir: t.TempDir(), SCRAMUser: "shipper", SCRAMPassword: "scram-secret-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	if err := b.CreateTopic(ctx, "backfill", 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "access.20261122T000000Z-20261122T000500Z.log")
	gz := filepath.Join(dir, "access.20261122T000500Z-20261122T001000Z.log.gz")
	var text strings.Builder
	for i := range 300 {
		fmt.Fprintf(&text, "time:2026-11-22T00:00:%02d.%06dZ\thost:192.0.2.1\tid:%d\tstatus:200\treqid:r%d\n", i%60, i, i%5, i)
	}
	text.WriteString("torn line without a time\n")
	if err := os.WriteFile(plain, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(gz)
	zw := gzip.NewWriter(f)
	for i := 300; i < 500; i++ {
		fmt.Fprintf(zw, "time:2026-11-22T00:05:%02d.%06dZ\thost:192.0.2.1\tid:%d\tstatus:200\treqid:r%d\n", i%60, i, i%5, i)
	}
	zw.Close()
	f.Close()

	env := []string{"TSUBAME_ACCESS_LOG_KAFKA_BROKERS=" + b.SASLAddr, "TSUBAME_ACCESS_LOG_KAFKA_TOPIC=backfill",
		"TSUBAME_ACCESS_LOG_KAFKA_NODE_ID=n9", "TSUBAME_ACCESS_LOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"TSUBAME_ACCESS_LOG_KAFKA_SASL_USERNAME=shipper", "TSUBAME_DATA_DIR=" + t.TempDir()}
	code, out, stderr := runCmd(t, append(env, "TSUBAME_ACCESS_LOG_KAFKA_SASL_PASSWORD=wrong-password"), "", "log", "ship", "-from", plain)
	if code == 0 || !strings.Contains(stderr, "cannot reach Kafka") || strings.Contains(stderr+out, "wrong-password") {
		t.Fatalf("wrong password: exit %d\n%s\n%s", code, out, stderr)
	}
	t.Logf("wrong password: %s", strings.TrimSpace(stderr))
	code, out, stderr = runCmd(t, append(env, "TSUBAME_ACCESS_LOG_KAFKA_SASL_PASSWORD=scram-secret-1"), "", "log", "ship", "-from", plain, gz)
	if code != 0 || !strings.Contains(out, "shipped 500 line(s) from 2 file(s)") || !strings.Contains(out, "1 line(s) that are not records skipped") {
		t.Fatalf("backfill: exit %d\n%s\n%s", code, out, stderr)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ids := map[string]bool{}
	err = kafkatest.Consume(cctx, b.Addr, "backfill", func(r *kgo.Record) bool {
		for _, h := range r.Headers {
			if h.Key == logship.IDHeader {
				if ids[string(h.Value)] {
					t.Errorf("id %s twice", h.Value)
				}
				ids[string(h.Value)] = true
			}
		}
		return len(ids) >= 500
	})
	if err != nil {
		t.Fatalf("%d of 500 ids consumed: %v", len(ids), err)
	}
	// The ids are node/key/line: line 1 of the plain file is there.
	found := false
	for id := range ids {
		if strings.HasPrefix(id, "n9/") && strings.HasSuffix(id, "/1") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no id for line 1: %v", ids)
	}
}

// access_log.kafka.tls: the client checks the brokers' certificate against
// ca_file (and the name in server_name) and presents cert_file. Checked
// against a TLS listener that requires a client certificate (a Kafka broker
// with TLS needs keystores this test does not build; SASL/SCRAM is checked
// against a real broker above).
func TestKafkaTLSOptions(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	server := ca.Issue(t, dir, "broker", "kafka.internal")
	client := ca.Issue(t, dir, "client", "tsubame-shipper")
	pair, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// handshake runs the client configured by k against a new listener
	// that requires a client certificate, and returns the outcome of the
	// first handshake: the client certificate's name, or the error the
	// listener saw.
	handshake := func(k config.Kafka) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		outcomes := make(chan string, 64)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					tc := c.(*tls.Conn)
					if err := tc.Handshake(); err != nil {
						outcomes <- "error: " + err.Error()
						return
					}
					outcomes <- "ok: " + tc.ConnectionState().PeerCertificates[0].Subject.CommonName
				}()
			}
		}()
		k.Brokers = []string{ln.Addr().String()}
		opts, err := kafkaClientOpts(k)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() { _ = cl.Ping(ctx) }() // not Kafka behind the handshake: the request itself fails
		select {
		case got := <-outcomes:
			return got
		case <-ctx.Done():
			t.Fatal("no TLS handshake reached the listener")
			return ""
		}
	}
	k := config.Kafka{ClientID: "t", Compression: "zstd", BatchBytes: 1 << 20, BufferRecords: 1000,
		TLS: config.KafkaTLS{Enabled: true, CAFile: ca.File, CertFile: client.CertFile,
			KeyFile: client.KeyFile, ServerName: "kafka.internal"}}
	if got := handshake(k); got != "ok: tsubame-shipper" {
		t.Fatalf("handshake with the configured CA, name and client certificate: %s", got)
	}
	// A broker whose certificate does not carry server_name is refused by
	// the client: the listener sees the handshake fail.
	wrong := k
	wrong.TLS.ServerName = "other.internal"
	if got := handshake(wrong); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("a handshake completed against the wrong name: %s", got)
	}
	// Without a client certificate the listener refuses the client.
	anon := k
	anon.TLS.CertFile, anon.TLS.KeyFile = "", ""
	if got := handshake(anon); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("a handshake completed without a client certificate: %s", got)
	}
	// Files that are not what they claim are reported at start.
	bad := k
	bad.TLS.CAFile = client.KeyFile
	if _, err := kafkaClientOpts(bad); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a key as CA file: %v", err)
	}
}

// With Kafka unreachable the server serves and stays ready; the lag grows
// and, past access_log.kafka.lag_alert, an alert reaches admin.alert_webhook
// with the brokers' reason.
func TestKafkaDownServesAndAlerts(t *testing.T) {
	hook := startAlertHook(t, "/hooks/x")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	env := append(append(testEnv(t), hook.env...), "TSUBAME_ACCESS_LOG_KAFKA_BROKERS="+dead,
		"TSUBAME_ACCESS_LOG_KAFKA_LAG_ALERT=1s", "TSUBAME_SERVER_SHUTDOWN_TIMEOUT=2s")
	m := openMain(t, env, true)
	base := "http://" + m.PublicAddr()
	for range 20 {
		if code, body := get(t, base+"/api/sample4.js?id=1&callback=Example.process"); code != 200 || !strings.HasPrefix(body, "Example.process(") {
			t.Fatalf("sample4 with Kafka down: %d %q", code, body)
		}
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with Kafka down: %d %q", code, body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := hook.got()
		if strings.Contains(got, "Access log shipping to Kafka is behind") {
			if !strings.Contains(got, "20 lines waiting") {
				t.Errorf("alert without the lag: %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lag alert; alerts: %q, stats %+v", got, m.logs.shipper.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := m.logs.shipper.Stats(); st.Lag != 20 || st.Lines != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatal("not ready while the lag alerts")
	}
}
