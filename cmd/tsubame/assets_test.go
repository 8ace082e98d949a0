package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
)

// editorToken makes an editor with the CLI beside the running server p and
// returns an API token of it.
func editorToken(t *testing.T, p *proc) string {
	t.Helper()
	dataDir := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	if code, _, stderr := runCmd(t, dataDir, "correct horse battery staple\n", "admin", "create-user", "-role", "editor", "ed"); code != 0 {
		t.Fatalf("create-user: %d %s", code, stderr)
	}
	code, token, stderr := runCmd(t, dataDir, "", "admin", "create-token", "-user", "ed", "-name", "uploads")
	if token = strings.TrimSpace(token); code != 0 || token == "" {
		t.Fatalf("create-token: %d %s", code, stderr)
	}
	return token
}

// upload posts data to the admin API's uploads with token.
func upload(t *testing.T, adminURL, token, contentType string, data []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", adminURL+"/api/v1/assets", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("upload answered %d %q", resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// Two nodes share one Redis: a file uploaded through one node's admin API
// is served by the other's public listener, byte for byte, with its type,
// and cached for good; the URL the upload answers is the first node's.
func TestAssetUploadedOnOneNodeServedByAnother(t *testing.T) {
	redistest.Require(t)
	env := []string{"TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS=" + redistest.Start(t).Addr,
		"TSUBAME_STORE_REDIS_KEY_PREFIX=" + fmt.Sprintf("t%d:", time.Now().UnixNano())}
	adminAddr := "127.0.0.1:" + freePort(t)
	a := startBinary(t, append(env, "TSUBAME_ADMIN_LISTEN="+adminAddr)...)
	b := startBinary(t, env...)
	token := editorToken(t, a)

	var pic bytes.Buffer
	img := image.NewNRGBA(image.Rect(0, 0, 120, 60))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	if err := png.Encode(&pic, img); err != nil {
		t.Fatal(err)
	}
	sum := tsubame.AssetSum(pic.Bytes())
	code, ans := upload(t, "http://"+adminAddr, token, "application/octet-stream", pic.Bytes())
	if code != 200 || ans["sha256"] != sum || ans["w"] != 120.0 || ans["h"] != 60.0 || ans["content_type"] != "image/png" {
		t.Fatalf("upload: %d %v", code, ans)
	}
	if want := a.base + "/assets/" + sum + ".png"; ans["url"] != want {
		t.Errorf("url %v, want %s", ans["url"], want)
	}
	resp, err := http.Get(b.base + "/assets/" + sum + ".png")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, pic.Bytes()) {
		t.Fatalf("the other node: %d, %d bytes, want the %d uploaded", resp.StatusCode, len(got), pic.Len())
	}
	for k, v := range map[string]string{"Content-Type": "image/png", "X-Content-Type-Options": "nosniff",
		"Cache-Control": "public, max-age=31536000, immutable", "ETag": `"` + sum + `"`} {
		if resp.Header.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, resp.Header.Get(k), v)
		}
	}
	if resp, err := http.Get(b.base + "/assets/" + strings.Repeat("0", 64) + ".png"); err != nil || resp.StatusCode != 404 {
		t.Errorf("an unknown asset: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// An SVG is refused, with why.
	code, ans = upload(t, "http://"+adminAddr, token, "image/svg+xml", []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`))
	if msg, _ := ans["error"].(string); code != 400 || !strings.Contains(msg, "SVG") {
		t.Errorf("an SVG upload: %d %v", code, ans)
	}
}
