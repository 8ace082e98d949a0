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
// impression URL added to its first ad, beside the ad's own Impression
// elements (before the first of them, where the schema's order puts
// them), else after its AdSystem or AdTitle, else after the opening of
// its InLine or Wrapper: the player fires it as it fires the partner's.
// The auction serves only documents with an InLine or Wrapper.
func addImpression(dst []byte, doc, imp string) []byte {
	start := -1
	for _, tag := range [...]string{"<InLine", "<Wrapper"} {
		if i := strings.Index(doc, tag); i >= 0 && (start < 0 || i < start) {
			start = i
		}
	}
	if start < 0 {
		return append(dst, doc...)
	}
	open := strings.IndexByte(doc[start:], '>')
	if open < 0 {
		return append(dst, doc...)
	}
	at := start + open + 1
	if i := strings.Index(doc[at:], "<Impression"); i >= 0 {
		at += i
	} else {
		for _, end := range [...]string{"</AdTitle>", "</AdSystem>"} {
			if i := strings.Index(doc[at:], end); i >= 0 {
				at += i + len(end)
				break
			}
		}
	}
	dst = append(dst, doc[:at]...)
	dst = append(dst, "<Impression><![CDATA["...)
	dst = append(dst, strings.ReplaceAll(imp, "]]>", "]]]]><![CDATA[>")...)
	dst = append(dst, "]]></Impression>"...)
	return append(dst, doc[at:]...)
}
