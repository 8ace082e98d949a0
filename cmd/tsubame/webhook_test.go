package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// The real binary serves the Slack Events API at /webhook/slack: the URL
// verification, signed events (a retry by Slack processed once, a replay
// and a forgery refused), each person's message answered through
// chat.postMessage with the bot token (a bot's message not), and what
// Slack refuses dead-lettered with its reason.
func TestBinarySlackEndToEnd(t *testing.T) {
	const secret, token = "slack-signing-secret-e2e", "xoxb-e2e-bot-token"
	var mu sync.Mutex
	var posts []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Channel, Text string
			ThreadTS      string `json:"thread_ts"`
		}
		if r.Header.Get("Authorization") != "Bearer "+token || json.NewDecoder(r.Body).Decode(&p) != nil {
			fmt.Fprint(w, `{"ok":false,"error":"invalid_auth"}`)
			return
		}
		mu.Lock()
		posts = append(posts, p.Channel+"/"+p.ThreadTS+" "+p.Text)
		mu.Unlock()
		if p.Channel == "C404" {
			fmt.Fprint(w, `{"ok":false,"error":"channel_not_found"}`)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer api.Close()
	p := startBinary(t, "TSUBAME_SLACK_SIGNING_SECRET="+secret, "TSUBAME_SLACK_BOT_TOKEN="+token, "TSUBAME_WEBHOOK_SLACK_API_URL="+api.URL)

	post := func(body string, at time.Time, sign string, retry bool) (int, string) {
		ts := strconv.FormatInt(at.Unix(), 10)
		m := hmac.New(sha256.New, []byte(sign))
		m.Write([]byte("v0:" + ts + ":" + body))
		req, _ := http.NewRequest("POST", p.base+"/webhook/slack", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
		if retry {
			req.Header.Set("X-Slack-Retry-Num", "1")
			req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	event := func(id, fields string) string {
		return `{"type":"event_callback","team_id":"T1","api_app_id":"A1","event_id":"` + id + `","event_time":1,"event":{` + fields + `}}`
	}
	now := time.Now()
	if status, body := post(`{"type":"url_verification","challenge":"c-123","token":"x"}`, now, secret, false); status != 200 || body != `{"challenge":"c-123"}` {
		t.Fatalf("url verification: %d %s", status, body)
	}
	hello := event("Ev1", `"type":"message","channel":"C1","user":"U1","text":"hello slack","ts":"1.1"`)
	for _, c := range []struct {
		name, body string
		at         time.Time
		secret     string
		retry      bool
		want       int
	}{
		{"message", hello, now, secret, false, 200},
		{"Slack's retry", hello, now, secret, true, 200},
		{"replayed later", hello, now.Add(-10 * time.Minute), secret, false, 401},
		{"forged", hello, now, "not-the-secret", false, 401},
		{"in a thread", event("Ev2", `"type":"app_mention","channel":"C1","user":"U1","text":"in thread","ts":"1.3","thread_ts":"1.2"`), now, secret, false, 200},
		{"a bot's", event("Ev3", `"type":"message","channel":"C1","bot_id":"B1","text":"hello slack","ts":"1.4"`), now, secret, false, 200},
		{"unknown channel", event("Ev4", `"type":"message","channel":"C404","user":"U1","text":"lost","ts":"1.5"`), now, secret, false, 200},
	} {
		if status, body := post(c.body, c.at, c.secret, c.retry); status != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, status, body, c.want)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.logs)
	}
	mu.Lock()
	slices.Sort(posts)
	got := strings.Join(posts, "|")
	mu.Unlock()
	if want := "C1/ hello slack|C1/1.2 in thread|C404/ lost"; got != want {
		t.Fatalf("chat.postMessage got %q, want %q", got, want)
	}
	s, err := embedded.Open(filepath.Join(p.dataDir, embedded.FileName), embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.CountResults(context.Background()); err != nil || n != 3 {
		t.Fatalf("%d results recorded (%v), want Ev1, Ev2 and the bot's Ev3", n, err)
	}
	dead, err := os.ReadFile(filepath.Join(p.dataDir, "webhook-deadletter.jsonl"))
	if err != nil || !bytes.Contains(dead, []byte(`"id":"Ev4"`)) || !bytes.Contains(dead, []byte("channel_not_found")) || bytes.Count(dead, []byte("\n")) != 1 {
		t.Fatalf("dead letters (%v):\n%s", err, dead)
	}
	if bytes.Contains(p.logs.Bytes(), []byte(secret)) || bytes.Contains(p.logs.Bytes(), []byte(token)) {
		t.Fatalf("a secret reached the process log:\n%s", p.logs)
	}
}
