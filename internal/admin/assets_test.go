package admin

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"mime/multipart"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/asset"
)

// assetHarness is a harness whose store keeps uploads of images up to 4
// KiB and videos up to 8 KiB, with a viewer's and an editor's token.
func assetHarness(t *testing.T, base string) (*harness, map[Role][]string) {
	t.Helper()
	h := newHarness(t, true, func(o *Options) {
		o.Assets = o.Placements.(tsubame.Assets)
		o.AssetLimits = asset.Limits{MaxImageBytes: 4 << 10, MaxVideoBytes: 8 << 10}
		o.Tags = func() TagSetup { return TagSetup{BaseURL: base, PublicPort: "8080"} }
	})
	auth := map[Role][]string{}
	for _, role := range []Role{RoleViewer, RoleEditor} {
		name := "u-" + string(role)
		if err := h.accounts.CreateUserWithRole(name, testPassword, "", role, PasswordPolicy{MinLength: 12}); err != nil {
			t.Fatal(err)
		}
		plain, _, err := h.accounts.CreateToken(name, "assets", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		auth[role] = []string{"Authorization", "Bearer " + plain}
	}
	return h, auth
}

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// An editor uploads a file, raw or in a form, whatever type it claims: the
// store keeps it under its hash and the answer gives its public URL and
// size; the upload is audited. A viewer may not upload; a file of a type
// not kept or past its limit is refused, and audited so.
func TestUploadAsset(t *testing.T) {
	h, auth := assetHarness(t, "https://ads.example/")
	ed, view := auth[RoleEditor], auth[RoleViewer]
	pic := pngOf(t, 300, 250)
	sum := tsubame.AssetSum(pic)

	r := h.do("POST", "/api/v1/assets", string(pic), append([]string{"Content-Type", "text/plain"}, ed...)...)
	if r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	got := r.json(t)
	want := map[string]any{"url": "https://ads.example/assets/" + sum + ".png", "sha256": sum, "content_type": "image/png",
		"w": 300.0, "h": 250.0, "bytes": float64(len(pic)), "video": false}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	kept, err := h.store.(tsubame.Assets).GetAsset(t.Context(), sum)
	if err != nil || kept.ContentType != "image/png" || !bytes.Equal(kept.Data, pic) {
		t.Fatalf("the store keeps %+v, %v", kept, err)
	}

	// In a form, as a browser's FormData sends it.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("note", "ignored")
	fw, _ := mw.CreateFormFile("file", "banner.png")
	small := pngOf(t, 30, 25)
	_, _ = fw.Write(small)
	_ = mw.Close()
	r = h.do("POST", "/api/v1/assets", form.String(), append([]string{"Content-Type", mw.FormDataContentType()}, ed...)...)
	if r.status != 200 || r.json(t)["sha256"] != tsubame.AssetSum(small) || r.json(t)["w"] != 30.0 {
		t.Fatalf("form upload: %d %s", r.status, r.body)
	}

	if r := h.do("POST", "/api/v1/assets", string(pic), view...); r.status != 403 {
		t.Errorf("a viewer's upload: %d, want 403", r.status)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"svg", `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`, 400, "SVG image, which is refused"},
		{"text", "hello\n", 400, "text/plain"},
		{"empty", "", 400, "empty"},
		{"unknown bytes", "\x00\x01\x02\x03", 400, "cannot be told"},
		{"png over its limit", string(append(pngOf(t, 1, 1), make([]byte, 5<<10)...)), 413, "ads.assets.max_image_bytes"},
		{"body over both limits", string(make([]byte, 9<<10)), 413, "exceeds"},
	} {
		r := h.do("POST", "/api/v1/assets", tc.body, append([]string{"Content-Type", "image/png"}, ed...)...)
		if r.status != tc.status || !strings.Contains(string(r.body), tc.msg) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, r.status, r.body, tc.status, tc.msg)
		}
	}

	// Refusals repeat: the first of each result is written in full, the
	// others counted (Audit).
	uploads, refused := 0, map[string]bool{}
	for _, rec := range h.auditLines() {
		switch {
		case rec.Action != "asset.upload":
		case rec.Result == "ok" && rec.Target == sum:
			if rec.Detail != fmt.Sprintf("image/png 300×250, %d bytes", len(pic)) {
				t.Errorf("the upload's audit detail: %q", rec.Detail)
			}
			uploads++
		case rec.Result != "ok":
			refused[rec.Result] = true
		}
	}
	if uploads != 1 || !refused["invalid"] || !refused["error"] {
		t.Errorf("audit: %d uploads of the banner, refusals %v; want 1, invalid and error", uploads, refused)
	}
}

// Without ads.tracking.url the URL's base is a guess from the admin
// request's host and the public port.
func TestUploadAssetGuessesTheBase(t *testing.T) {
	h, auth := assetHarness(t, "")
	r := h.do("POST", "/api/v1/assets", string(pngOf(t, 2, 2)), auth[RoleEditor]...)
	if u, _ := r.json(t)["url"].(string); r.status != 200 || !strings.HasPrefix(u, "http://127.0.0.1:8080/assets/") {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
}
