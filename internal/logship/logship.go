// Package logship ships the access log's files to Kafka without losing or
// silently doubling a line.
//
// The files stay the source of truth, the way Flume's spooling source and
// Fluent Bit's filesystem buffer work: the shipper reads the closed files
// and the active one, produces each line as one record (its value is the
// line as in the file, without the newline) through franz-go's idempotent
// producer with acks from every in-sync replica, and records in a small
// state file how far Kafka has acknowledged each file. A broker outage, a
// crash or a restart only delays lines: shipping resumes where the
// acknowledgements stopped. Lines acknowledged but not yet in the state file
// when the process died are sent again; every record carries a stable id
// (header "tsubame-id": node/file-key/line-number) so a consumer drops them.
// The id names a line by its place in its file, so it holds for every
// kind of line: a request's, and the money events' lines beside it
// (accesslog.Event), which are keyed by their placement as requests are.
//
// Reading the active file: the mapped writer reserves a record's bytes and
// copies the record in afterwards, so the file can hold a run of zeros (a
// copy still under way) before later records. Each byte goes from zero to
// its final value once, so a line is whole when it ends in a newline and
// holds no zero byte; the shipper reads up to the first zero or the last
// newline, whichever comes first, and comes back for the rest.
//
// It owns the shipping state file and the Kafka client; it must not import
// the server or the stores (cmd/tsubame wires it).
//
// It must not import the listeners, config or the store backends (arch_test.go).
package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/accesslog"
)

// IDHeader is the record header carrying a line's stable id.
const IDHeader = "tsubame-id"

// Options configure a Shipper.
type Options struct {
	// Dir and Name are the access log's directory and active file name.
	Dir, Name string
	// StateFile records how far each file is acknowledged. Default
	// Dir/.kafka-ship.json.
	StateFile string
	// Node names this server in record ids. Required.
	Node string
	// Topic receives the records. Required.
	Topic string
	// ByPlacement keys records by placement id (so a placement's lines stay
	// in order on one partition); false leaves them unkeyed (spread).
	ByPlacement bool
	// Client are the Kafka client's options: brokers, TLS, SASL,
	// compression, batching. The shipper adds the topic, acks from all
	// in-sync replicas and unlimited retries.
	Client []kgo.Opt
	// PollInterval is how often the active file is read for new lines.
	// Default 100ms.
	PollInterval time.Duration
	// StateInterval is the longest time acknowledged progress waits before
	// it is written to the state file. Default 200ms.
	StateInterval time.Duration
	// Written counts the lines the writer has written since the active file
	// was opened (the lag is counted from it); nil: lag counts only lines
	// read and not acknowledged.
	Written func() uint64
	Logger  *slog.Logger
}

// Stats are the shipper's counters.
type Stats struct {
	Lines   uint64 // lines acknowledged by Kafka since start
	Bytes   uint64 // their bytes (without newlines)
	Lag     uint64 // lines written and not yet acknowledged
	Oldest  time.Time
	Errors  uint64 // failed sends (each batch sent again)
	Skipped uint64 // lines in closed files that are not records (not shipped)
	Failing bool
	LastErr string
}

// Shipper ships an access log's files. New, then Start; Close.
type Shipper struct {
	opt    Options
	client *kgo.Client
	log    *slog.Logger
	active string

	mu      sync.Mutex
	state   map[string]*fileState // by key: acknowledged
	keys    accesslog.FileKeys    // closed file name -> key, as seen
	pending []*chunk              // sent and not yet committed, in send order
	dirty   bool                  // state changed since saved
	failing bool                  // a send failed: rewinding
	oldest  time.Time             // the time of the oldest line sent and not acknowledged
	seen    map[string]time.Time  // by key: when its file was last listed

	// reader's own state
	sent   map[string]*readPos // by key: sent so far
	act    *os.File            // the active file as opened
	actKey string

	signal  chan struct{}
	stop    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool

	lines, bytes, errors, skipped atomic.Uint64
	backlog0                      uint64 // unacknowledged lines in closed files at start
	lastErr                       atomic.Pointer[string]
}

type readPos struct {
	off, lines int64
	eof        bool // the file is closed and sent whole
}

// chunk is a run of lines of one file sent together.
type chunk struct {
	key        string
	name       string
	end, lines int64 // offset and line count after the chunk
	eof        bool  // the chunk ends its (closed) file
	n          int64
	bytes      int64
	first      time.Time // the first line's time
	sentAt     time.Time
	remaining  atomic.Int64
	err        atomic.Pointer[error]
	buf        *[]byte
	arena      *arena
	s          *Shipper
}

func (c *chunk) promise(_ *kgo.Record, err error) {
	if err != nil {
		c.err.CompareAndSwap(nil, &err)
	}
	if c.remaining.Add(-1) == 0 {
		select {
		case c.s.signal <- struct{}{}:
		default:
		}
	}
}

// New loads the state file and makes the Kafka client (which connects
// lazily: a broker down at start is not an error).
func New(opt Options) (*Shipper, error) {
	if opt.Node == "" || opt.Topic == "" || opt.Dir == "" || opt.Name == "" {
		return nil, errors.New("logship: Dir, Name, Node and Topic are required")
	}
	if opt.StateFile == "" {
		opt.StateFile = filepath.Join(opt.Dir, ".kafka-ship.json")
	}
	if opt.PollInterval <= 0 {
		opt.PollInterval = 100 * time.Millisecond
	}
	if opt.StateInterval <= 0 {
		opt.StateInterval = 200 * time.Millisecond
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(opt.StateFile), 0o750); err != nil {
		return nil, err
	}
	state, err := loadState(opt.StateFile)
	if err != nil {
		return nil, err
	}
	client, err := NewClient(opt.Topic, opt.Client...)
	if err != nil {
		return nil, err
	}
	s := &Shipper{opt: opt, client: client, log: opt.Logger, active: filepath.Join(opt.Dir, opt.Name),
		state: state, sent: map[string]*readPos{}, seen: map[string]time.Time{},
		signal: make(chan struct{}, 1), stop: make(chan struct{})}
	now := time.Now()
	for k := range state {
		s.seen[k] = now
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// NewClient makes an idempotent producer for topic: acks from all in-sync
// replicas, records retried until they are delivered.
func NewClient(topic string, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append(slices.Clone(opts), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.UnknownTopicRetries(-1))
	return kgo.NewClient(all...)
}

// Hold reports whether a closed file (by name in Dir) must be kept because
// it is not known to be shipped: the access log's retention asks it.
func (s *Shipper) Hold(name string) bool {
	key, ok := s.keys.Known(s.opt.Dir, name)
	if !ok {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.state[key]
	return f == nil || !f.Done
}

// Start counts the backlog and starts shipping.
func (s *Shipper) Start() {
	s.backlog0 = s.countBacklog()
	s.started = true
	s.wg.Add(2)
	go s.run()
	go s.commitLoop()
}

// countBacklog counts the lines of closed files not yet acknowledged.
func (s *Shipper) countBacklog() uint64 {
	names, _ := accesslog.ClosedFiles(s.opt.Dir, s.opt.Name, true)
	var n uint64
	seen := map[string]bool{}
	for _, name := range names {
		key, err := s.keyOf(name)
		if err != nil || key == "" || seen[key] {
			continue
		}
		seen[key] = true
		s.mu.Lock()
		f := s.state[key]
		s.mu.Unlock()
		if f != nil && f.Done {
			continue
		}
		var off int64
		if f != nil {
			off = f.Offset
		}
		r, err := accesslog.OpenLines(filepath.Join(s.opt.Dir, name))
		if err != nil {
			continue
		}
		if err := accesslog.SkipLines(r, off); err == nil {
			n += countLines(r)
		}
		r.Close()
	}
	return n
}

func countLines(r io.Reader) uint64 {
	buf := make([]byte, 256<<10)
	var n uint64
	for {
		k, err := r.Read(buf)
		n += uint64(bytes.Count(buf[:k], []byte{'\n'}))
		if err != nil {
			return n
		}
	}
}

// keyOf returns the key of a closed file, "" if it has no whole line.
func (s *Shipper) keyOf(name string) (string, error) {
	return s.keys.Key(s.opt.Dir, name)
}

// run is the reader: it sends what the files hold beyond what was sent.
func (s *Shipper) run() {
	defer s.wg.Done()
	defer func() {
		if s.act != nil {
			s.act.Close()
		}
	}()
	backoff := time.Second
	for {
		if s.isFailing() {
			if !s.rewind(&backoff) {
				return
			}
			continue
		}
		progressed := s.pass()
		if s.stopped() {
			return
		}
		if !progressed {
			select {
			case <-s.stop:
				return
			case <-time.After(s.opt.PollInterval):
			}
		} else if !s.isFailing() {
			backoff = time.Second
		}
	}
}

func (s *Shipper) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

func (s *Shipper) isFailing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// rewind waits until every send has its outcome, forgets what was sent and
// not acknowledged, and waits before sending again. False when stopping.
func (s *Shipper) rewind(backoff *time.Duration) bool {
	for {
		s.mu.Lock()
		n := len(s.pending)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-s.stop:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	clear(s.sent)
	if s.act != nil {
		s.act.Close()
		s.act, s.actKey = nil, ""
	}
	select {
	case <-s.stop:
		return false
	case <-time.After(*backoff):
	}
	*backoff = min(*backoff*2, 30*time.Second)
	s.mu.Lock()
	s.failing = false
	s.mu.Unlock()
	return true
}

// pass sends what is new in the closed files, oldest first, then in the
// active file. It reports whether it sent anything.
func (s *Shipper) pass() bool {
	progressed := false
	names, err := accesslog.ClosedFiles(s.opt.Dir, s.opt.Name, true)
	if err != nil {
		s.noteError(fmt.Errorf("listing the access log directory: %w", err))
	}
	live := make(map[string]bool, len(names))
	for _, name := range names {
		if s.stopped() || s.isFailing() {
			return progressed
		}
		key, err := s.keyOf(name)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) { // compressed and renamed meanwhile
				s.noteError(err)
			}
			continue
		}
		if key == "" {
			continue
		}
		live[name] = true
		s.mu.Lock()
		f := s.state[key]
		if f != nil && f.Name != name && f.Name != s.opt.Name {
			f.Name = name
		}
		s.mu.Unlock()
		if f != nil && f.Done {
			continue
		}
		if p := s.sent[key]; p != nil && p.eof {
			continue
		}
		n, err := s.sendClosed(name, key, f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			s.noteError(err)
		}
		progressed = progressed || n > 0
	}
	if n := s.sendActive(); n > 0 {
		progressed = true
	}
	s.forget(live)
	return progressed
}

// forget drops names no longer in the directory, and the state of files
// shipped whole and gone (retention removed them) for forgetAfter: a file
// can be missing from one listing while gzip renames it.
func (s *Shipper) forget(live map[string]bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys.Retain(func(name, key string) bool {
		if live[name] {
			s.seen[key] = now
		}
		return live[name]
	})
	for key, f := range s.state {
		if f.Done && now.Sub(s.seen[key]) > forgetAfter {
			delete(s.state, key)
			delete(s.seen, key)
			delete(s.sent, key)
			s.dirty = true
		}
	}
}

// forgetAfter is how long the state of a shipped file is kept after the
// file is gone.
const forgetAfter = 10 * time.Minute

// position is where sending a file resumes: after what was sent, or after
// what was acknowledged.
func (s *Shipper) position(key string, f *fileState) *readPos {
	if p := s.sent[key]; p != nil {
		return p
	}
	p := &readPos{}
	if f != nil {
		p.off, p.lines = f.Offset, f.Lines
	}
	s.sent[key] = p
	return p
}

// sendClosed sends a closed file from where it was left to its end.
func (s *Shipper) sendClosed(name, key string, f *fileState) (int64, error) {
	r, err := accesslog.OpenLines(filepath.Join(s.opt.Dir, name))
	if err != nil {
		return 0, err
	}
	defer r.Close()
	p := s.position(key, f)
	if err := accesslog.SkipLines(r, p.off); err != nil {
		return 0, fmt.Errorf("%s: shorter than its shipped part (%d bytes): %w", name, p.off, err)
	}
	var sent int64
	var carry []byte // a line cut by the end of the previous read
	for {
		bp := getBuf()
		buf := *bp
		c := copy(buf, carry)
		k, err := io.ReadFull(r, buf[c:])
		data := buf[:c+k]
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			putBuf(bp)
			return sent, fmt.Errorf("%s: %w", name, err)
		}
		if !eof {
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				putBuf(bp)
				return sent, fmt.Errorf("%s: a line longer than %d bytes at offset %d", name, len(buf), p.off)
			}
			carry = append(carry[:0], data[i+1:]...)
			data = data[:i+1]
		}
		sent += s.send(key, name, p, data, bp, eof)
		if eof || s.stopped() || s.isFailing() {
			return sent, nil
		}
	}
}

// sendActive sends the whole lines the active file holds beyond what was
// sent. When the file was rotated away (renamed to its range's name once
// the writer was done with it), the next pass finishes it as a closed file
// first, so a placement's lines keep their order across the rotation.
func (s *Shipper) sendActive() int64 {
	st, err := os.Stat(s.active)
	if s.act != nil {
		if cur, cerr := s.act.Stat(); cerr == nil && err == nil && os.SameFile(cur, st) {
			return s.readActive()
		}
		s.act.Close()
		s.act, s.actKey = nil, ""
		return 0
	}
	if err != nil {
		return 0
	}
	f, err := os.Open(s.active)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.noteError(err)
		}
		return 0
	}
	s.act = f
	return s.readActive()
}

// readActive reads and sends the whole lines of the active file.
func (s *Shipper) readActive() int64 {
	if s.actKey == "" {
		var head [16 << 10]byte
		k, _ := s.act.ReadAt(head[:], 0)
		i := bytes.IndexByte(head[:k], '\n')
		if i < 0 || bytes.IndexByte(head[:i], 0) >= 0 {
			return 0 // no whole first line yet
		}
		s.actKey = accesslog.FileKey(head[:i+1])
	}
	key := s.actKey
	s.mu.Lock()
	f := s.state[key]
	s.mu.Unlock()
	if f != nil && f.Done {
		return 0
	}
	p := s.position(key, f)
	var sent int64
	for !s.stopped() && !s.isFailing() {
		bp := getBuf()
		buf := *bp
		k, err := s.act.ReadAt(buf, p.off)
		data := buf[:k]
		if z := bytes.IndexByte(data, 0); z >= 0 {
			data = data[:z] // a copy still under way, or the space ahead
		}
		i := bytes.LastIndexByte(data, '\n')
		if i < 0 {
			putBuf(bp)
			if err != nil && !errors.Is(err, io.EOF) {
				s.noteError(fmt.Errorf("reading %s: %w", s.active, err))
			}
			return sent
		}
		sent += s.send(key, s.opt.Name, p, data[:i+1], bp, false)
		if i+1 < len(buf) {
			return sent
		}
	}
	return sent
}

// send produces the lines in data (whole lines of file key, starting at
// p) as one chunk, and advances p. eof: the chunk ends the closed file.
// The chunk owns bp (returned to the pool when every line has its outcome).
func (s *Shipper) send(key, name string, p *readPos, data []byte, bp *[]byte, eof bool) int64 {
	a := arenaPool.Get().(*arena)
	c := &chunk{key: key, name: name, eof: eof, buf: bp, arena: a, s: s, sentAt: time.Now()}
	n := bytes.Count(data, []byte{'\n'}) + 1
	prefix := s.opt.Node + "/" + key + "/"
	recs := slices.Grow(a.recs[:0], n)
	hdrs := slices.Grow(a.hdrs[:0], n)
	idOff := slices.Grow(a.idOff[:0], n+1)
	ids := slices.Grow(a.ids[:0], n*(len(prefix)+8))
	lineNo := p.lines
	for rest := data; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			i = len(rest) - 1 // a closed file's torn last line: not a record
		}
		ln := rest[:i+1]
		rest = rest[i+1:]
		lineNo++
		if !accesslog.ValidLine(ln) {
			s.skipped.Add(1)
			continue
		}
		if c.first.IsZero() {
			c.first, _ = accesslog.LineTime(ln)
		}
		idOff = append(idOff, len(ids))
		ids = append(ids, prefix...)
		ids = strconv.AppendInt(ids, lineNo, 10)
		r := kgo.Record{Value: ln[:len(ln)-1]}
		if s.opt.ByPlacement {
			r.Key = accesslog.LinePlacement(ln)
		}
		recs = append(recs, r)
		c.bytes += int64(len(ln) - 1)
	}
	idOff = append(idOff, len(ids))
	for i := range recs {
		hdrs = append(hdrs, kgo.RecordHeader{Key: IDHeader, Value: ids[idOff[i]:idOff[i+1]]})
		recs[i].Headers = hdrs[i : i+1 : i+1]
	}
	a.recs, a.hdrs, a.ids, a.idOff = recs, hdrs, ids, idOff
	p.off += int64(len(data))
	p.lines = lineNo
	p.eof = eof
	c.end, c.lines, c.n = p.off, p.lines, int64(len(recs))
	c.remaining.Store(int64(len(recs)) + 1) // +1 until every record is produced
	s.mu.Lock()
	s.pending = append(s.pending, c)
	if s.oldest.IsZero() {
		s.oldest = c.first
	}
	s.mu.Unlock()
	for i := range recs {
		s.client.Produce(s.ctx, &recs[i], c.promise)
	}
	c.promise(nil, nil)
	return c.n
}

// arena holds a chunk's records and their ids, reused once every record
// has its outcome (the client keeps no reference after the promise).
type arena struct {
	recs  []kgo.Record
	hdrs  []kgo.RecordHeader
	ids   []byte
	idOff []int
}

var arenaPool = sync.Pool{New: func() any { return new(arena) }}

func (a *arena) release() {
	clear(a.recs) // drop the references into the read buffer
	arenaPool.Put(a)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if b != nil {
		bufPool.Put(b)
	}
}

// commitLoop applies acknowledged chunks to the state, in send order, and
// writes the state file at most every StateInterval.
func (s *Shipper) commitLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opt.StateInterval)
	defer t.Stop()
	last, lastProbe := time.Now(), time.Now()
	for {
		select {
		case <-s.signal:
			s.commit()
			if time.Since(last) >= s.opt.StateInterval {
				s.save()
				last = time.Now()
			}
		case <-t.C:
			s.commit()
			s.save()
			last = time.Now()
			if time.Since(lastProbe) >= probeEvery && s.stalled() {
				lastProbe = time.Now()
				s.probe()
			}
		case <-s.stop:
			return
		}
	}
}

// probeEvery is how often the brokers are asked why lines wait (the
// client retries unreachable brokers and refused logins without failing
// the records, so the reason would otherwise not show).
const probeEvery = 10 * time.Second

// stalled reports whether the oldest line sent has waited probeEvery.
func (s *Shipper) stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0 && time.Since(s.pending[0].sentAt) > probeEvery
}

func (s *Shipper) probe() {
	ctx, cancel := context.WithTimeout(s.ctx, probeEvery/2)
	defer cancel()
	if err := s.client.Ping(ctx); err != nil && s.ctx.Err() == nil {
		s.noteError(fmt.Errorf("kafka does not acknowledge the lines sent: %w", err))
	}
}

// commit pops the chunks at the front whose every line has its outcome.
// After a failed line nothing more is committed until the reader rewinds.
func (s *Shipper) commit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 {
		c := s.pending[0]
		if c.remaining.Load() != 0 {
			return
		}
		s.pending[0] = nil
		s.pending = s.pending[1:]
		putBuf(c.buf)
		c.arena.release()
		if ep := c.err.Load(); ep != nil || s.failing {
			if ep != nil && !s.failing {
				s.failing = true
				s.errors.Add(1)
				msg := (*ep).Error()
				s.lastErr.Store(&msg)
				if s.ctx.Err() == nil {
					s.log.Error("shipping the access log to Kafka failed; resending from the last acknowledged line", "file", c.name, "err", *ep)
				}
			}
			continue
		}
		f := s.state[c.key]
		if f == nil {
			f = &fileState{Key: c.key}
			s.state[c.key] = f
		}
		f.Name, f.Offset, f.Lines, f.Done = c.name, c.end, c.lines, c.eof
		s.lines.Add(uint64(c.n))
		s.bytes.Add(uint64(c.bytes))
		s.dirty = true
		s.oldest = time.Time{}
		for _, next := range s.pending {
			if !next.first.IsZero() {
				s.oldest = next.first
				break
			}
		}
	}
}

func (s *Shipper) save() {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return
	}
	files := make([]*fileState, 0, len(s.state))
	for _, f := range s.state {
		cp := *f
		files = append(files, &cp)
	}
	s.dirty = false
	s.mu.Unlock()
	slices.SortFunc(files, func(a, b *fileState) int {
		if a.Name != b.Name {
			return cmpString(a.Name, b.Name)
		}
		return cmpString(a.Key, b.Key)
	})
	if err := saveState(s.opt.StateFile, s.opt.Node, files); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		s.noteError(fmt.Errorf("writing the shipper state file: %w", err))
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Shipper) noteError(err error) {
	s.errors.Add(1)
	msg := err.Error()
	s.lastErr.Store(&msg)
	s.log.Warn("access log shipper", "err", err)
}

// Close stops reading, waits (until ctx ends) for Kafka to acknowledge what
// was sent, writes the state and closes the client. What is not
// acknowledged by then is sent again by the next run.
func (s *Shipper) Close(ctx context.Context) error {
	if !s.started {
		s.client.Close()
		return nil
	}
	close(s.stop)
	// Produce blocks while the buffer is full (a broker down): cancelling
	// lets the reader return once ctx ends.
	stopCtx := context.AfterFunc(ctx, s.cancel)
	defer stopCtx()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		<-done
	}
	err := s.client.Flush(ctx)
	s.commit()
	s.mu.Lock()
	s.dirty = true
	s.mu.Unlock()
	s.save()
	s.cancel()
	s.client.Close()
	if err != nil {
		return fmt.Errorf("access log shipper: lines not acknowledged by Kafka at stop are sent again at the next start: %w", err)
	}
	return nil
}

// Stats returns the shipper's counters.
func (s *Shipper) Stats() Stats {
	st := Stats{Lines: s.lines.Load(), Bytes: s.bytes.Load(), Errors: s.errors.Load(), Skipped: s.skipped.Load()}
	s.mu.Lock()
	st.Failing = s.failing
	st.Oldest = s.oldest
	var inflight uint64
	for _, c := range s.pending {
		inflight += uint64(c.n)
	}
	s.mu.Unlock()
	if p := s.lastErr.Load(); p != nil {
		st.LastErr = *p
	}
	if s.opt.Written != nil {
		total := s.backlog0 + s.opt.Written()
		if total > st.Lines {
			st.Lag = total - st.Lines
		}
	} else {
		st.Lag = inflight
	}
	return st
}

// Drain waits until every line written so far is acknowledged, while
// acknowledgements keep coming (it gives up after a second without one, or
// when a send failed), or until ctx ends. Call it after the access log is
// closed and before Close, so a clean stop leaves nothing to resend.
func (s *Shipper) Drain(ctx context.Context) {
	last, lastAt := s.lines.Load(), time.Now()
	for {
		st := s.Stats()
		if st.Lag == 0 || st.Failing || ctx.Err() != nil {
			return
		}
		if st.Lines != last {
			last, lastAt = st.Lines, time.Now()
		} else if time.Since(lastAt) > time.Second {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Codec is the batch compression named by access_log.kafka.compression.
// zstd runs at its fastest level (about the ratio of its default level on
// log lines, at a fraction of the CPU).
func Codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression().WithLevel(1), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "none":
		return kgo.NoCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q: lz4, zstd, snappy, gzip or none", name)
}
