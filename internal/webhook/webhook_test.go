package webhook

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"tsubame/internal/h2call"
	"tsubame/internal/h2call/fakeapi"
	"tsubame/internal/store/memory"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const testSecret = "channel-secret-for-tests"

func sign(body string) string {
	m := hmac.New(sha256.New, []byte(testSecret))
	m.Write([]byte(body))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// A vector computed independently (openssl dgst -sha256 -hmac ... | base64).
func TestSignatureVectors(t *testing.T) {
	body := []byte(`{"destination":"U0123456789abcdef","events":[]}`)
	const good = "DUCSdTUm24b98iSmcIx08flSO1sWOz0Q8Uz3SBD7M+c="
	if err := VerifyLINE([]byte(testSecret), body, good); err != nil {
		t.Fatalf("good signature refused: %v", err)
	}
	tampered := []byte(`{"destination":"U0123456789abcdeF","events":[]}`)
	for name, c := range map[string]struct {
		secret, body []byte
		sig          string
	}{
		"missing":         {[]byte(testSecret), body, ""},
		"wrong":           {[]byte(testSecret), body, "AUCSdTUm24b98iSmcIx08flSO1sWOz0Q8Uz3SBD7M+c="},
		"tampered body":   {[]byte(testSecret), tampered, good},
		"not base64":      {[]byte(testSecret), body, "***"},
		"truncated":       {[]byte(testSecret), body, good[:20]},
		"other secret":    {[]byte("another"), body, good},
		"no secret known": {nil, body, good},
	} {
		if err := VerifyLINE(c.secret, c.body, c.sig); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: VerifyLINE = %v, want ErrSignature", name, err)
		}
	}
}

func newProcessor(t *testing.T, opt Options) (*Processor, *memory.Store) {
	t.Helper()
	store := memory.New()
	opt.Results = store
	opt.Logger = quiet
	if opt.Platforms == nil {
		opt.Platforms = []Platform{NewLINE(testSecret)}
	}
	if opt.DeadLetterPath == "" {
		opt.DeadLetterPath = filepath.Join(t.TempDir(), "dead.jsonl")
	}
	p, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p, store
}

// header is a request's header in tests.
type header map[string]string

func (h header) Peek(key string) []byte { return []byte(h[key]) }

func callback(r *Receiver, body []byte) (int, []byte) { return r.Serve(SourceCallback, body, header{}) }

func line(r *Receiver, body []byte, signature string) (int, []byte) {
	return r.Serve(SourceLINE, body, header{"X-Line-Signature": signature})
}

func lineBodyJSON(ids ...string) string {
	var ev []string
	for _, id := range ids {
		ev = append(ev, fmt.Sprintf(`{"type":"message","mode":"active","timestamp":1,"webhookEventId":%q,"replyToken":"rt-%s",
			"deliveryContext":{"isRedelivery":false},"source":{"type":"user","userId":"U1"},
			"message":{"id":"m-%s","type":"text","text":"hello %s"}}`, id, id, id, id))
	}
	ev = append(ev, `{"type":"follow","webhookEventId":"f1","replyToken":"x","timestamp":1}`)
	return `{"destination":"U0123456789abcdef","events":[` + strings.Join(ev, ",") + `]}`
}

// answerCase is a request to a Receiver: the answer it must get, and the
// messages accepted in all after it.
type answerCase struct {
	name       string
	status     int
	body       string
	do         func() (int, []byte)
	wantQueued uint64
}

// checkAnswers makes each request in turn and checks its answer (always
// JSON) and what the processor took.
func checkAnswers(t *testing.T, p *Processor, cases []answerCase) {
	t.Helper()
	for _, c := range cases {
		status, body := c.do()
		if status != c.status || (c.body != "" && string(body) != c.body) {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, body, c.status, c.body)
		}
		if !json.Valid(body) {
			t.Errorf("%s: body is not JSON: %s", c.name, body)
		}
		if got := p.Stats().Accepted; got != c.wantQueued {
			t.Errorf("%s: %d accepted in all, want %d", c.name, got, c.wantQueued)
		}
	}
}

func TestReceiverAnswers(t *testing.T) {
	// Processing waits until the test ends, so the queue only fills.
	hold := make(chan struct{})
	defer close(hold)
	p, _ := newProcessor(t, Options{QueueSize: 8, MaxInFlight: 1, Handle: func(ctx context.Context, m *Message) error {
		<-hold
		return nil
	}})
	r := NewReceiver(p, 4096, quiet)
	cases := []answerCase{
		{"callback string", 200, `{"ok":"ok"}`, func() (int, []byte) { return callback(r, []byte(`{"messages":"1,2,3"}`)) }, 3},
		{"callback array", 200, `{"ok":"ok"}`, func() (int, []byte) { return callback(r, []byte(`{"messages":["a","b"]}`)) }, 5},
		{"callback malformed", 400, "", func() (int, []byte) { return callback(r, []byte(`{"messages":`)) }, 5},
		{"callback wrong type", 400, "", func() (int, []byte) { return callback(r, []byte(`{"messages":42}`)) }, 5},
		{"callback unknown field", 400, "", func() (int, []byte) { return callback(r, []byte(`{"messages":"1","x":1}`)) }, 5},
		{"callback oversized", 413, "", func() (int, []byte) {
			return callback(r, []byte(`{"messages":"`+strings.Repeat("a", 5000)+`"}`))
		}, 5},
		{"callback queue full, nothing queued", 503, "", func() (int, []byte) { return callback(r, []byte(`{"messages":"1,2,3,4,5,6"}`)) }, 5},
		{"line connectivity check", 200, `{}`, func() (int, []byte) {
			b := `{"destination":"U0123456789abcdef","events":[]}`
			return line(r, []byte(b), sign(b))
		}, 5},
		{"line missing signature", 401, "", func() (int, []byte) { return line(r, []byte(lineBodyJSON("e1")), "") }, 5},
		{"line bad signature", 401, "", func() (int, []byte) { return line(r, []byte(lineBodyJSON("e1")), sign("other")) }, 5},
		{"line malformed but signed", 400, "", func() (int, []byte) { return line(r, []byte(`{"events":[`), sign(`{"events":[`)) }, 5},
		{"line signed (two texts and a follow)", 200, `{}`, func() (int, []byte) { b := lineBodyJSON("e1", "e2"); return line(r, []byte(b), sign(b)) }, 8},
	}
	checkAnswers(t, p, cases)
	p2, _ := newProcessor(t, Options{Platforms: []Platform{}})
	if NewReceiver(p2, 4096, quiet).Enabled(SourceLINE) {
		t.Fatal("LINE enabled without its platform")
	}
	if status, _ := line(NewReceiver(p2, 4096, quiet), []byte(`{}`), sign(`{}`)); status != 404 {
		t.Fatal("LINE served without its platform")
	}
}

// Every message is processed exactly once through the real API client,
// against a fake API that answers after 200–300 ms, and recorded in the store.
func TestProcessesEachMessageOnceThroughTheAPI(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MinDelay: 200 * time.Millisecond, MaxDelay: 300 * time.Millisecond, Token: "tok", RecordTexts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, store := newProcessor(t, Options{QueueSize: 5000, MaxInFlight: 2000, API: APIOptions{URL: api.URL, Token: "tok", H2C: true}})
	r := NewReceiver(p, 1<<20, quiet)
	for i := range 200 {
		texts := make([]string, 10)
		for j := range texts {
			texts[j] = fmt.Sprintf("%d-%d", i, j)
		}
		body, _ := json.Marshal(map[string]any{"messages": strings.Join(texts, ",")})
		if status, b := callback(r, body); status != 200 {
			t.Fatalf("callback %d: %d %s", i, status, b)
		}
	}
	start := time.Now()
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	distinct, maxAttempts := api.Keys()
	if st.Accepted != 2000 || st.Processed != 2000 || st.Failed != 0 || distinct != 2000 || maxAttempts != 1 || api.Bad() != 0 {
		t.Fatalf("stats %+v; API saw %d keys (max %d attempts), %d bad", st, distinct, maxAttempts, api.Bad())
	}
	for text, n := range api.Texts() {
		if n != 1 {
			t.Fatalf("text %q reached the API %d times", text, n)
		}
	}
	if n, _ := store.CountResults(context.Background()); n != 2000 {
		t.Fatalf("%d results recorded", n)
	}
	// 2000 messages of 200–300 ms each, 2000 at once: about one delay, not 2000.
	t.Logf("2000 messages drained in %v; peak %d calls in flight", time.Since(start), api.PeakInFlight())
}

// transports runs f over HTTP/1.1 (net/http) and HTTP/2 (the event-driven client).
func transports(t *testing.T, f func(t *testing.T, h2c bool)) {
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2c"}[h2c], func(t *testing.T) { f(t, h2c) })
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	transports(t, func(t *testing.T, h2c bool) {
		api, err := fakeapi.Start(fakeapi.Options{FailFirst: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		p, _ := newProcessor(t, Options{API: APIOptions{URL: api.URL, H2C: h2c, Retries: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
		if err := p.EnqueueTexts([]string{"a", "b", "c"}); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := p.Stats()
		if _, maxAttempts := api.Keys(); st.Processed != 3 || st.Retries != 6 || maxAttempts != 3 || st.APICalls != 9 {
			t.Fatalf("stats %+v, max attempts %d", st, maxAttempts)
		}
	})
}

func readDeadLetters(t *testing.T, path string) []deadLetter {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []deadLetter
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d deadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("dead letter %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	return out
}

// A permanent refusal is not retried; the message is dead-lettered.
func TestPermanentFailureDeadLettered(t *testing.T) {
	transports(t, func(t *testing.T, h2c bool) {
		api, err := fakeapi.Start(fakeapi.Options{Reject: true})
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		dl := filepath.Join(t.TempDir(), "dead.jsonl")
		p, _ := newProcessor(t, Options{DeadLetterPath: dl, API: APIOptions{URL: api.URL, H2C: h2c, Retries: 3}})
		if err := p.EnqueueTexts([]string{"x", "y"}); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := p.Stats(); st.Failed != 2 || st.Retries != 0 || api.Calls() != 2 {
			t.Fatalf("stats %+v, %d calls", st, api.Calls())
		}
		got := readDeadLetters(t, dl)
		if len(got) != 2 || got[0].Attempts != 1 || !strings.Contains(got[0].Error, "400") {
			t.Fatalf("dead letters %+v", got)
		}
	})
}

// A call slower than api.timeout is cut (its stream reset), retried, and
// dead-lettered after the last retry.
func TestAPITimeout(t *testing.T) {
	transports(t, func(t *testing.T, h2c bool) {
		api, err := fakeapi.Start(fakeapi.Options{MinDelay: 2 * time.Second, MaxDelay: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		dl := filepath.Join(t.TempDir(), "dead.jsonl")
		p, _ := newProcessor(t, Options{DeadLetterPath: dl, API: APIOptions{URL: api.URL, H2C: h2c, Timeout: 100 * time.Millisecond,
			Retries: 1, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}})
		if err := p.EnqueueTexts([]string{"slow"}); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Without the timeout both attempts would succeed after 2 s: the
		// dead letter and its deadline error are the proof, not a clock.
		got := readDeadLetters(t, dl)
		if st := p.Stats(); st.Failed != 1 || st.APICalls != 2 || len(got) != 1 || got[0].Attempts != 2 ||
			!strings.Contains(got[0].Error, "deadline") {
			t.Fatalf("stats %+v, dead letters %+v", st, got)
		}
		if api.Calls() != 2 {
			t.Errorf("the API saw %d calls, want 2", api.Calls())
		}
	})
}

// Over HTTP/2, thousands of calls wait on a slow API at once without a
// goroutine each, the server's stream limit is kept, and every message is
// delivered once.
func TestHTTP2CallsInFlightCostNoGoroutines(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MinDelay: 500 * time.Millisecond, MaxDelay: 700 * time.Millisecond, MaxStreams: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, store := newProcessor(t, Options{QueueSize: 20000, MaxInFlight: 8000,
		API: APIOptions{URL: api.URL, H2C: true, H2Conns: 8}})
	base := runtime.NumGoroutine()
	texts := make([]string, 1000)
	for i := range 8 {
		for j := range texts {
			texts[j] = fmt.Sprintf("%d-%d", i, j)
		}
		if err := p.EnqueueTexts(texts); err != nil {
			t.Fatal(err)
		}
	}
	// At most 8 connections × 500 streams are in flight; the rest wait.
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().InFlight < 8000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if g := runtime.NumGoroutine() - base; g > 200 {
		t.Errorf("%d goroutines more with 8000 messages in flight", g)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	distinct, maxAttempts := api.Keys()
	if st.Processed != 8000 || st.Failed != 0 || distinct != 8000 || maxAttempts != 1 || api.Bad() != 0 {
		t.Fatalf("stats %+v; API saw %d keys (max %d attempts), %d bad", st, distinct, maxAttempts, api.Bad())
	}
	if peak := api.PeakInFlight(); peak > 8*500 || peak < 1000 {
		t.Errorf("peak %d calls at the API, want 1000..4000 (8 connections × 500 streams)", peak)
	}
	if n, _ := store.CountResults(context.Background()); n != 8000 {
		t.Fatalf("%d results recorded", n)
	}
}

// The API going away mid-flight fails the calls on the connection; they are
// retried on a new one, or dead-lettered when there is none.
func TestHTTP2ConnectionLost(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MinDelay: time.Second, MaxDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	p, _ := newProcessor(t, Options{DeadLetterPath: dl, API: APIOptions{URL: api.URL, H2C: true, Retries: 2,
		Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	if err := p.EnqueueTexts([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	_ = api.Close() // connections dropped, nothing listens any more
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := readDeadLetters(t, dl)
	if st := p.Stats(); st.Failed != 3 || len(got) != 3 || st.APICalls != 9 {
		t.Fatalf("stats %+v, dead letters %+v", st, got)
	}
}

// Past Close's deadline, calls still out over HTTP/2 and retries waiting
// are dead-lettered at once: none is lost, none waits for the API.
func TestHTTP2DrainDeadline(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MinDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	p, _ := newProcessor(t, Options{DeadLetterPath: dl, API: APIOptions{URL: api.URL, H2C: true}})
	texts := make([]string, 500)
	for i := range texts {
		texts[i] = fmt.Sprint(i)
	}
	if err := p.EnqueueTexts(texts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the abort every call would be answered: failed messages
	// (dead-lettered at the deadline) are the proof.
	st := p.Stats()
	dead := readDeadLetters(t, dl)
	if st.Processed+st.Failed != 500 || uint64(len(dead)) != st.Failed || st.Processed == 0 || st.Failed == 0 {
		t.Fatalf("stats %+v, %d dead letters", st, len(dead))
	}
	t.Logf("processed %d, dead-lettered %d at the deadline", st.Processed, st.Failed)
}

// A panic in one message is contained: the others are processed.
func TestPanicIsolation(t *testing.T) {
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	p, _ := newProcessor(t, Options{DeadLetterPath: dl, Handle: func(_ context.Context, m *Message) error {
		if m.Text == "boom" {
			panic("bot logic exploded")
		}
		return nil
	}})
	if err := p.EnqueueTexts([]string{"1", "boom", "2", "boom", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Processed != 3 || st.Panics != 2 || st.Failed != 2 {
		t.Fatalf("stats %+v", st)
	}
	if got := readDeadLetters(t, dl); len(got) != 2 || !strings.Contains(got[0].Error, "panic: bot logic exploded") {
		t.Fatalf("dead letters %+v", got)
	}
}

// Close drains what it can by its deadline; the rest is dead-lettered with
// exact counts: processed + dead-lettered == accepted.
func TestDrainOnShutdown(t *testing.T) {
	var handled atomic.Int64
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	p, _ := newProcessor(t, Options{DeadLetterPath: dl, MaxInFlight: 10, Handle: func(ctx context.Context, m *Message) error {
		select {
		case <-time.After(50 * time.Millisecond):
			handled.Add(1)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	texts := make([]string, 100)
	for i := range texts {
		texts[i] = fmt.Sprint(i)
	}
	for range 5 {
		if err := p.EnqueueTexts(texts); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	dead := readDeadLetters(t, dl)
	if st.Accepted != 500 || st.Processed+st.Failed != 500 || uint64(len(dead)) != st.Failed || st.Processed != uint64(handled.Load()) {
		t.Fatalf("stats %+v, %d dead letters, %d handled", st, len(dead), handled.Load())
	}
	if st.Processed == 0 || st.Failed == 0 {
		t.Fatalf("want some processed and some left at the deadline: %+v", st)
	}
	if err := p.EnqueueTexts([]string{"late"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after Close: %v", err)
	}
	t.Logf("drained %d, dead-lettered %d at the deadline", st.Processed, st.Failed)
}

// LINE redelivers: an event id seen within the window is processed once.
func TestDedupe(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	p, _ := newProcessor(t, Options{Handle: func(_ context.Context, m *Message) error {
		mu.Lock()
		seen[m.ID]++
		mu.Unlock()
		return nil
	}})
	r := NewReceiver(p, 1<<20, quiet)
	b1 := lineBodyJSON("ev1", "ev2")
	b2 := lineBodyJSON("ev2", "ev3", "ev3")
	for _, b := range []string{b1, b2, b1} {
		if status, body := line(r, []byte(b), sign(b)); status != http.StatusOK {
			t.Fatalf("%d %s", status, body)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each body ends with the follow event f1: taken once, like the texts.
	if len(seen) != 4 || seen["ev1"] != 1 || seen["ev2"] != 1 || seen["ev3"] != 1 || seen["f1"] != 1 {
		t.Fatalf("processed %v", seen)
	}
	if st := p.Stats(); st.Duplicates != 6 || st.Accepted != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// A request whose messages do not all fit is refused whole (503), and a
// refused LINE event is not remembered as seen, so its redelivery is taken.
func TestQueueFullAllOrNothing(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	p, _ := newProcessor(t, Options{QueueSize: 5, MaxInFlight: 1, Handle: func(ctx context.Context, m *Message) error {
		<-release
		return nil
	}})
	// Registered after the processor's: a failure does not leave Close waiting.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	r := NewReceiver(p, 1<<20, quiet)
	if status, _ := callback(r, []byte(`{"messages":"1,2,3"}`)); status != 200 {
		t.Fatal(status)
	}
	time.Sleep(50 * time.Millisecond) // one message is taken into processing
	b := lineBodyJSON("a", "b", "c", "d")
	if status, _ := line(r, []byte(b), sign(b)); status != http.StatusServiceUnavailable {
		t.Fatalf("5 events (4 texts and a follow) into a queue with room for 3: %d", status)
	}
	if st := p.Stats(); st.Accepted != 3 || st.Rejected != 5 || st.Queued != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Filled up: a request is refused before it is even read.
	if status, _ := callback(r, []byte(`{"messages":"4,5,6"}`)); status != 200 {
		t.Fatal(status)
	}
	if status, _ := callback(r, []byte(`not even json`)); status != http.StatusServiceUnavailable {
		t.Fatalf("a request against a full queue: %d", status)
	}
	if st := p.Stats(); st.Refused != 1 || st.Accepted != 6 {
		t.Fatalf("stats %+v", st)
	}
	releaseOnce.Do(func() { close(release) })
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Processed != 6 {
		if time.Now().After(deadline) {
			t.Fatal("not drained")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if status, _ := line(r, []byte(b), sign(b)); status != 200 {
		t.Fatalf("redelivery after room was made: %d", status)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Processed != 11 || st.Duplicates != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func FuzzParseCallback(f *testing.F) {
	f.Add([]byte(`{"messages":"1,2,3"}`))
	f.Add([]byte(`{"messages":["a",""]}`))
	f.Add([]byte(`{"messages":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		texts, err := ParseCallback(body)
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if len(texts) > MaxMessagesPerRequest {
			t.Fatalf("%d messages accepted", len(texts))
		}
		for _, s := range texts {
			if s == "" || len(s) > MaxTextBytes {
				t.Fatalf("bad text accepted: %q", s)
			}
		}
	})
}

// /callback message ids sort in the order they were made.
func TestMessageIDsSortInOrder(t *testing.T) {
	p, _ := newProcessor(t, Options{})
	prev := p.messageID()
	for range 5000 {
		id := p.messageID()
		if id <= prev || len(id) != len(prev) {
			t.Fatalf("%q after %q", id, prev)
		}
		prev = id
	}
}

func TestResultRecords(t *testing.T) {
	// What is stored for each message, whichever way it went: its source,
	// the attempts it took (FailFirst: 1 makes it two), when it arrived and
	// when it was done, under its id (given when done for /callback).
	transports(t, func(t *testing.T, h2c bool) {
		api, err := fakeapi.Start(fakeapi.Options{FailFirst: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		p, store := newProcessor(t, Options{API: APIOptions{URL: api.URL, H2C: h2c, Retries: 3, Backoff: time.Millisecond}})
		before := time.Now().UTC()
		if err := p.EnqueueTexts([]string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(SourceLINE, []Message{{ID: "ev1", ReplyToken: "rt", Text: "c"}}); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UTC()
		ctx := context.Background()
		if n, _ := store.CountResults(ctx); n != 3 {
			t.Fatalf("%d results, want 3", n)
		}
		for id, source := range map[string]Source{p.messageIDAt(1): SourceCallback, p.messageIDAt(2): SourceCallback, "ev1": SourceLINE} {
			b, err := store.GetResult(ctx, id)
			if err != nil {
				t.Fatalf("result %s: %v", id, err)
			}
			var r struct {
				Status              string
				Source              Source
				Attempts            int
				Received, Processed time.Time
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("result %s: %v: %s", id, err, b)
			}
			if r.Status != "ok" || r.Source != source || r.Attempts != 2 ||
				r.Received.Before(before) || r.Processed.Before(r.Received) || r.Processed.After(after) {
				t.Errorf("result %s = %s; want source %s, 2 attempts, received after %v, processed by %v", id, b, source, before, after)
			}
		}
	})
}

func TestTaskLayout(t *testing.T) {
	// task's comment explains why its size matters.
	if size := unsafe.Sizeof(task{}); size != taskSize {
		t.Errorf("task is %d bytes, its layout counts on %d", size, taskSize)
	}
	if end := unsafe.Offsetof(task{}.call) + h2call.AnswerReads; end > 128 {
		t.Errorf("what an answer reads ends at byte %d of task, past the first 128", end)
	}
}

// Over HTTP/2 a call that waits for a stream (the server allows one at a
// time) times out like one on the wire: its timeout runs from the call.
func TestHTTP2TimeoutWaitingForAStream(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MaxStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	dl := filepath.Join(t.TempDir(), "dead.jsonl")
	p, _ := newProcessor(t, Options{DeadLetterPath: dl, API: APIOptions{URL: api.URL, H2C: true, H2Conns: 1,
		Timeout: 300 * time.Millisecond}})
	// A first message opens the connection and learns the server's limit.
	if err := p.EnqueueTexts([]string{"warm"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); p.Stats().Processed != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first message was not processed: %+v", p.Stats())
		}
	}
	api.SetDelay(5*time.Second, 5*time.Second)
	if err := p.EnqueueTexts([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Without the timeouts the three calls would be answered after 5 s:
	// three dead letters are the proof.
	got := readDeadLetters(t, dl)
	if st := p.Stats(); st.Failed != 3 || len(got) != 3 {
		t.Fatalf("stats %+v, dead letters %+v", st, got)
	}
	for _, d := range got {
		if !strings.Contains(d.Error, "deadline") {
			t.Errorf("dead letter %+v: want a deadline error", d)
		}
	}
	// One stream at a time: at least one call timed out before it had one.
	if calls := api.Calls(); calls > 3 {
		t.Errorf("the API saw %d calls, want at most 3 (1 + 2)", calls)
	}
}

// lineEvents are the event types LINE documents (Messaging API reference,
// "Webhook Event Objects"), each shaped as LINE sends it: the event's own
// object beside the common fields, a reply token where LINE gives one.
var lineEvents = []struct {
	id, json string
	event    string
	replied  bool // a reply call is made
}{
	{"text", `"type":"message","replyToken":"rt-text","message":{"id":"1","type":"text","quoteToken":"q","text":"hello"}`, "message.text", true},
	{"standby-text", `"type":"message","mode":"standby","message":{"id":"2","type":"text","quoteToken":"q","text":"hi"}`, "message.text", false},
	{"image", `"type":"message","replyToken":"rt-image","message":{"id":"3","type":"image","quoteToken":"q","contentProvider":{"type":"line"}}`, "message.image", false},
	{"video", `"type":"message","replyToken":"rt-video","message":{"id":"4","type":"video","duration":60000,"contentProvider":{"type":"line"}}`, "message.video", false},
	{"audio", `"type":"message","replyToken":"rt-audio","message":{"id":"5","type":"audio","duration":60000,"contentProvider":{"type":"line"}}`, "message.audio", false},
	{"file", `"type":"message","replyToken":"rt-file","message":{"id":"6","type":"file","fileName":"a.pdf","fileSize":2138}`, "message.file", false},
	{"location", `"type":"message","replyToken":"rt-loc","message":{"id":"7","type":"location","title":"t","address":"a","latitude":35.65,"longitude":139.70}`, "message.location", false},
	{"sticker", `"type":"message","replyToken":"rt-sticker","message":{"id":"8","type":"sticker","packageId":"1","stickerId":"1","stickerResourceType":"STATIC","keywords":["x"]}`, "message.sticker", false},
	{"unsend", `"type":"unsend","unsend":{"messageId":"325708"}`, "unsend", false},
	{"follow", `"type":"follow","replyToken":"rt-follow","follow":{"isUnblocked":false}`, "follow", false},
	{"unfollow", `"type":"unfollow"`, "unfollow", false},
	{"join", `"type":"join","replyToken":"rt-join"`, "join", false},
	{"leave", `"type":"leave"`, "leave", false},
	{"member-joined", `"type":"memberJoined","replyToken":"rt-mj","joined":{"members":[{"type":"user","userId":"U4"}]}`, "memberJoined", false},
	{"member-left", `"type":"memberLeft","left":{"members":[{"type":"user","userId":"U4"}]}`, "memberLeft", false},
	{"postback", `"type":"postback","replyToken":"rt-pb","postback":{"data":"action=buy&itemid=111","params":{"datetime":"2017-12-25T01:00"}}`, "postback", false},
	{"video-play-complete", `"type":"videoPlayComplete","replyToken":"rt-vpc","videoPlayComplete":{"trackingId":"track-id"}`, "videoPlayComplete", false},
	{"beacon", `"type":"beacon","replyToken":"rt-beacon","beacon":{"hwid":"d41d8cd98f","type":"enter"}`, "beacon", false},
	{"account-link", `"type":"accountLink","replyToken":"rt-al","link":{"result":"ok","nonce":"xxxxxxxxxxxxxxx"}`, "accountLink", false},
	{"things", `"type":"things","replyToken":"rt-things","things":{"deviceId":"t2c449c9d1","type":"link"}`, "things", false},
	{"membership", `"type":"membership","replyToken":"rt-ms","membership":{"type":"joined","membershipId":3189}`, "membership", false},
	{"activated", `"type":"activated","chatControl":{"expireAt":1588924800000}`, "activated", false},
	{"deactivated", `"type":"deactivated"`, "deactivated", false},
	{"bot-suspended", `"type":"botSuspended"`, "botSuspended", false},
	{"bot-resumed", `"type":"botResumed"`, "botResumed", false},
}

// Every event type LINE documents is taken and recorded with its type;
// only a text message with a reply token calls the reply endpoint, which
// refuses calls without one, as LINE's does.
func TestEveryLINEEventType(t *testing.T) {
	transports(t, func(t *testing.T, h2c bool) {
		api, err := fakeapi.Start(fakeapi.Options{ReplyEndpoint: true, RecordTexts: true})
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		p, store := newProcessor(t, Options{API: APIOptions{URL: api.URL, H2C: h2c}})
		r := NewReceiver(p, 1<<20, quiet)
		var events []string
		replies := 0
		for _, e := range lineEvents {
			events = append(events, fmt.Sprintf(`{%s,"mode":"active","timestamp":1625665242211,"source":{"type":"user","userId":"U4af4980629"},"webhookEventId":"ev-%s","deliveryContext":{"isRedelivery":false}}`,
				e.json, e.id))
			if e.replied {
				replies++
			}
		}
		body := `{"destination":"xxxxxxxxxx","events":[` + strings.Join(events, ",") + `]}`
		if status, b := line(r, []byte(body), sign(body)); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := p.Stats()
		if st.Accepted != uint64(len(lineEvents)) || st.Processed != uint64(len(lineEvents)) || st.Failed != 0 {
			t.Fatalf("stats %+v for %d events", st, len(lineEvents))
		}
		if api.Calls() != int64(replies) || api.Bad() != 0 {
			t.Fatalf("%d calls (%d refused), want %d: only text messages with a reply token", api.Calls(), api.Bad(), replies)
		}
		for _, e := range lineEvents {
			b, err := store.GetResult(context.Background(), "ev-"+e.id)
			if err != nil {
				t.Fatalf("%s: %v", e.id, err)
			}
			var res struct {
				Event    string
				Attempts int
			}
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[e.replied]; res.Event != e.event || res.Attempts != want {
				t.Errorf("%s: recorded %s; want event %s, %d attempts", e.id, b, e.event, want)
			}
		}
	})
}

// A handler sees every event, with its type and reply token, and decides.
func TestLINEEventsReachTheHandler(t *testing.T) {
	var mu sync.Mutex
	got := map[string]Message{}
	p, _ := newProcessor(t, Options{Handle: func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.ID] = *m
		return nil
	}})
	r := NewReceiver(p, 1<<20, quiet)
	body := `{"destination":"x","events":[` +
		`{"type":"message","mode":"standby","timestamp":1,"source":{"type":"user","userId":"U1"},"webhookEventId":"a","deliveryContext":{"isRedelivery":false},"message":{"id":"1","type":"text","text":"hi"}},` +
		`{"type":"follow","mode":"active","timestamp":1,"source":{"type":"user","userId":"U1"},"webhookEventId":"b","replyToken":"rt-b","deliveryContext":{"isRedelivery":false},"follow":{"isUnblocked":true}}]}`
	if status, b := line(r, []byte(body), sign(body)); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := got["a"]; a.Event != "message.text" || a.Text != "hi" || a.ReplyToken != "" {
		t.Errorf("standby text: %+v", a)
	}
	if b := got["b"]; b.Event != "follow" || b.Text != "" || b.ReplyToken != "rt-b" {
		t.Errorf("follow: %+v", b)
	}
}

// Events LINE's reply endpoint would not accept are refused whole.
func TestLINEMalformedEvents(t *testing.T) {
	for name, ev := range map[string]string{
		"no id":        `{"type":"follow","replyToken":"x"}`,
		"no type":      `{"webhookEventId":"e1"}`,
		"odd type":     `{"type":"fol low","webhookEventId":"e1"}`,
		"message type": `{"type":"message","webhookEventId":"e1","message":{"id":"1"}}`,
		"long token":   `{"type":"follow","webhookEventId":"e1","replyToken":"` + strings.Repeat("x", 300) + `"}`,
	} {
		if _, err := ParseLINE([]byte(`{"events":[` + ev + `]}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
