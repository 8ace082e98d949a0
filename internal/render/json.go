package render

import "tsubame"

// The JSON payload, {"urls":[...]}, served as JSONP (.js) and JSON (.json).

// EncodingJSON is the {"urls":[...]} payload.
const EncodingJSON Encoding = 0

// Formats over the JSON payload.
const (
	FormatJSONP Format = 1 // .js: callback(payload);
	FormatJSON  Format = 2 // .json: payload
)

func init() {
	encodings[EncodingJSON] = func(EncoderOptions) Encoder {
		return Encoder{Encode: AppendPayload, NotFound: NotFoundPayload}
	}
	register(FormatJSONP, spec{ext: "js", contentType: ContentTypeJS, encoding: EncodingJSON, callback: true})
	register(FormatJSON, spec{ext: "json", contentType: ContentTypeJSON, encoding: EncodingJSON})
}

// AppendPayload appends p's payload, {"urls":[...]}, to dst.
func AppendPayload(dst []byte, p *tsubame.Placement) []byte {
	return AppendURLs(dst, p.URLs)
}

// AppendURLs appends the payload {"urls":[...]} for the given URLs to dst.
func AppendURLs(dst []byte, urls []string) []byte {
	dst = append(dst, `{"urls":[`...)
	for i, u := range urls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, u)
	}
	return append(dst, "]}"...)
}
