package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tsubame/internal/h2call/fakeapi"
	"tsubame/internal/store/embedded"
)

// The real binary takes /callback and LINE webhooks, answers at once, calls
// the (fake) external API once per message although each call takes
// 100–200 ms, records every result, and drains on SIGTERM. "At once" is
// proved without a clock: the API holds every answer until all callbacks
// have been answered, so a server that waited for it would never answer.
func TestBinaryWebhookEndToEnd(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{MinDelay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Token: "access-token", RecordTexts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	const secret = "line-channel-secret"
	const callbackToken = "0123456789abcdef0123456789abcdef-callback"
	p := startBinary(t, "TSUBAME_WEBHOOK_API_URL="+api.URL, "TSUBAME_WEBHOOK_API_TOKEN=access-token",
		"TSUBAME_WEBHOOK_API_H2C=true", "TSUBAME_LINE_CHANNEL_SECRET="+secret, "TSUBAME_WEBHOOK_CALLBACK_TOKEN="+callbackToken)
	bearer := []string{"Authorization", "Bearer " + callbackToken}

	client := &http.Client{Timeout: time.Minute} // a server stuck on the held API fails instead of hanging
	post := func(path, body string, header ...string) (int, string) {
		req, _ := http.NewRequest("POST", p.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err) // called from the posting goroutines too
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	api.Hold()
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 50 {
				status, body := post("/callback", fmt.Sprintf(`{"messages":"%d-%d-a,%d-%d-b,%d-%d-c"}`, c, i, c, i, c, i), bearer...)
				if status != 200 || body != `{"ok":"ok"}` {
					t.Errorf("callback: %d %s", status, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if n := api.Answered(); n != 0 {
		t.Fatalf("the held API answered %d calls", n)
	}
	api.Release()
	lineBody := `{"destination":"U1","events":[{"type":"message","webhookEventId":"01H0","replyToken":"rt","timestamp":1,` +
		`"deliveryContext":{"isRedelivery":false},"message":{"id":"1","type":"text","text":"hi from LINE"}}]}`
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(lineBody))
	sig := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if status, body := post("/webhook/line", lineBody, "X-Line-Signature", sig); status != 200 {
		t.Fatalf("line: %d %s", status, body)
	}
	if status, _ := post("/webhook/line", lineBody, "X-Line-Signature", sig); status != 200 { // a redelivery
		t.Fatalf("line redelivery: %d", status)
	}
	if status, _ := post("/webhook/line", lineBody, "X-Line-Signature", "bm9wZQ=="); status != 401 {
		t.Fatalf("bad signature: %d", status)
	}
	if status, _ := post("/callback", `{"messages":`, bearer...); status != 400 {
		t.Fatal("malformed body accepted")
	}
	// Without the bearer token, or with another, /callback answers 401 and
	// calls nothing; the scheme is case-insensitive (RFC 9110 §11.1).
	for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + callbackToken, "Bearer " + callbackToken + "x", "Bearer " + callbackToken[:len(callbackToken)-1]} {
		if status, body := post("/callback", `{"messages":"unauthorized"}`, "Authorization", auth); status != 401 {
			t.Fatalf("Authorization %q: %d %s, want 401", auth, status, body)
		}
	}
	if status, body := post("/callback", `{"messages":"lower-case-scheme"}`, "Authorization", "bearer "+callbackToken); status != 200 {
		t.Fatalf("lower-case bearer scheme: %d %s", status, body)
	}
	if resp, err := http.Get(p.base + "/callback"); err != nil || resp.StatusCode != 405 {
		t.Fatalf("GET /callback: %v %v", resp, err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.logs)
	}
	const want = 4*50*3 + 1 + 1 // the callbacks, the LINE message and the lower-case-scheme callback
	distinct, maxAttempts := api.Keys()
	if distinct != want || maxAttempts != 1 || api.Bad() != 0 {
		t.Fatalf("API saw %d messages (max %d attempts, %d malformed), want %d each once\n%s", distinct, maxAttempts, api.Bad(), want, p.logs)
	}
	for text, n := range api.Texts() {
		if n != 1 {
			t.Fatalf("%q reached the API %d times", text, n)
		}
	}
	s, err := embedded.Open(filepath.Join(p.dataDir, embedded.FileName), embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.CountResults(context.Background()); err != nil || n != want {
		t.Fatalf("%d results recorded (%v), want %d", n, err, want)
	}
	if texts := api.Texts(); texts["unauthorized"] != 0 {
		t.Fatal("an unauthorized /callback reached the API")
	}
	if bytes.Contains(p.logs.Bytes(), []byte(secret)) || bytes.Contains(p.logs.Bytes(), []byte("access-token")) ||
		bytes.Contains(p.logs.Bytes(), []byte(callbackToken)) {
		t.Fatalf("a secret reached the process log:\n%s", p.logs)
	}
}
