package ads

import (
	"context"
	"net/http"
	"strconv"

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
	buf := a.urlBuf[:0]
	*a = answer{urlBuf: buf}
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
func (s *Service) appendJSON(dst []byte, a *answer) []byte {
	dst = append(dst, `{"decisions":[`...)
	for i := range a.n {
		d := &a.out[i]
		c := d.Creative
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"decision":`...)
		dst = render.AppendJSONString(dst, a.ids[i])
		dst = append(dst, `,"line_item":`...)
		dst = render.AppendJSONString(dst, d.Line.ID)
		dst = append(dst, `,"campaign":`...)
		dst = render.AppendJSONString(dst, d.Line.Campaign)
		dst = append(dst, `,"creative":`...)
		dst = render.AppendJSONString(dst, c.ID)
		dst = append(dst, `,"format":`...)
		dst = render.AppendJSONString(dst, c.Format)
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
		dst = render.AppendJSONString(dst, a.imp[i])
		dst = append(dst, `,"click_url":`...)
		dst = render.AppendJSONString(dst, a.click[i])
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}
