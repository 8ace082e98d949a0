package bidder

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"io"
	"net/http"
	"sync"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/server"
	"tsubame/internal/track"
)

// Route names on the public listener.
const (
	RouteBid  = "rtb"
	RouteWin  = "rtb_win"
	RouteBill = "rtb_bill"
	RouteLoss = "rtb_loss"
	// RouteBidImp is the markup's impression (PathBidImp).
	RouteBidImp = "rtb_bid_imp"
)

// Version is the OpenRTB version this server speaks (x-openrtb-version).
const Version = "2.6"

// DefaultMaxBody bounds a bid request's body, after gunzip.
const DefaultMaxBody = 256 << 10

// Routes are the bidder's routes: POST /rtb/<exchange>, in flight under
// the ad requests' limit (over it, a bare 204: an exchange reads a 503 as
// an error of the bidder's), and the notices, under the tracking one;
// logged to log (the access log: every bid and notice is a line of it).
// maxBody bounds a request's body, after gunzip too (DefaultMaxBody when
// 0).
func (b *Bidder) Routes(log *accesslog.Logger, maxBody int) []server.Route {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	h := &handler{b: b, maxBody: maxBody}
	get := []string{"GET", "POST"} // exchanges call notices with either
	return []server.Route{
		{Name: RouteBid, Path: PathBid, Methods: []string{"POST"}, Handler: server.HandlerFunc(h.serveBid), Log: log,
			Limit: server.LimitAds, Shed: server.HandlerFunc(h.shedBid)},
		{Name: RouteWin, Path: PathWin, Methods: get, Handler: h.notice(track.KindWin, PathWin), Log: log, Limit: server.LimitTracking},
		{Name: RouteBill, Path: PathBill, Methods: get, Handler: h.notice(track.KindBill, PathBill), Log: log, Limit: server.LimitTracking},
		{Name: RouteLoss, Path: PathLoss, Methods: get, Handler: h.notice(track.KindLoss, PathLoss), Log: log, Limit: server.LimitTracking},
		{Name: RouteBidImp, Path: PathBidImp, Methods: get, Handler: server.HandlerFunc(h.bidImp), Log: log, Limit: server.LimitTracking},
	}
}

type handler struct {
	b       *Bidder
	maxBody int
}

var (
	gunzips = sync.Pool{}
	gzips   = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed); return w }}
	bodies  = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	// answers are the buffers bid responses are appended to.
	answers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}
)

// maxPooledAnswer bounds what a pooled answer buffer keeps: a rare huge
// response is not held for good.
const maxPooledAnswer = 64 << 10

// serveBid answers POST /rtb/<exchange>: 404 for an exchange not
// configured, 403 from a source the exchange does not list, 401 without
// its token, a bare 204 past its QPS or without a bid, a bare 400 for what
// is not a bid request (over rtb.max_body, after gunzip too), else 200
// with the bid response (gzipped when the exchange accepts it). Every
// answer carries x-openrtb-version.
func (h *handler) serveBid(w server.Response, r server.Request) error {
	w.Header("X-Openrtb-Version", Version)
	name := string(bytes.TrimPrefix(r.Path(), []byte(PathBid)))
	ex := h.b.exchange(name)
	if ex == nil {
		return errUnknownExchange
	}
	if len(ex.Sources) > 0 {
		client := r.Client()
		ok := false
		for _, p := range ex.Sources {
			if p.Contains(client) {
				ok = true
				break
			}
		}
		if !ok {
			ex.stats.Refused.Add(1)
			return errSource
		}
	}
	if ex.Token != "" && subtle.ConstantTimeCompare(r.Header(ex.TokenHeader), []byte(ex.Token)) != 1 {
		ex.stats.Refused.Add(1)
		return errToken
	}
	if ex.limiter != nil && !ex.limiter.Allow() {
		ex.stats.Requests.Add(1)
		ex.stats.NoBid(NoBidThrottled)
		w.Status(http.StatusNoContent)
		return nil
	}
	buf := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(buf)
	body, ok := h.readBody(r, buf)
	if !ok {
		ex.stats.Requests.Add(1)
		ex.stats.NoBid(NoBidMalformed)
		w.Status(http.StatusBadRequest)
		return nil
	}
	ans := answers.Get().(*[]byte)
	o := h.b.Bid((*ans)[:0], name, body, r.Time(), r.Client(), r.LogEvent)
	defer func() {
		if cap(o.Body) <= maxPooledAnswer && o.Body != nil {
			*ans = o.Body[:0]
		}
		answers.Put(ans)
	}()
	if o.Status != http.StatusOK {
		w.Status(o.Status)
		return nil
	}
	w.Header("Cache-Control", "no-store")
	if bytes.Contains(r.Header("Accept-Encoding"), []byte("gzip")) && len(o.Body) > 512 {
		zbuf := bodies.Get().(*bytes.Buffer)
		defer bodies.Put(zbuf)
		zbuf.Reset()
		zw := gzips.Get().(*gzip.Writer)
		zw.Reset(zbuf)
		_, _ = zw.Write(o.Body)
		_ = zw.Close()
		gzips.Put(zw)
		w.Header("Content-Encoding", "gzip")
		w.Body("application/json", zbuf.Bytes())
		return nil
	}
	w.Body("application/json", o.Body)
	return nil
}

// shedBid answers a bid request the server's in-flight limit refused: a
// bare 204 (no bid), counted as its exchange's no-bid of NoBidOverload.
// Nothing of the request is read.
func (h *handler) shedBid(w server.Response, r server.Request) error {
	w.Header("X-Openrtb-Version", Version)
	if ex := h.b.exchange(string(bytes.TrimPrefix(r.Path(), []byte(PathBid)))); ex != nil {
		ex.stats.Requests.Add(1)
		ex.stats.NoBid(NoBidOverload)
	}
	w.Status(http.StatusNoContent)
	return nil
}

// readBody returns the request's body, gunzipped if it says gzip, and
// false when it is over maxBody (before or after) or not gzip it claims.
func (h *handler) readBody(r server.Request, buf *bytes.Buffer) ([]byte, bool) {
	raw := r.Body()
	if len(raw) > h.maxBody && !bytes.EqualFold(r.Header("Content-Encoding"), []byte("gzip")) {
		return nil, false
	}
	if !bytes.EqualFold(r.Header("Content-Encoding"), []byte("gzip")) {
		return raw, true
	}
	var zr *gzip.Reader
	if v := gunzips.Get(); v != nil {
		zr = v.(*gzip.Reader)
		if zr.Reset(bytes.NewReader(raw)) != nil {
			return nil, false
		}
	} else {
		var err error
		if zr, err = gzip.NewReader(bytes.NewReader(raw)); err != nil {
			return nil, false
		}
	}
	defer gunzips.Put(zr)
	buf.Reset()
	n, err := io.Copy(buf, io.LimitReader(zr, int64(h.maxBody)+1))
	if err != nil || n > int64(h.maxBody) {
		return nil, false
	}
	return buf.Bytes(), true
}

// notice answers the notice of kind at prefix/<token>?price=...: 200 (a
// pixel for a billing notice, the markup for a win notice where the
// exchange takes it from there, else empty), or a 4xx for a token that
// does not verify.
func (h *handler) notice(kind track.Kind, prefix string) server.Handler {
	return server.HandlerFunc(func(w server.Response, r server.Request) error {
		tok, _ := bytes.CutPrefix(r.Path(), []byte(prefix))
		a, err := h.b.Notice(kind, string(tok), r.Query("price"), r.Query("loss"), r.Query("vast"), time.Now(), r.LogEvent)
		if err != nil {
			return err
		}
		w.Header("Cache-Control", "no-store")
		if a.Body != nil {
			w.Body(a.ContentType, a.Body)
		}
		return nil
	})
}

// bidImp answers the impression URL of a bid's markup, /t/bi/<token>: a
// 1×1 GIF, or a 4xx for a token that does not verify. Its query is not
// read: a viewer's player calls it, and sets no price.
func (h *handler) bidImp(w server.Response, r server.Request) error {
	tok, _ := bytes.CutPrefix(r.Path(), []byte(PathBidImp))
	a, err := h.b.Impression(string(tok), r.UserAgent(), time.Now(), r.LogEvent)
	if err != nil {
		return err
	}
	w.Header("Cache-Control", "no-store")
	w.Body(a.ContentType, a.Body)
	return nil
}

var (
	errUnknownExchange = tsubame.Errorf(tsubame.ENOTFOUND, "unknown exchange")
	errSource          = tsubame.Errorf(tsubame.EFORBIDDEN, "this exchange does not send from this address")
	errToken           = tsubame.Errorf(tsubame.EUNAUTHORIZED, "missing or wrong exchange token")
)
