package ads

import (
	"strings"
	"tsubame"
	"tsubame/internal/render"
)

// appendVAST appends a VAST document (in the version the request allows)
// of the first n decisions that are videos; none makes the empty
// document players read as "no ad".
func (s *Service) appendVAST(dst []byte, a *answer, n int) []byte {
	if a.sale != nil {
		if a.sale.Video() {
			return addImpression(dst, a.sale.Markup, a.imp[0])
		}
		n = 0 // a banner sold: no video to answer
	}
	var ads [len(a.out)]render.VASTAd
	k := 0
	for i := range n {
		if a.out[i].Creative.Format == tsubame.FormatVideo {
			ads[k] = s.vastAd(a, i)
			k++
		}
	}
	return render.AppendVASTInline(dst, a.vast, ads[:k])
}

// appendVASTOne appends the VAST document of decision i alone.
func (s *Service) appendVASTOne(dst []byte, a *answer, i int) []byte {
	ad := [1]render.VASTAd{s.vastAd(a, i)}
	return render.AppendVASTInline(dst, a.vast, ad[:])
}

func (s *Service) vastAd(a *answer, i int) render.VASTAd {
	d := &a.out[i]
	c := d.Creative
	mime := "video/mp4"
	if len(c.MIMEs) > 0 {
		mime = c.MIMEs[0]
	}
	return render.VASTAd{
		ID: a.ids[i], AdSystem: s.opt.AdSystem, Title: c.ID, Advertiser: d.Line.Advertiser, CreativeID: c.ID,
		Duration: c.Duration, Media: c.Media, MIME: mime, W: c.W, H: c.H,
		Impression: a.imp[i], ClickThrough: a.click[i], Categories: c.Categories,
	}
}

// addImpression appends a partner's VAST document with this server's
// impression URL added to its ad (an Impression element after the opening
// of its first InLine or Wrapper), so that the player fires it as it fires
// the partner's own. A document without either is appended as it is.
func addImpression(dst []byte, doc, imp string) []byte {
	at := -1
	for _, tag := range [...]string{"<InLine", "<Wrapper"} {
		i := strings.Index(doc, tag)
		if i < 0 {
			continue
		}
		if j := strings.IndexByte(doc[i:], '>'); j > 0 && (at < 0 || i+j+1 < at) {
			at = i + j + 1
		}
	}
	if at < 0 {
		return append(dst, doc...)
	}
	dst = append(dst, doc[:at]...)
	dst = append(dst, "<Impression><![CDATA["...)
	dst = append(dst, strings.ReplaceAll(imp, "]]>", "]]]]><![CDATA[>")...)
	dst = append(dst, "]]></Impression>"...)
	return append(dst, doc[at:]...)
}
