package asset_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/asset"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
)

var lim = asset.Limits{MaxImageBytes: 1 << 20, MaxVideoBytes: 4 << 20}

func picture(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i)
	}
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	return img
}

func encoded(t *testing.T, enc func(io.Writer, image.Image) error, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, picture(w, h)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A tiny lossless WebP of 1×1 pixel (as libwebp writes one).
var webp1x1 = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func TestCheckReadsTypeAndSizeFromTheBytes(t *testing.T) {
	for _, tc := range []struct {
		name, typ, ext string
		data           []byte
		w, h           int
	}{
		{"png", "image/png", "png", encoded(t, png.Encode, 300, 250), 300, 250},
		{"jpeg", "image/jpeg", "jpg", encoded(t, func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) }, 728, 90), 728, 90},
		{"gif", "image/gif", "gif", encoded(t, func(w io.Writer, m image.Image) error { return gif.Encode(w, m, nil) }, 160, 600), 160, 600},
		{"webp", "image/webp", "webp", webp1x1, 1, 1},
		{"mp4", "video/mp4", "mp4", []byte("\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41"), 0, 0},
		{"webm", "video/webm", "webm", []byte("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\xf2\x81\x04\x42\xf3\x81\x08\x42\x82\x84webm\x42\x87\x81\x04"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := asset.Check(tc.data, lim)
			if err != nil {
				t.Fatal(err)
			}
			if info.ContentType != tc.typ || info.Ext != tc.ext || info.W != tc.w || info.H != tc.h || info.Video != strings.HasPrefix(tc.typ, "video/") {
				t.Fatalf("got %s .%s %d×%d video %v, want %s .%s %d×%d", info.ContentType, info.Ext, info.W, info.H, info.Video, tc.typ, tc.ext, tc.w, tc.h)
			}
		})
	}
}

func TestCheckRefuses(t *testing.T) {
	bigPNG := encoded(t, png.Encode, 600, 600) // noise compresses badly: over 1 KiB
	for _, tc := range []struct {
		name string
		data []byte
		lim  asset.Limits
		code string
		msg  string
	}{
		{"empty", nil, lim, tsubame.EINVALID, "the file is empty"},
		{"svg", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`), lim, tsubame.EINVALID, "SVG image, which is refused"},
		{"svg without a prolog", []byte(`<svg onload="alert(1)"/>`), lim, tsubame.EINVALID, "SVG"},
		{"html", []byte("<!DOCTYPE html><html><script>alert(1)</script>"), lim, tsubame.EINVALID, "text/html, which is refused"},
		{"text", []byte("just some words\n"), lim, tsubame.EINVALID, "text/plain, which is not kept"},
		{"binary", []byte{0, 1, 2, 3, 4, 5}, lim, tsubame.EINVALID, "cannot be told"},
		{"pdf", []byte("%PDF-1.7\n"), lim, tsubame.EINVALID, "application/pdf"},
		{"quicktime", []byte("\x00\x00\x00\x14ftypqt  \x00\x00\x00\x00qt  "), lim, tsubame.EINVALID, "upload a PNG"},
		{"matroska", []byte("\x1a\x45\xdf\xa3\x9f\x42\x82\x88matroska"), lim, tsubame.EINVALID, "upload a PNG"},
		{"truncated png", []byte("\x89PNG\r\n\x1a\n\x00\x00"), lim, tsubame.EINVALID, "header cannot be read"},
		{"image over its limit", bigPNG, asset.Limits{MaxImageBytes: 1024, MaxVideoBytes: 1 << 30}, tsubame.ETOOLARGE, "ads.assets.max_image_bytes"},
		{"video over its limit", append([]byte("\x00\x00\x00\x20ftypisom"), make([]byte, 2048)...), asset.Limits{MaxImageBytes: 1 << 30, MaxVideoBytes: 1024}, tsubame.ETOOLARGE, "ads.assets.max_video_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := asset.Check(tc.data, tc.lim)
			if tsubame.ErrorCode(err) != tc.code || !strings.Contains(tsubame.ErrorMessage(err), tc.msg) {
				t.Fatalf("got %v (%s), want %s with %q", err, tsubame.ErrorCode(err), tc.code, tc.msg)
			}
		})
	}
}

// The public route serves what the store keeps under its name and type's
// extension, with headers that keep a browser from reading it as anything
// else, cached for a year, and 304 to a revalidation; a 404 for anything
// else.
func TestServeAssets(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	data := encoded(t, png.Encode, 30, 25)
	sum := tsubame.AssetSum(data)
	if err := st.PutAsset(t.Context(), &tsubame.Asset{SHA256: sum, ContentType: "image/png", Data: data}); err != nil {
		t.Fatal(err)
	}
	as, err := asset.NewServer(st, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(as.Close)
	srv, err := server.New(server.Options{Routes: []server.Route{as.Route()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	base := "http://" + ln.Addr().String()
	get := func(path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for range 2 { // from the store, then from the cache
		resp, b := get("/assets/" + sum + ".png")
		if resp.StatusCode != 200 || !bytes.Equal(b, data) {
			t.Fatalf("GET: %d, %d bytes", resp.StatusCode, len(b))
		}
		for k, v := range map[string]string{"Content-Type": "image/png", "X-Content-Type-Options": "nosniff",
			"Cache-Control": "public, max-age=31536000, immutable", "ETag": `"` + sum + `"`,
			"Content-Security-Policy": "default-src 'none'; sandbox"} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}
	}
	if hits, misses := as.Stats(); hits != 1 || misses != 1 {
		t.Errorf("cache: %d hits, %d misses, want 1 and 1", hits, misses)
	}
	if resp, b := get("/assets/"+sum+".png", "If-None-Match", `W/"x", "`+sum+`"`); resp.StatusCode != 304 || len(b) != 0 {
		t.Errorf("revalidation: %d, %d bytes", resp.StatusCode, len(b))
	}
	for _, path := range []string{"/assets/" + sum + ".gif", "/assets/" + sum, "/assets/" + sum + ".png.html", "/assets/" + strings.Repeat("0", 64) + ".png",
		"/assets/../" + sum + ".png", "/assets/x.png", "/assets/"} {
		if resp, _ := get(path); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
}
