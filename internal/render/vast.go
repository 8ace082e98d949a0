package render

import (
	"net/url"
	"strconv"
	"strings"

	"tsubame"
)

// VAST 4 (IAB Video Ad Serving Template) for video players: /api/<endpoint>.xml
// answers a VAST document with one Wrapper ad per ad tag URL of the
// placement, in order (an ad pod, sequence 1, 2, ...), each pointing the
// player at the URL (VASTAdTagURI) for the VAST document it serves. An
// unknown placement is a VAST document without ads, which players take as
// "no ad".

// EncodingVAST is the VAST 4 document.
const EncodingVAST Encoding = 1

// FormatVAST is .xml: the VAST document.
const FormatVAST Format = 3

// VASTVersion is the version of VAST written.
const VASTVersion = "4.2"

// VASTOptions configure the VAST document.
type VASTOptions struct {
	// AdSystem names the ad server in each ad (AdSystem).
	AdSystem string
	// ImpressionURL is the impression tracker each ad carries, "{id}"
	// replaced by the placement id (URL-escaped); empty writes about:blank,
	// the placeholder VAST 4 asks for when there is none.
	ImpressionURL string
}

func init() {
	encodings[EncodingVAST] = func(opt EncoderOptions) Encoder {
		v := opt.VAST
		if v.AdSystem == "" {
			v.AdSystem = "Tsubame"
		}
		return Encoder{Encode: v.appendVAST, NotFound: []byte(vastHead + "/>")}
	}
	register(FormatVAST, spec{ext: "xml", contentType: ContentTypeXML, encoding: EncodingVAST})
}

const vastHead = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<VAST version="` + VASTVersion + `" xmlns="http://www.iab.com/VAST"`

// appendVAST appends p's VAST document to dst.
func (v VASTOptions) appendVAST(dst []byte, p *tsubame.Placement) []byte {
	if len(p.URLs) == 0 {
		return append(dst, vastHead+"/>"...)
	}
	impression := "about:blank"
	if v.ImpressionURL != "" {
		impression = strings.ReplaceAll(v.ImpressionURL, "{id}", url.QueryEscape(p.ID))
	}
	dst = append(dst, vastHead+">"...)
	for i, u := range p.URLs {
		seq := strconv.Itoa(i + 1)
		dst = append(dst, `<Ad id="`...)
		dst = appendXMLText(dst, p.ID+"-"+seq)
		dst = append(dst, `" sequence="`...)
		dst = append(dst, seq...)
		dst = append(dst, `"><Wrapper><AdSystem>`...)
		dst = appendXMLText(dst, v.AdSystem)
		dst = append(dst, `</AdSystem><Impression>`...)
		dst = appendCDATA(dst, impression)
		dst = append(dst, `</Impression><VASTAdTagURI>`...)
		dst = appendCDATA(dst, u)
		dst = append(dst, `</VASTAdTagURI></Wrapper></Ad>`...)
	}
	return append(dst, "</VAST>"...)
}

// appendCDATA appends s as a CDATA section (how VAST carries URLs), split
// where s holds "]]>".
func appendCDATA(dst []byte, s string) []byte {
	dst = append(dst, "<![CDATA["...)
	for {
		i := strings.Index(s, "]]>")
		if i < 0 {
			break
		}
		dst = append(dst, s[:i+2]...)
		dst = append(dst, "]]><![CDATA["...)
		s = s[i+2:]
	}
	dst = append(dst, s...)
	return append(dst, "]]>"...)
}

// appendXMLText appends s escaped for XML character data or an attribute
// value in double quotes.
func appendXMLText(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			dst = append(dst, "&amp;"...)
		case '<':
			dst = append(dst, "&lt;"...)
		case '>':
			dst = append(dst, "&gt;"...)
		case '"':
			dst = append(dst, "&quot;"...)
		case '\'':
			dst = append(dst, "&apos;"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
