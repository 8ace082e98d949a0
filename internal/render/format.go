package render

import (
	"slices"

	"tsubame"
)

// Format is a response format, chosen by the request path's extension
// (/api/sample4.js). Each format is one file of this package that
// registers its spec: the extension, the content type, the payload
// encoding it serves and its framing.
type Format uint8

// MaxFormats bounds the formats; a Format indexes arrays of this size.
const MaxFormats = 8

// spec is what a format is.
type spec struct {
	ext         string
	contentType string
	encoding    Encoding
	callback    bool // framed as callback(payload); the callback parameter is required
}

var formats [MaxFormats]*spec

// register adds a format (at init).
func register(f Format, s spec) {
	if f == 0 || int(f) >= MaxFormats || formats[f] != nil || encodings[s.encoding] == nil {
		panic("render: bad format registration " + s.ext)
	}
	formats[f] = &s
}

// ParseFormat maps a path extension (without the dot) to its Format.
func ParseFormat(ext []byte) (Format, bool) {
	for f, s := range formats {
		if s != nil && s.ext == string(ext) {
			return Format(f), true
		}
	}
	return 0, false
}

// Formats lists every format, in the order of their values.
func Formats() []Format {
	var out []Format
	for f, s := range formats {
		if s != nil {
			out = append(out, Format(f))
		}
	}
	return out
}

// FormatNames lists the extensions of every format.
func FormatNames() []string {
	var out []string
	for _, f := range Formats() {
		out = append(out, f.String())
	}
	return out
}

// String returns the extension the format is served under.
func (f Format) String() string {
	if s := f.spec(); s != nil {
		return s.ext
	}
	return "unknown"
}

// ContentType is the Content-Type header value for responses in f.
func (f Format) ContentType() string { return f.spec().contentType }

// Encoding is the payload encoding f serves.
func (f Format) Encoding() Encoding { return f.spec().encoding }

// Callback reports whether f frames its payload as callback(payload); and
// so needs the callback parameter.
func (f Format) Callback() bool { return f.spec().callback }

func (f Format) spec() *spec {
	if int(f) < MaxFormats {
		return formats[f]
	}
	return nil
}

// Encoding is a way of encoding a placement: the payload a response in a
// format carries, and what a cache entry keeps (one payload per encoding
// in use).
type Encoding uint8

// MaxEncodings bounds the encodings; an Encoding indexes arrays of this
// size.
const MaxEncodings = 4

// Encoder encodes placements in one encoding.
type Encoder struct {
	// Encode appends the payload of a found placement to dst.
	Encode func(dst []byte, p *tsubame.Placement) []byte
	// NotFound is the payload for an unknown placement.
	NotFound []byte
}

// EncoderOptions configure the encoders that take options.
type EncoderOptions struct {
	VAST VASTOptions
}

// encodings builds each encoding's Encoder from the options (at init).
var encodings [MaxEncodings]func(EncoderOptions) Encoder

// Encoders are the encoders of the encodings the given formats serve,
// indexed by Encoding (the others are zero).
func Encoders(opt EncoderOptions, served []Format) [MaxEncodings]Encoder {
	var out [MaxEncodings]Encoder
	for _, f := range served {
		if e := f.Encoding(); out[e].Encode == nil {
			out[e] = encodings[e](opt)
		}
	}
	return out
}

// Uses reports whether a format among served serves encoding e.
func Uses(served []Format, e Encoding) bool {
	return slices.ContainsFunc(served, func(f Format) bool { return f.Encoding() == e })
}
