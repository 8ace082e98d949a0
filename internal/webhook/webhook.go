// Package webhook receives chat-bot webhooks, answers at once, and
// processes each message concurrently: a call to the platform's API
// (retried, bounded in concurrency), then a result record in the store.
//
// A chat service is a Platform (platform.go): /callback, as the Phoenix
// LINE-bot write-up had it (callback.go), the LINE Messaging API (line.go)
// and the Slack Events API (slack.go). The Receiver (receiver.go) verifies
// and reads requests through them; the Processor (this file) queues,
// dedupes, calls, retries (api.go), records and dead-letters
// (deadletter.go) the same way for all.
//
// Memory and goroutines are bounded: a request is accepted only if all its
// messages fit the queue (else 503, nothing queued), and at most
// MaxInFlight messages are being processed. When the API speaks HTTP/2
// (https, or http with h2c) a message waiting on it is a stream of the
// event-driven client of internal/h2call, a 256-byte task and no goroutine, so
// external latency costs neither throughput nor much memory; over HTTP/1.1
// each message in flight holds a goroutine and a connection. A panic or error in one message never
// affects another; a message that fails after the last retry goes to the
// dead-letter file, and so does whatever is left when Close's deadline
// passes: nothing accepted is dropped.
//
// It must not import the listeners, config or the store backends (arch_test.go).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/maypok86/otter/v2"
	"golang.org/x/net/http2/hpack"

	"tsubame"
	"tsubame/internal/h2call"
)

// ResultStore keeps the outcome of each processed webhook message under the
// message's id; writing the same id again replaces it, so a retried write is
// harmless. Implementations must be safe for concurrent use and should
// coalesce concurrent writes.
type ResultStore interface {
	PutResult(ctx context.Context, id string, result []byte) error
	// PutResults writes a batch of results in one store operation (one
	// transaction, one command): all of them, or with an error none is
	// known to be written.
	PutResults(ctx context.Context, results []tsubame.Result) error
	// GetResult returns the stored result, or an ENOTFOUND error.
	GetResult(ctx context.Context, id string) ([]byte, error)
	// CountResults returns how many results are stored.
	CountResults(ctx context.Context) (int, error)
}

// Options configure a Processor.
type Options struct {
	QueueSize    int           // messages waiting; default 100000
	MaxInFlight  int           // messages processed at once; default 600000 over HTTP/2, 20000 otherwise
	DedupeWindow time.Duration // default 10m
	DedupeMax    int           // default 1,000,000
	// API is the external API the callback and LINE answer through (LINE
	// reply-style); an empty URL skips the call. A platform with an API of
	// its own (OwnAPI) takes its timeouts, retries and bounds.
	API APIOptions
	// Platforms are the platforms served besides Callback, which always is.
	Platforms []Platform
	// Results records each processed message; nil skips it.
	Results          ResultStore
	StoreConcurrency int    // result batches written at once; default 2
	DeadLetterPath   string // required
	Logger           *slog.Logger
	// Handle, if set, replaces the external API call (for embedding and tests).
	Handle func(ctx context.Context, m *Message) error
}

// Defaults are the values zero options take (MaxInFlight, the API's
// connection bounds and Retries excepted: those depend on the API, and
// zero retries means none). The configuration's defaults (webhook: in
// defaults.yaml) are checked against them.
var Defaults = Options{
	QueueSize:        100000,
	DedupeWindow:     10 * time.Minute,
	DedupeMax:        1000000,
	StoreConcurrency: 2,
	API:              APIOptions{Timeout: 5 * time.Second, Backoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second},
}

func (o *Options) setDefaults() {
	d := Defaults
	if o.QueueSize <= 0 {
		o.QueueSize = d.QueueSize
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 20000
		if o.Handle == nil && o.API.URL != "" && (o.API.H2C || strings.HasPrefix(o.API.URL, "https://")) {
			o.MaxInFlight = 600000
		}
	}
	if o.DedupeWindow <= 0 {
		o.DedupeWindow = d.DedupeWindow
	}
	if o.DedupeMax <= 0 {
		o.DedupeMax = d.DedupeMax
	}
	if o.StoreConcurrency <= 0 {
		o.StoreConcurrency = d.StoreConcurrency
	}
	if o.API.Timeout <= 0 {
		o.API.Timeout = d.API.Timeout
	}
	if o.API.Backoff <= 0 {
		o.API.Backoff = d.API.Backoff
	}
	if o.API.MaxBackoff < o.API.Backoff {
		o.API.MaxBackoff = max(d.API.MaxBackoff, o.API.Backoff)
	}
	if o.API.H2Conns <= 0 {
		o.API.H2Conns = min(max(2, o.MaxInFlight/1000), 256)
	}
	if o.API.MaxConns <= 0 {
		o.API.MaxConns = o.MaxInFlight
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Errors of Enqueue.
var (
	ErrQueueFull = errors.New("webhook queue is full")
	ErrClosed    = errors.New("webhook processor is stopping")
)

// Stats is a snapshot of a Processor's counters.
type Stats struct {
	Accepted   uint64 // messages queued
	Duplicates uint64 // LINE events dropped as already seen
	Rejected   uint64 // messages refused because the queue was full
	Refused    uint64 // requests refused unread because the queue was full
	Processed  uint64 // messages done successfully
	Retries    uint64 // API attempts repeated
	Failed     uint64 // messages written to the dead-letter file
	Panics     uint64 // messages whose processing panicked
	Queued     int    // messages waiting now
	InFlight   int    // messages being processed now
	APICalls   uint64 // API attempts made
	APITime    time.Duration
}

// Processor queues and processes messages. Create it with New; Close drains it.
type Processor struct {
	opt    Options
	routes []route // by task.route: Callback first, then Options.Platforms
	dedupe *otter.Cache[string, struct{}]
	dl     *deadLetters
	queue  chan *task
	sem    chan struct{}
	// recordQ carries processed messages to the batchers that write their
	// results; it has room for every message in flight, so it never blocks.
	recordQ  chan recordJob
	batchers sync.WaitGroup

	mu      sync.RWMutex // guards closed against Enqueue's send
	closed  bool
	reserve atomic.Int64 // messages queued or reserved

	runCtx     context.Context // cancelled at Close's deadline: in-flight work gives up
	cancelRun  context.CancelFunc
	dispatched chan struct{}
	inflight   sync.WaitGroup
	nInFlight  atomic.Int64
	seq        atomic.Uint64
	bootID     string

	accepted, duplicates, rejected, processed, retries, failed, panics, apiCalls, apiNanos atomic.Uint64
	refused                                                                                atomic.Uint64 // requests refused unread (queue full)

	retryMu   sync.Mutex
	retryWait map[*task]*time.Timer // HTTP/2 messages waiting to be sent again
	// finished carries HTTP/2 messages whose call ended to the workers that
	// record or dead-letter them. It has room for every message in flight,
	// so a completion callback never blocks.
	finished chan finishedMsg
	workers  sync.WaitGroup
}

type finishedMsg struct {
	t   *task
	err error
}

// route is how one platform's messages are answered.
type route struct {
	platform Platform
	api      *apiClient     // net/http: HTTP/1.1, and the fallback when a TLS API refuses HTTP/2; nil: no API
	h2       *h2call.Client // event-driven HTTP/2, when the API speaks it and is judged by status
}

// newRoutes makes a route per platform. Platforms on the same API with the
// same retry header share its clients (and so their connections).
func newRoutes(opt *Options) ([]route, error) {
	type clients struct {
		api *apiClient
		h2  *h2call.Client
	}
	shared := map[string]clients{} // by retry header: the API is opt.API for all
	var routes []route
	for _, pl := range append([]Platform{Callback{}}, opt.Platforms...) {
		if slices.ContainsFunc(routes, func(r route) bool { return r.platform.Source() == pl.Source() }) {
			return routes, fmt.Errorf("webhook: platform %q given twice", pl.Source())
		}
		r := route{platform: pl}
		if opt.Handle != nil {
			routes = append(routes, r)
			continue
		}
		api, keyHeader := opt.API, pl.RetryHeader()
		if own, ok := pl.(OwnAPI); ok {
			r.api = newAPIClient(own.API(opt.API), keyHeader, own.CheckAnswer)
			routes = append(routes, r)
			continue
		}
		if api.URL == "" {
			routes = append(routes, r)
			continue
		}
		if c, ok := shared[keyHeader]; ok {
			r.api, r.h2 = c.api, c.h2
			routes = append(routes, r)
			continue
		}
		r.api = newAPIClient(api, keyHeader, nil)
		if api.H2C || strings.HasPrefix(api.URL, "https://") {
			header := []hpack.HeaderField{{Name: "content-type", Value: "application/json; charset=utf-8"}}
			if api.Token != "" {
				header = append(header, hpack.HeaderField{Name: "authorization", Value: "Bearer " + api.Token, Sensitive: true})
			}
			var err error
			if r.h2, err = h2call.New(api.URL, api.H2C, api.H2Conns, header, strings.ToLower(keyHeader), api.Timeout, opt.Logger); err != nil {
				return routes, err
			}
		}
		shared[keyHeader] = clients{r.api, r.h2}
		routes = append(routes, r)
	}
	return routes, nil
}

// anyH2 reports whether a route calls its API over the event-driven client.
func (p *Processor) anyH2() bool {
	return slices.ContainsFunc(p.routes, func(r route) bool { return r.h2 != nil })
}

// Platform returns the platform of source, or nil.
func (p *Processor) Platform(source Source) Platform {
	if i, ok := p.routeOf(source); ok {
		return p.routes[i].platform
	}
	return nil
}

func (p *Processor) routeOf(source Source) (uint8, bool) {
	for i := range p.routes {
		if p.routes[i].platform.Source() == source {
			return uint8(i), true
		}
	}
	return 0, false
}

// New starts a Processor.
func New(opt Options) (*Processor, error) {
	opt.setDefaults()
	if opt.DeadLetterPath == "" {
		return nil, errors.New("webhook: a dead-letter path is required")
	}
	dl, err := openDeadLetters(opt.DeadLetterPath)
	if err != nil {
		return nil, err
	}
	dd, err := otter.New(&otter.Options[string, struct{}]{
		MaximumSize:      opt.DedupeMax,
		ExpiryCalculator: otter.ExpiryWriting[string, struct{}](opt.DedupeWindow),
	})
	if err != nil {
		dl.close()
		return nil, err
	}
	p := &Processor{
		opt:        opt,
		dedupe:     dd,
		dl:         dl,
		queue:      make(chan *task, opt.QueueSize),
		sem:        make(chan struct{}, opt.MaxInFlight),
		dispatched: make(chan struct{}),
		bootID:     strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	if p.routes, err = newRoutes(&opt); err != nil {
		p.closeClients()
		dl.close()
		return nil, err
	}
	if p.anyH2() {
		p.retryWait = map[*task]*time.Timer{}
		p.finished = make(chan finishedMsg, opt.MaxInFlight)
		for range failureWorkers {
			p.workers.Go(func() {
				for f := range p.finished {
					p.finishAsync(f.t, f.err)
				}
			})
		}
	}
	if opt.Results != nil {
		p.recordQ = make(chan recordJob, opt.MaxInFlight)
		for range opt.StoreConcurrency {
			p.batchers.Go(p.batcher)
		}
	}
	p.runCtx, p.cancelRun = context.WithCancel(context.Background())
	if p.anyH2() {
		// Past Close's deadline every call still out ends at once (and goes
		// to the dead-letter file).
		context.AfterFunc(p.runCtx, p.abortAsync)
	}
	go p.dispatch()
	return p, nil
}

// EnqueueTexts queues texts as /callback messages: all or none. Room is
// reserved before any message is made: a refused request (the queue full
// under a burst) costs no allocation.
func (p *Processor) EnqueueTexts(texts []string) error {
	now := time.Now().UTC()
	return p.enqueueN(len(texts), func(i int) *task {
		// The id is given when the message is done (see ensureID).
		return &task{anon: true, received: now.UnixNano(),
			msg: Message{Source: SourceCallback, Text: texts[i], RetryKey: uuid.New(), Received: now}}
	})
}

// Full reports whether the queue has no room at all, so that a receiver can
// refuse a request before reading it.
func (p *Processor) Full() bool {
	if p.reserve.Load() >= int64(p.opt.QueueSize) {
		p.refused.Add(1)
		return true
	}
	return false
}

// messageID names a /callback message: the process's boot id and a
// sequence number, fixed-width so that ids sort in the order they were
// given.
func (p *Processor) messageID() string { return p.messageIDAt(p.seq.Add(1)) }

// ensureID names a /callback message that has no id yet. Ids are given
// when messages are done (recorded, dead-lettered, or handed to Handle),
// not when they arrive: an API answers out of order, and results keyed in
// the order they are written append to the store's index instead of
// landing all over it (which cost four times as much per message).
func (p *Processor) ensureID(m *Message) {
	if m.ID == "" {
		m.ID = p.messageID()
	}
}

func (p *Processor) messageIDAt(n uint64) string {
	var b [64]byte
	var num [16]byte
	id := append(b[:0], p.bootID...)
	id = append(id, '-')
	seq := strconv.AppendUint(num[:0], n, 36)
	for range 12 - len(seq) {
		id = append(id, '0')
	}
	return string(append(id, seq...))
}

// Enqueue queues the messages of one request from source's platform: all
// or none. A message with an ID seen within the dedupe window is dropped
// (platforms redeliver); it returns how many were. Messages without an ID
// are given one when they are done.
func (p *Processor) Enqueue(source Source, msgs []Message) (dups int, err error) {
	ri, ok := p.routeOf(source)
	if !ok {
		return 0, fmt.Errorf("webhook: no platform %q", source)
	}
	now := time.Now().UTC()
	tasks := make([]*task, 0, len(msgs))
	var seen map[string]bool
	for i := range msgs {
		m := &msgs[i]
		if m.ID != "" {
			if seen == nil {
				seen = make(map[string]bool, len(msgs))
			}
			if seen[m.ID] {
				dups++
				continue
			}
			seen[m.ID] = true
			if _, ok := p.dedupe.GetIfPresent(m.ID); ok {
				dups++
				continue
			}
		}
		t := &task{route: ri, anon: m.ID == "", received: now.UnixNano(), msg: *m}
		t.msg.Source, t.msg.RetryKey, t.msg.Received = source, uuid.New(), now
		tasks = append(tasks, t)
	}
	if err := p.enqueueN(len(tasks), func(i int) *task { return tasks[i] }); err != nil {
		return 0, err
	}
	// Marked only once queued: a refused request is redelivered and must
	// not be taken for a duplicate. Two deliveries racing here both pass;
	// the per-id result record keeps that harmless.
	for _, t := range tasks {
		if !t.anon {
			p.dedupe.Set(t.msg.ID, struct{}{})
		}
	}
	p.duplicates.Add(uint64(dups))
	return dups, nil
}

// enqueueN reserves room for n messages, all or none, then queues build(i)
// for each.
func (p *Processor) enqueueN(n int, build func(i int) *task) error {
	if n == 0 {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	if p.reserve.Add(int64(n)) > int64(p.opt.QueueSize) {
		p.reserve.Add(-int64(n))
		p.rejected.Add(uint64(n))
		return ErrQueueFull
	}
	for i := range n {
		p.queue <- build(i) // never blocks: room was reserved
	}
	p.accepted.Add(uint64(n))
	return nil
}

// dispatch starts one goroutine per message, at most MaxInFlight at once.
func (p *Processor) dispatch() {
	defer close(p.dispatched)
	for t := range p.queue {
		p.sem <- struct{}{}
		p.reserve.Add(-1)
		p.inflight.Add(1)
		p.nInFlight.Add(1)
		if r := &p.routes[t.route]; r.h2 != nil && r.h2.Usable() && p.runCtx.Err() == nil {
			if body, err := r.platform.Reply(&t.msg); body != nil || err != nil {
				p.startAsync(t, body, err)
				continue
			}
		}
		go p.process(t)
	}
}

// release ends a message's time in flight.
func (p *Processor) release() {
	p.nInFlight.Add(-1)
	<-p.sem
	p.inflight.Done()
}

// panicked turns a panic r in m's processing into a dead letter.
func (p *Processor) panicked(m *Message, r any, attempts int) {
	p.ensureID(m)
	p.panics.Add(1)
	p.opt.Logger.Error("webhook message processing panicked", "id", m.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	p.deadLetter(m, fmt.Errorf("panic: %v", r), attempts)
}

// process handles t on its own goroutine (Handle, and the API over net/http).
func (p *Processor) process(t *task) {
	m := &t.msg
	attempts := 0
	defer p.release()
	defer func() {
		if r := recover(); r != nil {
			p.panicked(m, r, attempts)
		}
	}()
	ctx := p.runCtx
	var err error
	switch {
	case ctx.Err() != nil:
		err = errors.New("not processed before shutdown")
	case p.opt.Handle != nil:
		attempts = 1
		p.ensureID(m)
		err = p.opt.Handle(ctx, m)
	case p.routes[t.route].api != nil:
		r := &p.routes[t.route]
		var body []byte
		if body, err = r.platform.Reply(m); err != nil {
			err = Permanent(fmt.Errorf("cannot make the reply: %w", err))
		} else if body != nil { // else: nothing to answer, recorded as it is
			start := time.Now()
			attempts, err = r.api.call(ctx, m, body, func() { p.retries.Add(1) })
			p.apiCalls.Add(uint64(attempts))
			p.apiNanos.Add(uint64(time.Since(start)))
		}
	}
	p.complete(m, attempts, err)
}

// complete records m's result after a successful call, or dead-letters it.
func (p *Processor) complete(m *Message, attempts int, err error) {
	ctx := p.runCtx
	if err == nil {
		err = p.record(ctx, m, attempts)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted by shutdown: %w", err)
		}
		p.deadLetter(m, err, attempts)
		return
	}
	p.processed.Add(1)
}

// task is a message and its processing, one allocation from the request
// that brings it to its result. With a slow API each answer finds its task
// long gone from the CPU's caches, so everything the answer's path reads,
// up to the result batch, sits in the task's first 128 bytes (which a
// CPU fetches as one pair of cache lines: a task is 256 bytes, so in the
// 256-byte size class, aligned), and the message comes last.
type task struct {
	p        *Processor
	start    int64 // monotonic nanoseconds of the first call
	attempts int32
	route    uint8 // its platform's, in Processor.routes
	anon     bool  // a message without an ID: its id is given when it is done
	received int64 // msg.Received as Unix nanoseconds
	call     h2call.Call
	msg      Message // 256 bytes in all; see above
}

// taskSize is the size the layout of task counts on.
const taskSize = 256

// CallDone is how the HTTP/2 client says a call ended (h2call.Owner).
func (t *task) CallDone(status int, retryAfter time.Duration, err error) {
	t.p.onAsyncDone(t, status, retryAfter, err)
}

// startAsync sends t's reply body through the event-driven client; its
// completion callback carries it on (retry, record, dead letter) without
// a goroutine waiting in between.
func (p *Processor) startAsync(t *task, body []byte, err error) {
	if err != nil {
		err = Permanent(fmt.Errorf("cannot make the reply: %w", err))
		go func() { defer p.release(); p.complete(&t.msg, 0, err) }()
		return
	}
	t.p, t.start = p, h2call.Monotonic()
	t.call.Reset(t, t.msg.RetryKey, body)
	p.sendAsync(t)
}

func (p *Processor) sendAsync(t *task) {
	if p.runCtx.Err() != nil {
		p.finish(t, errors.New("not processed before shutdown"))
		return
	}
	t.attempts++
	p.apiCalls.Add(1)
	r := &p.routes[t.route]
	call := &t.call
	if t.attempts > 1 {
		// The last call let its body go once sent: make it again.
		body, _ := r.platform.Reply(&t.msg) // it was made the first time
		call = new(h2call.Call)
		call.Reset(t, t.msg.RetryKey, body)
	}
	r.h2.Do(call)
}

// onAsyncDone runs on the client's reader (or a timer): it must not block.
func (p *Processor) onAsyncDone(t *task, status int, retryAfter time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			// Counted and logged here; finishAsync dead-letters the message.
			p.panics.Add(1)
			p.opt.Logger.Error("webhook message processing panicked", "retry_key", t.msg.RetryKey, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			p.finish(t, fmt.Errorf("panic: %v", r))
		}
	}()
	if errors.Is(err, h2call.ErrNoH2) {
		// The API refused HTTP/2: this and later messages go over net/http.
		t.attempts--
		p.apiCalls.Add(^uint64(0))
		go p.process(t)
		return
	}
	if err == nil {
		err = statusError(status)
		if err == nil {
			p.apiNanos.Add(uint64(h2call.Monotonic() - t.start))
			p.recordAsync(t)
			return
		}
	}
	var perm *permanentError
	if errors.As(err, &perm) || int(t.attempts) > p.opt.API.Retries || p.runCtx.Err() != nil {
		p.apiNanos.Add(uint64(h2call.Monotonic() - t.start))
		p.finish(t, err)
		return
	}
	wait := p.opt.API.retryWait(int(t.attempts), retryAfter)
	p.retries.Add(1)
	p.retryMu.Lock()
	defer p.retryMu.Unlock()
	if p.runCtx.Err() != nil {
		p.finish(t, err)
		return
	}
	p.retryWait[t] = time.AfterFunc(wait, func() {
		p.retryMu.Lock()
		_, mine := p.retryWait[t]
		delete(p.retryWait, t)
		p.retryMu.Unlock()
		if mine {
			p.sendAsync(t)
		}
	})
}

// recordAsync queues a successful HTTP/2 message's result; the batcher
// that writes it ends the message (see recorded).
func (p *Processor) recordAsync(t *task) {
	if p.recordQ == nil {
		p.processed.Add(1)
		p.release()
		return
	}
	// The API call is over: its slot goes to the next message while this
	// one waits for its batch (up to batchWindow), so recording does not
	// eat into the calls max_in_flight allows. Messages waiting to be
	// recorded are bounded by recordQ's room (max_in_flight too); when it
	// is full, this send holds the connection's reader: backpressure.
	<-p.sem
	p.recordQ <- recordJob{t: t, anon: t.anon, received: t.received, attempts: int(t.attempts)}
}

// recorded ends an HTTP/2 message whose result the batcher wrote (or
// failed to).
func (p *Processor) recorded(t *task, id string, attempts int, err error) {
	defer func() {
		p.nInFlight.Add(-1)
		p.inflight.Done()
	}()
	if err != nil {
		if t.msg.ID == "" {
			t.msg.ID = id
		}
		p.deadLetter(&t.msg, err, attempts)
		return
	}
	p.processed.Add(1)
}

// finish hands a message whose call ended to the workers.
func (p *Processor) finish(t *task, err error) { p.finished <- finishedMsg{t, err} }

// finishAsync records or dead-letters an HTTP/2 message and frees its slot.
func (p *Processor) finishAsync(t *task, err error) {
	defer p.release()
	defer func() {
		if r := recover(); r != nil {
			p.panicked(&t.msg, r, int(t.attempts))
		}
	}()
	p.complete(&t.msg, int(t.attempts), err)
}

// abortAsync ends every HTTP/2 call out and every retry waiting, at Close's
// deadline: they go to the dead-letter file.
func (p *Processor) abortAsync() {
	for _, r := range p.routes {
		if r.h2 != nil {
			r.h2.Abort(errors.New("not answered before shutdown")) // again for a shared client: a no-op
		}
	}
	p.retryMu.Lock()
	defer p.retryMu.Unlock()
	for t, timer := range p.retryWait {
		if timer.Stop() {
			p.finish(t, errors.New("retry not made before shutdown"))
		}
		delete(p.retryWait, t)
	}
}

// record writes the message's result through the batchers and waits for it.
func (p *Processor) record(_ context.Context, m *Message, attempts int) error {
	if p.opt.Results == nil {
		return nil
	}
	done := make(chan error, 1)
	p.recordQ <- recordJob{m: m, attempts: attempts, wait: done}
	return <-done
}

// recordJob is a result to write: m's, waited for on wait, or t's (an
// HTTP/2 message), ended by recorded. For a /callback message (anon) the
// job carries all its result needs, so that writing it does not touch the
// task: by the time its batch is written, the task has left the caches.
type recordJob struct {
	t        *task
	m        *Message
	wait     chan<- error
	received int64 // with anon: when the message arrived, in Unix nanoseconds
	attempts int
	id       string // given by the batcher
	anon     bool
}

func (j *recordJob) msg() *Message {
	if j.t != nil {
		return &j.t.msg
	}
	return j.m
}

// Result batches: a batch takes what arrives within batchWindow of its
// first result, up to maxBatch. Large batches matter when answers come back
// out of order (an API taking 2–3 s returns a second's worth of messages
// shuffled): their ids spread over thousands of index pages, and only a
// batch much larger than that spread writes each page for many results.
const (
	maxBatch    = 65536
	batchWindow = 250 * time.Millisecond
	// failureWorkers dead-letter HTTP/2 messages whose call failed.
	failureWorkers = 16
)

// batcher writes results in batches: one transaction (or pipelined
// command) for up to maxBatch messages.
func (p *Processor) batcher() {
	var batch []recordJob
	var results []tsubame.Result
	window := time.NewTimer(time.Hour)
	window.Stop()
	for job := range p.recordQ {
		batch = append(batch[:0], job)
		window.Reset(batchWindow)
	fill:
		for len(batch) < maxBatch {
			select {
			case j, ok := <-p.recordQ:
				if !ok {
					break fill
				}
				batch = append(batch, j)
			case <-window.C:
				break fill
			}
		}
		window.Stop()
		unnamed := uint64(0)
		for i := range batch {
			if batch[i].anon || batch[i].msg().ID == "" {
				unnamed++
			}
		}
		next := p.seq.Add(unnamed) - unnamed // a block of ids: this batch's are consecutive
		now := time.Now().UTC()
		results = results[:0]
		for i := range batch {
			j := &batch[i]
			var value []byte
			if j.anon {
				next++
				j.id = p.messageIDAt(next)
				value = resultJSON(SourceCallback, "", j.attempts, time.Unix(0, j.received).UTC(), now)
			} else {
				m := j.msg()
				if m.ID == "" {
					next++
					m.ID = p.messageIDAt(next)
				}
				j.id = m.ID
				value = resultJSON(m.Source, m.Event, j.attempts, m.Received, now)
			}
			results = append(results, tsubame.Result{ID: j.id, Value: value})
		}
		// In key order: the store walks its index once, left to right.
		slices.SortFunc(results, func(a, b tsubame.Result) int { return strings.Compare(a.ID, b.ID) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.opt.Results.PutResults(ctx, results)
		cancel()
		if err != nil {
			err = fmt.Errorf("cannot record the result: %w", err)
		}
		for _, j := range batch {
			p.safely(j, err)
		}
		clear(batch) // let the messages and their encoded results go
		clear(results)
	}
}

// safely runs a job's completion, containing a panic to that message.
func (p *Processor) safely(j recordJob, err error) {
	if j.wait != nil {
		j.wait <- err
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.panicked(&j.t.msg, r, j.attempts)
		}
	}()
	p.recorded(j.t, j.id, j.attempts, err)
}

// resultJSON is the stored outcome of a processed message.
func resultJSON(source Source, event string, attempts int, received, processed time.Time) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"status":"ok","source":`...)
	b = strconv.AppendQuote(b, string(source))
	if event != "" {
		b = append(b, `,"event":`...)
		b = strconv.AppendQuote(b, event) // validEventType: letters and a dot
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(attempts), 10)
	b = append(b, `,"received":"`...)
	b = received.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","processed":"`...)
	b = processed.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

func (p *Processor) deadLetter(m *Message, cause error, attempts int) {
	p.ensureID(m)
	p.failed.Add(1)
	if err := p.dl.add(m, cause, attempts); err != nil {
		// The file failed too: the process log is the last place the
		// message can be kept.
		b, _ := json.Marshal(m)
		p.opt.Logger.Error("webhook message could not be processed nor dead-lettered", "err", err, "cause", cause, "message", string(b))
		return
	}
	p.opt.Logger.Warn("webhook message dead-lettered", "id", m.ID, "source", m.Source, "attempts", attempts, "err", cause)
}

// Close stops taking messages and processes what is queued and in flight
// until ctx ends; then it interrupts the rest, which goes to the
// dead-letter file. It returns when every accepted message is either
// processed or dead-lettered.
func (p *Processor) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	close(p.queue)
	p.mu.Unlock()

	stop := context.AfterFunc(ctx, p.cancelRun)
	defer stop()
	<-p.dispatched // after a cancel, the rest is dispatched at once, to be dead-lettered
	p.inflight.Wait()
	p.cancelRun()
	if p.finished != nil {
		close(p.finished) // every message is done: the workers stop
		p.workers.Wait()
	}
	if p.recordQ != nil {
		close(p.recordQ)
		p.batchers.Wait()
	}
	p.closeClients()
	p.dedupe.StopAllGoroutines()
	err := p.dl.close()
	if f := p.failed.Load(); f > 0 {
		p.opt.Logger.Warn("webhook messages in the dead-letter file", "count", f, "file", p.opt.DeadLetterPath)
	}
	return err
}

// closeClients lets the API clients' idle connections go.
func (p *Processor) closeClients() {
	for _, r := range p.routes {
		if r.api != nil {
			r.api.close()
		}
	}
}

// Stats returns a snapshot of the counters.
func (p *Processor) Stats() Stats {
	return Stats{
		Accepted:   p.accepted.Load(),
		Duplicates: p.duplicates.Load(),
		Rejected:   p.rejected.Load(),
		Refused:    p.refused.Load(),
		Processed:  p.processed.Load(),
		Retries:    p.retries.Load(),
		Failed:     p.failed.Load(),
		Panics:     p.panics.Load(),
		Queued:     max(int(p.reserve.Load()), 0),
		InFlight:   int(p.nInFlight.Load()),
		APICalls:   p.apiCalls.Load(),
		APITime:    time.Duration(p.apiNanos.Load()),
	}
}
