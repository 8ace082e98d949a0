package render

import (
	"strconv"
	"unicode/utf8"
)

// VAST InLine documents for decided video ads: where vast.go points a
// player at other ad servers (Wrapper), an InLine ad carries the media
// file itself. Players announce the highest VAST version they take, so the
// document is written in one of three dialects, each the structure its
// IAB schema defines (element order included):
//
//	2.0  no namespace; Ad@id required, no Ad@sequence (pods came with 3.0);
//	     Creative@AdID; Linear: Duration, VideoClicks, MediaFiles
//	3.0  as 2.0, plus Ad@sequence for pods and InLine's Advertiser
//	4.2  xmlns="http://www.iab.com/VAST"; AdServingId, Category,
//	     Creative@adId, UniversalAdId (after Linear, as the 4.2 XSD orders
//	     it); Linear: Duration, MediaFiles, VideoClicks
//
// A 2.0 document with several ads carries them in order without sequence:
// VAST 2 has no pods, so players take them as alternatives and most play
// only the first. A caller that needs a pod played whole has no VAST 2 way
// to ask for it.

// The versions AppendVASTInline writes.
const (
	VASTInline2 = "2.0"
	VASTInline3 = "3.0"
	VASTInline4 = "4.2"
)

// VASTVersions are the versions AppendVASTInline writes, oldest first.
var VASTVersions = [...]string{VASTInline2, VASTInline3, VASTInline4}

// VASTCategoryAuthority is the authority of the IAB content categories a
// 4.2 document names (Category@authority, required by the schema).
const VASTCategoryAuthority = "https://iabtechlab.com/standards/content-taxonomy"

// VASTAd is one decided video ad. Strings are any bytes: text is escaped,
// URLs go in CDATA, and what XML 1.0 cannot carry is replaced (see
// AppendVASTInline).
type VASTAd struct {
	// ID is the decision id: Ad@id and (4.2) AdServingId.
	ID string
	// AdSystem names the ad server, e.g. "Tsubame".
	AdSystem string
	// Title is the AdTitle (the creative id will do).
	Title string
	// Advertiser is optional (InLine's Advertiser, 3.0 and 4.2).
	Advertiser string
	// CreativeID is Creative@id and its ad id attribute (AdID in 2.0 and
	// 3.0, adId in 4.2); in 4.2 also the UniversalAdId, with
	// idRegistry="unknown" (no registry catalogues our ids), "unknown"
	// when empty.
	CreativeID string
	// Duration is in seconds, written HH:MM:SS (clamped to 00:00:00 through
	// 23:59:59, what the schemas' xs:time allows).
	Duration int
	// Media is the media file URL; MIME its type (MediaFile@type, e.g.
	// video/mp4); W and H its size in pixels (negative written as 0).
	Media string
	MIME  string
	W, H  int
	// Impression is the impression tracking URL; empty writes about:blank,
	// the placeholder the spec asks for.
	Impression string
	// ClickThrough is the click URL (ours, signed: a redirect to the
	// advertiser); empty writes no VideoClicks.
	ClickThrough string
	// Categories are IAB content categories, 4.2 Category elements under
	// VASTCategoryAuthority (2.0 and 3.0 have none); empty ones are skipped.
	Categories []string
}

// ParseVASTVersion maps the version a request announces ("2", "3", "4",
// "3.0", "4.1", "2.0.1" ...) to the highest version in VASTVersions that
// does not exceed it. A bare major means any version of it ("4" is
// "4.2"); a minor counts ("4.0" and "4.1" get "3.0", since a player that
// checks the version attribute may refuse a 4.2 document). ok is false for
// anything but digits in one to three dot-separated parts, and below 2.
// It does not allocate.
func ParseVASTVersion(s []byte) (v string, ok bool) {
	major, rest, ok := parseVASTNumber(s)
	if !ok {
		return "", false
	}
	minor := -1 // a bare major
	for part := 0; len(rest) > 0; part++ {
		if part == 2 || rest[0] != '.' {
			return "", false
		}
		var n int
		if n, rest, ok = parseVASTNumber(rest[1:]); !ok {
			return "", false
		}
		if part == 0 {
			minor = n
		}
	}
	switch {
	case major > 4, major == 4 && (minor < 0 || minor >= 2):
		return VASTInline4, true
	case major >= 3:
		return VASTInline3, true
	case major == 2:
		return VASTInline2, true
	}
	return "", false
}

// parseVASTNumber reads the decimal digits s starts with (at least one),
// saturating rather than overflowing.
func parseVASTNumber(s []byte) (n int, rest []byte, ok bool) {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if n < 1<<20 {
			n = n*10 + int(s[i]-'0')
		}
	}
	return n, s[i:], i > 0
}

// The document heads, through the VAST start tag's attributes. Only 4.x
// has a namespace: the 2.0 and 3.0 schemas have no target namespace.
const (
	vastInlineProlog = `<?xml version="1.0" encoding="UTF-8"?>` + "\n"
	vastInlineHead2  = vastInlineProlog + `<VAST version="` + VASTInline2 + `"`
	vastInlineHead3  = vastInlineProlog + `<VAST version="` + VASTInline3 + `"`
	vastInlineHead4  = vastInlineProlog + `<VAST version="` + VASTInline4 + `" xmlns="http://www.iab.com/VAST"`
)

// AppendVASTInline appends to dst a VAST document of the given version
// (one of VASTVersions; anything else writes 4.2) holding ads as InLine
// ads: an ad pod when there are several (Ad@sequence 1, 2, ..., except in
// 2.0, see above), no sequence for one, and an empty <VAST version=".."/>
// document, which players read as "no ad", when there are none.
//
// URLs are written in CDATA; text and attributes are escaped, with tab,
// newline and carriage return as character references so they read back
// unchanged. What XML 1.0 cannot carry (control characters, invalid
// UTF-8, U+FFFE, U+FFFF) is percent-encoded in URLs and written as U+FFFD
// in text, so the document stays well-formed whatever the strings hold.
// It allocates nothing beyond growing dst.
func AppendVASTInline(dst []byte, version string, ads []VASTAd) []byte {
	major := 4
	switch version {
	case VASTInline2:
		major, dst = 2, append(dst, vastInlineHead2...)
	case VASTInline3:
		major, dst = 3, append(dst, vastInlineHead3...)
	default:
		dst = append(dst, vastInlineHead4...)
	}
	if len(ads) == 0 {
		return append(dst, "/>"...)
	}
	dst = append(dst, '>')
	for i := range ads {
		seq := 0
		if len(ads) > 1 && major >= 3 {
			seq = i + 1
		}
		dst = appendVASTInlineAd(dst, major, seq, &ads[i])
	}
	return append(dst, "</VAST>"...)
}

// appendVASTInlineAd appends one Ad element; seq 0 writes no sequence.
func appendVASTInlineAd(dst []byte, major, seq int, ad *VASTAd) []byte {
	dst = append(dst, `<Ad id="`...)
	dst = appendVASTText(dst, ad.ID)
	if seq > 0 {
		dst = append(dst, `" sequence="`...)
		dst = strconv.AppendInt(dst, int64(seq), 10)
	}
	dst = append(dst, `"><InLine><AdSystem>`...)
	dst = appendVASTText(dst, ad.AdSystem)
	dst = append(dst, `</AdSystem>`...)
	if major >= 4 {
		// 4.2: AdSystem, Impression+, AdServingId, AdTitle, Advertiser?,
		// Category*, Creatives.
		dst = appendVASTImpression(dst, ad.Impression)
		dst = append(dst, `<AdServingId>`...)
		dst = appendVASTText(dst, ad.ID)
		dst = append(dst, `</AdServingId><AdTitle>`...)
		dst = appendVASTText(dst, ad.Title)
		dst = append(dst, `</AdTitle>`...)
		dst = appendVASTAdvertiser(dst, ad.Advertiser)
		for _, c := range ad.Categories {
			if c == "" {
				continue
			}
			dst = append(dst, `<Category authority="`+VASTCategoryAuthority+`">`...)
			dst = appendVASTText(dst, c)
			dst = append(dst, `</Category>`...)
		}
	} else {
		// 2.0 and 3.0: AdSystem, AdTitle, (3.0) Advertiser?, Impression+,
		// Creatives.
		dst = append(dst, `<AdTitle>`...)
		dst = appendVASTText(dst, ad.Title)
		dst = append(dst, `</AdTitle>`...)
		if major == 3 {
			dst = appendVASTAdvertiser(dst, ad.Advertiser)
		}
		dst = appendVASTImpression(dst, ad.Impression)
	}
	dst = append(dst, `<Creatives><Creative id="`...)
	dst = appendVASTText(dst, ad.CreativeID)
	if major >= 4 {
		dst = append(dst, `" adId="`...)
	} else {
		dst = append(dst, `" AdID="`...)
	}
	dst = appendVASTText(dst, ad.CreativeID)
	dst = append(dst, `"><Linear><Duration>`...)
	dst = appendVASTDuration(dst, ad.Duration)
	dst = append(dst, `</Duration>`...)
	if major >= 4 {
		dst = appendVASTMediaFiles(dst, ad)
		dst = appendVASTClicks(dst, ad.ClickThrough)
		dst = append(dst, `</Linear><UniversalAdId idRegistry="unknown">`...)
		if ad.CreativeID == "" {
			dst = append(dst, "unknown"...)
		} else {
			dst = appendVASTText(dst, ad.CreativeID)
		}
		dst = append(dst, `</UniversalAdId></Creative></Creatives></InLine></Ad>`...)
	} else {
		dst = appendVASTClicks(dst, ad.ClickThrough)
		dst = appendVASTMediaFiles(dst, ad)
		dst = append(dst, `</Linear></Creative></Creatives></InLine></Ad>`...)
	}
	return dst
}

func appendVASTImpression(dst []byte, u string) []byte {
	dst = append(dst, `<Impression>`...)
	if u == "" {
		dst = appendCDATA(dst, "about:blank")
	} else {
		dst = appendVASTURL(dst, u)
	}
	return append(dst, `</Impression>`...)
}

func appendVASTAdvertiser(dst []byte, name string) []byte {
	if name == "" {
		return dst
	}
	dst = append(dst, `<Advertiser>`...)
	dst = appendVASTText(dst, name)
	return append(dst, `</Advertiser>`...)
}

func appendVASTClicks(dst []byte, u string) []byte {
	if u == "" {
		return dst
	}
	dst = append(dst, `<VideoClicks><ClickThrough>`...)
	dst = appendVASTURL(dst, u)
	return append(dst, `</ClickThrough></VideoClicks>`...)
}

func appendVASTMediaFiles(dst []byte, ad *VASTAd) []byte {
	dst = append(dst, `<MediaFiles><MediaFile delivery="progressive" type="`...)
	dst = appendVASTText(dst, ad.MIME)
	dst = append(dst, `" width="`...)
	dst = strconv.AppendInt(dst, int64(max(ad.W, 0)), 10)
	dst = append(dst, `" height="`...)
	dst = strconv.AppendInt(dst, int64(max(ad.H, 0)), 10)
	dst = append(dst, `">`...)
	dst = appendVASTURL(dst, ad.Media)
	return append(dst, `</MediaFile></MediaFiles>`...)
}

// appendVASTDuration appends sec as HH:MM:SS within the range of xs:time,
// the type all three schemas give Duration.
func appendVASTDuration(dst []byte, sec int) []byte {
	sec = min(max(sec, 0), 24*60*60-1)
	h, m, s := sec/3600, sec/60%60, sec%60
	return append(dst, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
}

// appendVASTText appends s as escaped character data or double-quoted
// attribute value (appendXMLText) that reads back unchanged: tab, newline
// and carriage return as character references, which the parser's
// attribute and line-end normalisation leaves alone, and each character
// XML 1.0 cannot carry as U+FFFD.
func appendVASTText(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		n, ok := xmlCharAt(s, i)
		if ok {
			i += n
			continue
		}
		dst = appendXMLText(dst, s[start:i])
		switch s[i] {
		case '\t':
			dst = append(dst, "&#9;"...)
		case '\n':
			dst = append(dst, "&#10;"...)
		case '\r':
			dst = append(dst, "&#13;"...)
		default:
			dst = append(dst, "\uFFFD"...)
		}
		i += n
		start = i
	}
	return appendXMLText(dst, s[start:])
}

// appendVASTURL appends u in CDATA (appendCDATA), each byte of a character
// XML 1.0 cannot carry, and tab, newline and carriage return (which no URL
// holds unescaped, and which CDATA does not keep from line-end
// normalisation), percent-encoded between the sections.
func appendVASTURL(dst []byte, u string) []byte {
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(u); {
		n, ok := xmlCharAt(u, i)
		if ok {
			i += n
			continue
		}
		if start < i {
			dst = appendCDATA(dst, u[start:i])
		}
		for end := i + n; i < end; i++ {
			dst = append(dst, '%', hex[u[i]>>4], hex[u[i]&15])
		}
		start = i
	}
	if start < len(u) || start == 0 {
		dst = appendCDATA(dst, u[start:])
	}
	return dst
}

// xmlCharAt reports the width of the character at s[i] (1 for a byte of
// invalid UTF-8) and whether XML 1.0 carries it as it is, which excludes
// the control characters tab, newline and carriage return too.
func xmlCharAt(s string, i int) (n int, ok bool) {
	c := s[i]
	if c < utf8.RuneSelf {
		return 1, c >= 0x20
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return n, !(r == utf8.RuneError && n == 1) && r != 0xFFFE && r != 0xFFFF
}
