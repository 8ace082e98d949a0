package ads

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/deadline"
	"tsubame/internal/decision"
	"tsubame/internal/render"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/track"
)

// The answer of a decision request, before it is encoded.
type answer struct {
	req      decision.Request
	kvs      [decision.MaxKeyValues]decision.KeyValue
	out      [decision.MaxCount]decision.Decision
	ids      [decision.MaxCount]string
	reqID    [len("r:") + track.IDLen]byte // the request line's event_id
	imp      [decision.MaxCount]string     // impression URLs
	click    [decision.MaxCount]string     // click URLs
	n        int
	vast     string // the VAST version the request allows
	base     []byte // scheme://host of tracking URLs
	baseBuf  [8 + 256]byte
	urlBuf   []byte // builds tracking URLs; kept with the pooled answer
	clickBuf []byte // builds click URLs, as urlBuf
	// text holds the copies the answer's strings are views of (see keep):
	// kept with the pooled answer, like urlBuf.
	text []byte
	// ctx is the request's deadline, which bounds its store calls (the
	// frequency caps'); kept with the pooled answer while unarmed.
	ctx *deadline.Context
	// freq is the visitor's frequency record, read at most once per
	// request (decision.Request.Frequency).
	freq tsubame.FrequencyRecord
	// sale is the auction a demand partner won (the answer's one slot);
	// nil for a direct decision.
	sale *ssp.Result
}

// context readies a.ctx for a request read at start: it ends timeout
// later.
func (a *answer) context(start time.Time, timeout time.Duration) *deadline.Context {
	if a.ctx == nil || !a.ctx.Reset(context.Background(), start.Add(timeout)) {
		a.ctx = deadline.New(context.Background(), start.Add(timeout))
	}
	return a.ctx
}

var (
	errNoPlacement   = tsubame.Errorf(tsubame.EINVALID, "missing placement")
	errLongPlacement = tsubame.Errorf(tsubame.EINVALID, "a placement decided for is at most 64 bytes (its tracking URLs carry it)")
	errBadCount      = tsubame.Errorf(tsubame.EINVALID, "count must be 1 to 16")
	errBadSite       = tsubame.Errorf(tsubame.EINVALID, "site must be a domain name")
	errBadKV         = tsubame.Errorf(tsubame.EINVALID, "kv.KEY=VALUE: a key is 1 to 64 letters, digits, '_', '-' and '.', a value at most 256 printable bytes")
	errBadSize       = tsubame.Errorf(tsubame.EINVALID, "w and h must be 1 to 10000")
	errBadFormat     = tsubame.Errorf(tsubame.EINVALID, "format must be banner or video")
	errFormatVAST    = tsubame.Errorf(tsubame.EINVALID, "an .xml answer is a VAST document: format may only be video")
	errBadVAST       = tsubame.Errorf(tsubame.EINVALID, "vast must be a VAST version the player takes: 2, 3 or 4")
)

var answers = sync.Pool{New: func() any { return new(answer) }}

// maxKeptText bounds the text buffer a released answer keeps for the next
// request: one that a request grew past it goes with the request.
const maxKeptText = 16 << 10

// keep copies b into a.text and returns the copy as a string, valid until
// a is released: the visitor, site, key-values, ids and tracking URLs a
// request's decision reads, without an allocation each. What they are
// handed to reads them within the request (decision.Request keeps nothing
// of its strings, the log and the signer copy theirs); what outlives the
// request, as an auction's opportunity, clones them. An append that moves
// a.text leaves the views already taken on the old array, which nothing
// writes again.
func (a *answer) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	from := len(a.text)
	a.text = append(a.text, b...)
	return unsafe.String(&a.text[from], len(b))
}

// keepLower is keep of b in lower case (a site's name).
func (a *answer) keepLower(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	from := len(a.text)
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		a.text = append(a.text, c)
	}
	return unsafe.String(&a.text[from], len(b))
}

// newID is track.NewID kept in a.text.
func (a *answer) newID(now time.Time) string {
	from := len(a.text)
	a.text = track.AppendID(a.text, now)
	return unsafe.String(&a.text[from], len(a.text)-from)
}

// decide makes the decisions of r for placement, logs the request (one
// request line, filled or not) and each decision, and leaves them in a
// (a.n of them; none for a crawler).
func (s *Service) decide(w server.Response, r server.Request, placement []byte, format string, a *answer) error {
	if len(placement) > track.MaxIDLen {
		return errLongPlacement
	}
	now := time.Now()
	var dev Device
	if s.opt.Device != nil {
		dev = s.opt.Device(r.UserAgent())
	}
	if dev.Bot {
		return nil
	}
	v, err := s.identify(r, s.privacyOf(r.Site()), a)
	if err != nil {
		return err
	}
	req := &a.req
	*req = decision.Request{User: v.uid, Placement: a.keep(placement), Time: now,
		Device: dev.Device, OS: dev.OS, Browser: dev.Browser, Format: format, Count: 1,
		Context: a.context(r.Time(), s.opt.Timeout), Frequency: &a.freq}
	a.freq.Reset()
	if err := s.parseRequest(r, a); err != nil {
		return err
	}
	if s.opt.Geo != nil {
		req.Country, req.Region = s.opt.Geo(r.Client())
	}
	s.setCookie(w, r, v)
	if au := s.opt.Auction; au != nil && au.Sells(req.Placement) {
		return s.sell(r, placement, a, v, now)
	}
	// The decisions' ids are made first: a line item with a budget holds
	// its price under its decision's id until its impression is seen.
	var reserved time.Time
	if s.opt.Reservation > 0 {
		reserved = decision.HoldEnd(now, s.opt.Reservation)
		for i := range max(req.Count, 1) {
			a.ids[i] = a.newID(now)
		}
		req.Reserve, req.ReserveUntil = a.ids[:max(req.Count, 1)], reserved
	}

	out, why := s.opt.Engine.Index().DecideWhy(req, a.out[:0], nil)
	a.n = len(out)
	if a.n == 0 {
		s.nofill[why].Add(1)
	}
	if err := s.logRequest(r, placement, now, a); err != nil {
		return err
	}
	return s.track(r, placement, a, v, now, reserved)
}

// track signs the impression and click URLs of a's decisions and logs a
// decision line for each.
func (s *Service) track(r server.Request, placement []byte, a *answer, v visitor, now, reserved time.Time) error {
	if a.n == 0 {
		return nil
	}
	req := &a.req
	out := a.out[:a.n]
	a.base = s.trackingBase(r, a.baseBuf[:0])
	sg := s.signer.Load()
	expires := now.Add(s.opt.TTL)
	for i := range out {
		d := &out[i]
		id := a.ids[i]
		if s.opt.Reservation == 0 {
			id = a.newID(now)
		}
		tk := track.Token{Kind: track.KindImp, Decision: id, LineItem: d.Line.ID, Campaign: d.Line.Campaign,
			Creative: d.Creative.ID, Placement: req.Placement, User: v.uid, Price: d.Line.CPM, Expires: expires,
			Origin: track.Origin{Advertiser: d.Line.Advertiser, Site: req.Site, Country: req.Country, Device: req.Device}.Clean()}
		if d.Line.Limited {
			tk.Reserved = reserved
			if !reserved.IsZero() && s.opt.Outcomes != nil {
				tk.Holder = s.opt.Holder // its impression spends the money held
			}
		}
		// The impression's token and the click's (the impression's with
		// the destination, and no holder) are laid out once.
		u := append(append(a.urlBuf[:0], a.base...), PathImp...)
		c := append(append(a.clickBuf[:0], a.base...), PathClick...)
		u, c, err := sg.AppendImpClick(u, c, tk, d.Creative.Click)
		if err != nil {
			// Ids longer than a token carries: the model bounds them
			// (MaxObjectIDLength), so this is a bug, not a request's fault.
			return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot sign the impression and click of line item %q", d.Line.ID)
		}
		a.imp[i], a.click[i], a.ids[i] = a.keep(u), a.keep(c), id
		a.urlBuf, a.clickBuf = u, c
		e := accesslog.Event{Kind: accesslog.EventDecision, ID: accesslog.String("d:" + id), Decision: accesslog.String(id),
			LineItem: accesslog.String(d.Line.ID), Campaign: accesslog.String(d.Line.Campaign), Creative: accesslog.String(d.Creative.ID),
			Placement: accesslog.Bytes(placement), UID: accesslog.String(v.uid), Price: int64(d.Line.CPM),
			Currency: accesslog.String(s.opt.Currency), Valid: true}
		e.AddOrigin(tk.Advertiser, tk.Site, tk.Country, tk.Device)
		if err := s.logEvent(r, &e); err != nil {
			return err
		}
	}
	return nil
}

// logRequest logs the request line of a decided request: the slots it
// asked and how many of them its decisions filled (a.n, none included),
// with the origin its decision lines carry. Decision lines alone cannot
// tell a placement's opportunities: an unfilled request has none. Its
// event_id is "r:" and an id of its own; like a decision line, it
// allocates nothing.
func (s *Service) logRequest(r server.Request, placement []byte, now time.Time, a *answer) error {
	req := &a.req
	o := track.Origin{Site: req.Site, Country: req.Country, Device: req.Device}.Clean()
	e := accesslog.Event{Kind: accesslog.EventRequest, ID: accesslog.Bytes(track.AppendID(append(a.reqID[:0], "r:"...), now)),
		Placement: accesslog.Bytes(placement), Currency: accesslog.String(s.opt.Currency), Valid: true}
	e.AddOrigin("", o.Site, o.Country, o.Device)
	e.AddInt(keySlots, int64(min(max(req.Count, 1), decision.MaxCount))) // as Decide bounds it
	e.AddInt(keyFilled, int64(a.n))
	return s.logEvent(r, &e)
}

// parseRequest reads the request's parameters into a.req: site (else the
// Referer's host), kv.KEY=VALUE pairs, count, format, w, h and vast.
func (s *Service) parseRequest(r server.Request, a *answer) error {
	var bad error
	kvs := a.kvs[:0]
	r.QueryEach(func(k, v []byte) { kvs, bad = appendKV(a, kvs, k, v, bad) })
	a.req.KeyValues = kvs
	return parseParams(r, a, bad)
}

// appendKV appends k=v (kept in a) to kvs when k is a kv.KEY parameter,
// while bad is nil (the first error is kept), and returns them: one
// parameter of the request's, in order.
func appendKV(a *answer, kvs []decision.KeyValue, k, v []byte, bad error) ([]decision.KeyValue, error) {
	key, ok := bytes.CutPrefix(k, []byte("kv."))
	if !ok || bad != nil {
		return kvs, bad
	}
	if !validKVKey(key) || len(v) > tsubame.MaxValueLength || !printable(v) {
		return kvs, errBadKV
	}
	if len(kvs) < cap(kvs) {
		kvs = append(kvs, decision.KeyValue{Key: a.keep(key), Value: a.keep(v)})
	}
	return kvs, nil
}

// params is what parseParams reads of a request: a server.Request on the
// request path (a type parameter, not an interface value, so that it is
// not copied to the heap), the admin's explain's (urlParams) off it.
type params interface {
	Query(name string) []byte
	Header(name string) []byte
}

// parseParams is parseRequest's reading of every parameter but the
// key-values, which the caller has read into a.req.KeyValues, kvBad their
// error: the closure a scan takes would escape through a type parameter.
func parseParams[P params](r P, a *answer, kvBad error) error {
	req := &a.req
	site := r.Query("site")
	if site == nil {
		site = refererHost(r.Header("Referer"))
	} else if !validSite(site) {
		return errBadSite
	}
	if len(site) > 0 && validSite(site) {
		req.Site = a.keepLower(site)
	}
	if kvBad != nil {
		return kvBad
	}
	if c := r.Query("count"); c != nil {
		n, err := strconv.Atoi(string(c))
		if err != nil || n < 1 || n > decision.MaxCount {
			return errBadCount
		}
		req.Count = n
	}
	if f := r.Query("format"); f != nil {
		switch string(f) {
		case tsubame.FormatBanner, tsubame.FormatVideo:
			if req.Format != "" && req.Format != string(f) {
				return errFormatVAST // .xml answers VAST: videos only
			}
			req.Format = string(f)
		default:
			return errBadFormat
		}
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"w", &req.W}, {"h", &req.H}} {
		if b := r.Query(p.name); b != nil {
			n, err := strconv.Atoi(string(b))
			if err != nil || n < 1 || n > 10000 {
				return errBadSize
			}
			*p.dst = n
		}
	}
	a.vast = render.VASTVersion
	if b := r.Query("vast"); b != nil {
		v, ok := render.ParseVASTVersion(b)
		if !ok {
			return errBadVAST
		}
		a.vast = v
	}
	return nil
}

// trackingBase appends the scheme and host tracking URLs start with.
func (s *Service) trackingBase(r server.Request, dst []byte) []byte {
	if s.opt.TrackingURL != "" {
		return append(dst, s.opt.TrackingURL...)
	}
	if r.TLS() {
		dst = append(dst, "https://"...)
	} else {
		dst = append(dst, "http://"...)
	}
	return append(dst, r.Host()...)
}

func refererHost(ref []byte) []byte {
	// By hand, not net/url: a page tag's every request carries a Referer,
	// and parsing it allocated. Only http(s) URLs name a site; the host
	// ends at the first '/', '?' or '#', after any user info, before any
	// port. What is not a plain name is then refused by validSite.
	var rest []byte
	for _, scheme := range [...]string{"https://", "http://"} {
		if len(ref) >= len(scheme) && bytes.EqualFold(ref[:len(scheme)], []byte(scheme)) {
			rest = ref[len(scheme):]
			break
		}
	}
	if rest == nil {
		return nil
	}
	if i := bytes.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := bytes.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if i := bytes.IndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// validSite admits a DNS name: letters, digits, '-' and '.', at most 253.
func validSite(b []byte) bool {
	if len(b) == 0 || len(b) > 253 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func validKVKey(b []byte) bool {
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
