// Package asset reads creatives' uploaded files and serves them: the type
// of a file is read from its bytes (Check), never taken from the client,
// and only the types an ad may show are kept (PNG, JPEG, GIF and WebP
// images; MP4 and WebM videos). SVG is refused: it is a document that may
// carry script. The public listener serves what the store keeps under
// /assets/<sha256>.<ext> (Server), from a bounded in-process cache.
//
// It imports the root package only, beside the public listener's Route
// types.
package asset

import (
	"bytes"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"strings"

	"golang.org/x/image/webp"

	"tsubame"
)

// Type is a kind of file the server keeps.
type Type struct {
	// ContentType is the media type served (image/png).
	ContentType string
	// Ext is the extension of its URL, without the dot (png).
	Ext   string
	Video bool
	// match reports whether data starts as a file of the type does.
	match func(data []byte) bool
	// config reads an image's size from its header (nil: a video, whose
	// size the creative gives).
	config func(io.Reader) (image.Config, error)
}

// Types are the kinds of file kept, in the order they are tried.
var Types = []Type{
	{ContentType: "image/png", Ext: "png", match: prefix("\x89PNG\r\n\x1a\n"), config: png.DecodeConfig},
	{ContentType: "image/jpeg", Ext: "jpg", match: prefix("\xff\xd8\xff"), config: jpeg.DecodeConfig},
	{ContentType: "image/gif", Ext: "gif", match: func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	}, config: gif.DecodeConfig},
	{ContentType: "image/webp", Ext: "webp", match: func(b []byte) bool {
		return len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP"
	}, config: webp.DecodeConfig},
	{ContentType: "video/mp4", Ext: "mp4", Video: true, match: isMP4},
	{ContentType: "video/webm", Ext: "webm", Video: true, match: isWebM},
}

func prefix(p string) func([]byte) bool {
	return func(b []byte) bool { return bytes.HasPrefix(b, []byte(p)) }
}

// isMP4 reports an ISO base media file whose first box is its ftyp, of a
// brand other than QuickTime's (whose files browsers do not all play).
func isMP4(b []byte) bool {
	return len(b) >= 12 && string(b[4:8]) == "ftyp" && string(b[8:12]) != "qt  "
}

// isWebM reports an EBML file whose header names the webm doc type (not
// matroska, which browsers do not play).
func isWebM(b []byte) bool {
	if !bytes.HasPrefix(b, []byte("\x1a\x45\xdf\xa3")) {
		return false
	}
	head := b[:min(len(b), 64)]
	i := bytes.Index(head, []byte("\x42\x82")) // DocType
	return i >= 0 && bytes.Contains(head[i:], []byte("webm"))
}

// TypeOf is the type of the given content type, false for one not kept.
func TypeOf(contentType string) (Type, bool) {
	for _, t := range Types {
		if t.ContentType == contentType {
			return t, true
		}
	}
	return Type{}, false
}

// Info is what Check read of a file.
type Info struct {
	Type
	// W and H are an image's size in pixels (0 for a video).
	W, H int
}

// Limits bound the files kept, by kind.
type Limits struct {
	MaxImageBytes int64
	MaxVideoBytes int64
}

// Max is the larger limit: what a request's body may hold.
func (l Limits) Max() int64 { return max(l.MaxImageBytes, l.MaxVideoBytes) }

// Check reads the type of data from its bytes and, for an image, its
// size from its header, and checks them against lim: EINVALID for a type
// not kept (named as the bytes look, SVG and HTML said so) or an image
// whose header cannot be read or whose size is out of the creative's
// bounds, ETOOLARGE past its kind's limit.
func Check(data []byte, lim Limits) (Info, error) {
	if len(data) == 0 {
		return Info{}, tsubame.Errorf(tsubame.EINVALID, "the file is empty")
	}
	for _, t := range Types {
		if !t.match(data) {
			continue
		}
		limit, kind := lim.MaxImageBytes, "an image"
		if t.Video {
			limit, kind = lim.MaxVideoBytes, "a video"
		}
		if int64(len(data)) > limit {
			return Info{}, tsubame.Errorf(tsubame.ETOOLARGE, "the file has %d bytes, and %s may have at most %d (ads.assets.max_%s_bytes)",
				len(data), kind, limit, map[bool]string{false: "image", true: "video"}[t.Video])
		}
		info := Info{Type: t}
		if t.config == nil {
			return info, nil
		}
		cfg, err := t.config(bytes.NewReader(data))
		if err != nil {
			return Info{}, tsubame.Errorf(tsubame.EINVALID, "the file starts as %s but its header cannot be read: %v", t.ContentType, err)
		}
		if cfg.Width < 1 || cfg.Height < 1 || cfg.Width > tsubame.MaxCreativeDimension || cfg.Height > tsubame.MaxCreativeDimension {
			return Info{}, tsubame.Errorf(tsubame.EINVALID, "the image is %d×%d pixels: a creative's sides are 1 to %d",
				cfg.Width, cfg.Height, tsubame.MaxCreativeDimension)
		}
		info.W, info.H = cfg.Width, cfg.Height
		return info, nil
	}
	return Info{}, tsubame.Errorf(tsubame.EINVALID, "%s: upload a PNG, JPEG, GIF or WebP image, or an MP4 or WebM video", describe(data))
}

// describe says what a file not kept looks like, for the refusal.
func describe(data []byte) string {
	head := bytes.ToLower(data[:min(len(data), 1024)])
	if bytes.Contains(head, []byte("<svg")) {
		return "the file is an SVG image, which is refused: it is a document that may run script"
	}
	sniffed := http.DetectContentType(data)
	if i := strings.IndexByte(sniffed, ';'); i >= 0 {
		sniffed = sniffed[:i]
	}
	switch {
	case sniffed == "text/html" || sniffed == "text/xml":
		return fmt.Sprintf("the file is %s, which is refused: an HTML creative is written in its form, not uploaded", sniffed)
	case sniffed == "application/octet-stream":
		return "the file's type cannot be told from its bytes"
	}
	return fmt.Sprintf("the file is %s, which is not kept", sniffed)
}
