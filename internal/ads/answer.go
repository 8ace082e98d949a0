package ads

import (
	"context"
	"net/http"
	"strconv"
	"unsafe"

	"tsubame"
	"tsubame/internal/render"
	"tsubame/internal/server"
)

// serveDecide answers GET /api/decide?placement=P[&uid=U][&site=D]
// [&kv.K=V...][&count=N][&format=banner|video][&w=W&h=H][&vast=V]: 200
// with {"decisions":[...]}, or a bare 204 when nothing qualifies (an
// unknown placement too) and for a crawler.
func (s *Service) serveDecide(w server.Response, r server.Request) error {
	placement := r.Query("placement")
	if len(placement) == 0 {
		return errNoPlacement
	}
	if err := tsubame.ValidID(string(placement)); err != nil {
		return err
	}
	a := answers.Get().(*answer)
	defer s.release(a)
	if err := s.decide(w, r, placement, "", a); err != nil {
		return err
	}
	w.Header("Cache-Control", "no-store")
	if a.n == 0 {
		w.Status(http.StatusNoContent)
		return nil
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	*bp = s.appendJSON((*bp)[:0], a)
	w.Body(render.ContentTypeJSON, *bp)
	return nil
}

func (s *Service) release(a *answer) {
	clear(a.ids[:a.n])
	clear(a.imp[:a.n])
	clear(a.click[:a.n])
	clear(a.out[:a.n])
	if a.ctx != nil {
		a.ctx.Stop()
	}
	buf, clickBuf, text, ctx := a.urlBuf[:0], a.clickBuf[:0], a.text[:0], a.ctx
	if cap(text) > maxKeptText {
		text = nil
	}
	*a = answer{urlBuf: buf, clickBuf: clickBuf, text: text, ctx: ctx}
	answers.Put(a)
}

// Source is the source of endpoints with source: decide: the placement id
// of the ad tag is the placement decided for; .js and .json answer the
// decisions as /api/decide does ({"decisions":[]} when there are none, so
// a page's callback is always called), .xml a VAST document of the video
// decisions (an empty one when none).
func (s *Service) Source() server.RequestSource { return source{s} }

type source struct{ s *Service }

var errNeedsRequest = tsubame.Errorf(tsubame.EINTERNAL, "a decide source needs the whole request")

// Payload is not used: the server calls RequestPayload.
func (source) Payload(context.Context, render.Encoding, []byte, []byte) ([]byte, bool, error) {
	return nil, false, errNeedsRequest
}

// RequestPayload decides for the placement id and encodes the answer.
func (src source) RequestPayload(w server.Response, r server.Request, enc render.Encoding, id []byte, buf []byte) ([]byte, bool, error) {
	s := src.s
	a := answers.Get().(*answer)
	defer s.release(a)
	format := ""
	if enc == render.EncodingVAST {
		format = tsubame.FormatVideo
	}
	if err := s.decide(w, r, id, format, a); err != nil {
		return nil, false, err
	}
	if enc == render.EncodingVAST {
		return s.appendVAST(buf, a, a.n), true, nil
	}
	return s.appendJSON(buf, a), true, nil
}

// appendJSON appends {"decisions":[...]} (an empty list when none).
//
// Escaping is the answer's main cost (4 us of a decision's JSON went to
// scanning the tracking URLs byte by byte), so what cannot need it is
// written as it is: the tracking URLs when their scheme and host need none
// (checked once; their tokens are base64url), and ids and the format after
// a check of their bytes (the model allows ids only letters, digits and
// -_.:@). The creative's image, HTML and VAST are escaped.
func (s *Service) appendJSON(dst []byte, a *answer) []byte {
	baseSafe := jsonSafe(a.base)
	dst = append(dst, `{"decisions":[`...)
	if a.sale != nil {
		return append(s.appendSale(dst, a, baseSafe), "]}"...)
	}
	for i := range a.n {
		d := &a.out[i]
		c := d.Creative
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendRaw(append(dst, `{"decision":`...), a.ids[i])
		dst = appendRaw(append(dst, `,"line_item":`...), d.Line.ID)
		dst = appendRaw(append(dst, `,"campaign":`...), d.Line.Campaign)
		dst = appendRaw(append(dst, `,"creative":`...), c.ID)
		dst = appendRaw(append(dst, `,"format":`...), c.Format)
		dst = append(dst, `,"w":`...)
		dst = strconv.AppendInt(dst, int64(c.W), 10)
		dst = append(dst, `,"h":`...)
		dst = strconv.AppendInt(dst, int64(c.H), 10)
		switch {
		case c.Format == tsubame.FormatVideo:
			dst = append(dst, `,"vast":`...)
			doc := s.appendVASTOne(nil, a, i)
			dst = render.AppendJSONString(dst, string(doc))
		case c.Image != "":
			dst = append(dst, `,"image":`...)
			dst = render.AppendJSONString(dst, c.Image)
		default:
			dst = append(dst, `,"html":`...)
			dst = render.AppendJSONString(dst, c.HTML)
		}
		dst = append(dst, `,"impression_url":`...)
		dst = appendURL(dst, a.imp[i], baseSafe)
		dst = append(dst, `,"click_url":`...)
		dst = appendURL(dst, a.click[i], baseSafe)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// appendSale appends a sold slot's decision: the partner that won, the
// format and size of its markup, the markup (html, or vast with the
// impression URL added to it) and the impression URL. Its clicks are the
// markup's own.
func (s *Service) appendSale(dst []byte, a *answer, baseSafe bool) []byte {
	b := a.sale.Sold
	dst = appendRaw(append(dst, `{"decision":`...), a.ids[0])
	dst = append(dst, `,"partner":`...)
	dst = render.AppendJSONString(dst, b.Partner)
	if a.sale.Video() {
		dst = append(dst, `,"format":"video"`...)
	} else {
		dst = append(dst, `,"format":"banner"`...)
	}
	dst = append(dst, `,"w":`...)
	dst = strconv.AppendInt(dst, int64(b.W), 10)
	dst = append(dst, `,"h":`...)
	dst = strconv.AppendInt(dst, int64(b.H), 10)
	if a.sale.Video() {
		dst = append(dst, `,"vast":`...)
		dst = render.AppendJSONString(dst, string(addImpression(nil, a.sale.Markup, a.imp[0])))
	} else {
		dst = append(dst, `,"html":`...)
		dst = render.AppendJSONString(dst, a.sale.Markup)
	}
	dst = append(dst, `,"impression_url":`...)
	dst = appendURL(dst, a.imp[0], baseSafe)
	return append(dst, '}')
}

// appendRaw appends s quoted, as it is when it is jsonSafe (an id always
// is, when the store holds what the model allows; a store edited around
// the model gets escaped, never a broken answer).
func appendRaw(dst []byte, s string) []byte {
	if !jsonSafe(unsafe.Slice(unsafe.StringData(s), len(s))) {
		return render.AppendJSONString(dst, s)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendURL appends a tracking URL: as it is when its base is jsonSafe
// (the rest is a path and a base64url token, both of ours), else escaped.
func appendURL(dst []byte, u string, baseSafe bool) []byte {
	if !baseSafe {
		return render.AppendJSONString(dst, u)
	}
	dst = append(dst, '"')
	dst = append(dst, u...)
	return append(dst, '"')
}

// jsonSafe reports whether b can stand in a JSON string, in a script too,
// as it is: printable ASCII other than the quote, the backslash and the
// characters render.AppendJSONString escapes for HTML (<, >, &).
func jsonSafe(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
