//go:build linux

package logship

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/accesslog"
	"tsubame/internal/kafkatest"
)

var quiet = slog.New(slog.DiscardHandler)

// broker is one Kafka broker for the package's tests (each uses its own topic).
var (
	brokerOnce sync.Once
	broker     *kafkatest.Broker
	brokerErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if broker != nil {
		_ = broker.Stop()
		_ = os.RemoveAll(brokerDir)
	}
	os.Exit(code)
}

var brokerDir string

func startBroker(t *testing.T, topic string, partitions int) *kafkatest.Broker {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kafka broker; skipped in -short mode")
	}
	brokerOnce.Do(func() {
		brokerDir, brokerErr = os.MkdirTemp("", "logship-kafka-")
		if brokerErr == nil {
			broker, brokerErr = kafkatest.Start(context.Background(), kafkatest.Options{Dir: brokerDir})
		}
	})
	if brokerErr != nil {
		t.Fatal(brokerErr)
	}
	if err := broker.CreateTopic(context.Background(), topic, partitions); err != nil {
		t.Fatal(err)
	}
	return broker
}

type fixture struct {
	t      *testing.T
	dir    string
	topic  string
	broker *kafkatest.Broker
	log    *accesslog.Logger
	fs     *accesslog.FileSink
	ship   *Shipper
	fo     accesslog.FileOptions
	format accesslog.Format
}

func newShipper(t *testing.T, f *fixture) *Shipper {
	t.Helper()
	s, err := New(Options{Dir: f.dir, Name: "access.log", Node: "node-a", Topic: f.topic, ByPlacement: true,
		Client:       []kgo.Opt{kgo.SeedBrokers(f.broker.Addr), kgo.ProducerLinger(5 * time.Millisecond)},
		PollInterval: 10 * time.Millisecond, Logger: quiet,
		Written: func() uint64 {
			if f.log == nil {
				return 0
			}
			return f.log.Stats().Written
		}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// open opens the mapped access log with the shipper holding retention.
func (f *fixture) open() {
	f.t.Helper()
	f.ship = newShipper(f.t, f)
	fo := f.fo
	fo.Dir, fo.Logger, fo.Hold = f.dir, quiet, f.ship.Hold
	var err error
	if f.log, f.fs, err = accesslog.OpenMapped(fo, accesslog.Options{Format: f.format, Logger: quiet}); err != nil {
		f.t.Fatal(err)
	}
	f.ship.Start()
}

func (f *fixture) close() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.log.Close(ctx); err != nil {
		f.t.Fatal(err)
	}
	if err := f.ship.Close(ctx); err != nil {
		f.t.Fatal(err)
	}
}

// appendN appends n records from g goroutines, numbered from base.
func (f *fixture) appendN(base, n, g int) {
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			for i := w; i < n; i += g {
				num := base + i
				r := accesslog.Record{Time: time.Now(), Remote: netip.MustParseAddr("192.0.2.1"),
					Method: []byte("GET"), Path: []byte(fmt.Sprintf("/api/sample4.js?n=%d", num)),
					Endpoint: "sample4", ID: []byte(fmt.Sprint(num % 7)), Status: 200,
					RequestID: []byte(fmt.Sprintf("req-%d", num))}
				if err := f.log.Append(&r, uint64(w)); err != nil {
					f.t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// waitShipped waits until the shipper has had n lines acknowledged.
func waitShipped(t *testing.T, s *Shipper, n uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for s.Stats().Lines < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines acknowledged: %+v", s.Stats().Lines, n, s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fileLines reads every line of every file of the log (decompressing .gz).
func fileLines(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names, err := accesslog.ClosedFiles(dir, "access.log", false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range append(names, "access.log") {
		r, err := accesslog.OpenLines(filepath.Join(dir, n))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() != "" && !strings.ContainsRune(sc.Text(), 0) {
				out[sc.Text()] = true
			}
		}
		r.Close()
	}
	return out
}

// consumed reads the topic until it holds want distinct ids, and returns
// the values by id and the number of records read.
func consumed(t *testing.T, b *kafkatest.Broker, topic string, want int) (map[string]string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	byID := map[string]string{}
	total := 0
	err := kafkatest.Consume(ctx, b.Addr, topic, func(r *kgo.Record) bool {
		total++
		var id string
		for _, h := range r.Headers {
			if h.Key == IDHeader {
				id = string(h.Value)
			}
		}
		if id == "" {
			t.Errorf("record without %s: %q", IDHeader, r.Value)
		}
		if prev, ok := byID[id]; ok && prev != string(r.Value) {
			t.Errorf("id %s names two lines:\n%s\n%s", id, prev, r.Value)
		}
		byID[id] = string(r.Value)
		if got := string(accesslog.LinePlacement(append(r.Value, '\n'))); got != string(r.Key) {
			t.Errorf("record keyed %q, its placement is %q", r.Key, got)
		}
		return len(byID) >= want
	})
	if err != nil {
		t.Fatalf("consumed %d distinct of %d: %v", len(byID), want, err)
	}
	return byID, total
}

// checkSame asserts the topic holds exactly the lines of the files.
func checkSame(t *testing.T, lines map[string]bool, byID map[string]string) {
	t.Helper()
	values := map[string]bool{}
	for _, v := range byID {
		if values[v] {
			t.Fatalf("one line under two ids: %q", v)
		}
		values[v] = true
		if !lines[v] {
			t.Fatalf("shipped a line no file holds: %q", v)
		}
	}
	if len(values) != len(lines) {
		t.Fatalf("%d distinct lines shipped, the files hold %d", len(values), len(lines))
	}
}

// Every line written is shipped once per id, across size rotations with
// gzip, a broker killed and restarted in the middle of the load, and the
// log's retention (which keeps what is not shipped).
func TestShipsAcrossRotationAndBrokerRestart(t *testing.T) {
	b := startBroker(t, "ship-restart", 3)
	f := &fixture{t: t, dir: t.TempDir(), topic: "ship-restart", broker: b,
		fo: accesslog.FileOptions{MaxSize: 64 << 10, Gzip: true, KeepFiles: 2}}
	f.open()
	f.appendN(0, 3000, 4)
	waitShipped(t, f.ship, 3000)

	b.Kill()
	f.appendN(3000, 3000, 4) // written while Kafka is down
	if st := f.ship.Stats(); st.Lag == 0 {
		t.Errorf("lag 0 with the broker down: %+v", st)
	}
	if err := b.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.appendN(6000, 3000, 4)
	waitShipped(t, f.ship, 9000)
	if st := f.ship.Stats(); st.Lag != 0 {
		t.Errorf("lag %d after everything was acknowledged", st.Lag)
	}
	f.close()
	if f.fs.Rotations() < 3 {
		t.Fatalf("only %d rotations: the test did not cross files", f.fs.Rotations())
	}
	byID, _ := consumed(t, b, f.topic, 9000)
	if len(byID) != 9000 {
		t.Fatalf("%d distinct ids, want 9000", len(byID))
	}
	// Retention (keep_files: 2) ran while files were unshipped; now that
	// all are shipped the next rotation may prune, and the files that are
	// still there hold only shipped lines.
	lines := fileLines(t, f.dir)
	for l := range lines {
		found := false
		for _, v := range byID {
			if v == l {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("a line of the files was not shipped: %q", l)
		}
	}
}

// A shipper that dies without saving its state (as kill -9 would leave it)
// resends at most what was unsaved, under the same ids; a consumer that
// drops repeated ids sees every line once.
func TestResumesAfterUncleanStop(t *testing.T) {
	b := startBroker(t, "ship-crash", 2)
	f := &fixture{t: t, dir: t.TempDir(), topic: "ship-crash", broker: b, fo: accesslog.FileOptions{MaxSize: 64 << 10}}
	f.open()
	f.appendN(0, 2000, 2)
	waitShipped(t, f.ship, 2000)
	waitSaved(t, f.ship.opt.StateFile, 2000)
	f.appendN(2000, 1000, 2) // some of these are sent, some acknowledged, none saved
	// Die: stop reading and close the client without committing or saving.
	close(f.ship.stop)
	f.ship.cancel()
	f.ship.wg.Wait()
	f.ship.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The next run, with more lines.
	f.open()
	f.appendN(3000, 1000, 2)
	waitShipped(t, f.ship, 1000) // at least the new ones
	deadline := time.Now().Add(2 * time.Minute)
	for f.ship.Stats().Lag != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	f.close()
	byID, total := consumed(t, b, f.topic, 4000)
	checkSame(t, fileLines(t, f.dir), byID)
	if total-4000 > 1000 {
		t.Fatalf("%d records resent: more than the 1000 lines written after the last saved state", total-4000)
	}
	t.Logf("%d records for 4000 lines (%d resent after the unclean stop)", total, total-4000)
}

// waitSaved waits until the state file records n acknowledged lines.
func waitSaved(t *testing.T, path string, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := loadState(path)
		var sum int64
		for _, f := range st {
			sum += f.Lines
		}
		if err == nil && sum >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file records %d of %d lines (%v)", sum, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The state file follows a file through its rotation and compression: a
// restart ships nothing twice when everything was acknowledged and saved.
func TestRestartShipsNothingTwice(t *testing.T) {
	b := startBroker(t, "ship-clean", 1)
	f := &fixture{t: t, dir: t.TempDir(), topic: "ship-clean", broker: b, fo: accesslog.FileOptions{MaxSize: 64 << 10, Gzip: true}}
	f.open()
	f.appendN(0, 1500, 2)
	waitShipped(t, f.ship, 1500)
	f.close()
	f.open()
	f.appendN(1500, 10, 1)
	waitShipped(t, f.ship, 10)
	f.close()
	byID, total := consumed(t, b, f.topic, 1510)
	if total != 1510 {
		t.Fatalf("%d records for 1510 lines", total)
	}
	checkSame(t, fileLines(t, f.dir), byID)
}

// gz files are read decompressed, from an offset in the uncompressed
// stream.
func TestOpenLinesGzip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.log.gz")
	out, _ := os.Create(p)
	zw := gzip.NewWriter(out)
	io.WriteString(zw, "one\ntwo\n")
	zw.Close()
	out.Close()
	r, err := accesslog.OpenLines(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	if string(b) != "one\ntwo\n" {
		t.Fatalf("%q", b)
	}
	first, err := accesslog.FirstLine(p)
	if err != nil || string(first) != "one\n" {
		t.Fatalf("first line %q, %v", first, err)
	}
}

// With Kafka unreachable, retention (keep_files: 1) deletes no closed file,
// since none is shipped, and the lag counts every line written; serving
// (appending) does not wait for Kafka.
func TestRetentionKeepsUnshippedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode with the other shipper tests")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	f := &fixture{t: t, dir: t.TempDir(), topic: "none", broker: &kafkatest.Broker{Addr: dead},
		fo: accesslog.FileOptions{MaxSize: 64 << 10, KeepFiles: 1}}
	f.open()
	f.appendN(0, 3000, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	names, _ := accesslog.ClosedFiles(f.dir, "access.log", false)
	if rot := f.fs.Rotations(); rot < 3 || len(names) < int(rot) {
		t.Fatalf("%d rotations, %d closed files left: retention deleted unshipped files", rot, len(names))
	}
	if st := f.ship.Stats(); st.Lag != 3000 || st.Lines != 0 {
		t.Fatalf("stats with Kafka unreachable: %+v", st)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = f.ship.Close(sctx) // not acknowledged: an error, and nothing saved as shipped
	st, err := loadState(f.ship.opt.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range st {
		if fs.Lines != 0 || fs.Done {
			t.Fatalf("state records progress Kafka never acknowledged: %+v", *fs)
		}
	}
}

func TestCodec(t *testing.T) {
	for _, name := range []string{"lz4", "zstd", "snappy", "gzip", "none"} {
		if _, err := Codec(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Codec("brotli"); err == nil {
		t.Error("an unknown codec was taken")
	}
}
