package server_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tsubame/internal/server"
	"tsubame/internal/webhook"
)

const testCallbackToken = "0123456789abcdef-callback"

// callbackServer serves POST /callback behind testCallbackToken, counting
// the messages its processor handles.
func callbackServer(t *testing.T) (*server.Server, string, *atomic.Int64) {
	t.Helper()
	return callbackServerWith(t, server.Options{})
}

// callbackServerWith is callbackServer with more options.
func callbackServerWith(t *testing.T, opt server.Options) (*server.Server, string, *atomic.Int64) {
	t.Helper()
	var handled atomic.Int64
	p, err := webhook.New(webhook.Options{DeadLetterPath: filepath.Join(t.TempDir(), "dead"),
		Handle: func(context.Context, *webhook.Message) error { handled.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	opt.Webhook, opt.CallbackToken = webhook.NewReceiver(p, 1<<20, nil), testCallbackToken
	srv, addr := startWith(t, opt)
	return srv, addr, &handled
}

func postCallback(t *testing.T, addr string, headers ...string) (int, string) {
	t.Helper()
	body := `{"messages":"1"}`
	raw := "POST /callback HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + strings.Join(headers, "") +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	return rawStatus(t, addr, raw)
}

// Two Authorization fields on /callback are a 400, even when both carry
// the token: which one a proxy in front checked or stripped is unknown.
// One right field is served.
func TestCallbackTwoAuthorizations(t *testing.T) {
	srv, addr, _ := callbackServer(t)
	good := "Authorization: Bearer " + testCallbackToken + "\r\n"
	for _, twice := range [][]string{
		{good, good},
		{good, "Authorization: Bearer wrong\r\n"},
		{"Authorization: Bearer wrong\r\n", good},
		{good, "authorization: Basic eDp5\r\n"},
	} {
		before := srv.Stats().Refused[server.ReasonCallbackAuth]
		status, body := postCallback(t, addr, twice...)
		if status != 400 || !strings.Contains(body, "more than one Authorization header") {
			t.Errorf("%q: %d %q, want 400", twice, status, body)
		}
		if after := srv.Stats().Refused[server.ReasonCallbackAuth]; after != before+1 {
			t.Errorf("%q: callback_auth %d -> %d", twice, before, after)
		}
	}
	if status, body := postCallback(t, addr, good); status != 200 {
		t.Fatalf("one right Authorization: %d %q", status, body)
	}
}

// rawStatus sends raw on a new connection and returns the first answer.
func rawStatus(t *testing.T, addr, raw string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// POST /callback without its token is refused on its head alone: the
// server does not wait for (or read) a body the caller may trickle until
// read_timeout. With the token, the same head is followed by its body and
// served; a declared body over max_body_bytes is still a 413.
func TestCallbackRefusedBeforeItsBody(t *testing.T) {
	srv, addr, _ := callbackServerWith(t, server.Options{ReadTimeout: time.Hour, MaxBodyBytes: 1 << 20})
	head := func(auth string, length int) string {
		return "POST /callback HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
			"Content-Length: " + strconv.Itoa(length) + "\r\n\r\n"
	}
	for name, auth := range map[string]string{
		"none":  "",
		"wrong": "Authorization: Bearer wrong\r\n",
		"twice": "Authorization: Bearer " + testCallbackToken + "\r\nAuthorization: Bearer " + testCallbackToken + "\r\n",
	} {
		before := srv.Stats().Refused
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// The head only: a body of 500,000 bytes is declared and never sent.
		if _, err := io.WriteString(c, head(auth, 500000)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // generous: without the check, no answer before read_timeout (an hour)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: no answer to the head alone: %v", name, err)
		}
		resp.Body.Close()
		c.Close()
		want := 401
		if name == "twice" {
			want = 400
		}
		if resp.StatusCode != want || !resp.Close {
			t.Errorf("%s: %s close=%v, want %d and close", name, resp.Status, resp.Close, want)
		}
		after := srv.Stats().Refused
		if after[server.ReasonCallbackAuth] != before[server.ReasonCallbackAuth]+1 || after[server.ReasonBody] != before[server.ReasonBody] {
			t.Errorf("%s: callback_auth %d -> %d, body_too_large %d -> %d", name, before[server.ReasonCallbackAuth], after[server.ReasonCallbackAuth],
				before[server.ReasonBody], after[server.ReasonBody])
		}
	}
	good := "Authorization: Bearer " + testCallbackToken + "\r\n"
	body := `{"messages":"1"}`
	if status, b := rawStatus(t, addr, head(good, len(body))+body); status != 200 {
		t.Fatalf("with the token: %d %q", status, b)
	}
	if status, _ := rawStatus(t, addr, head(good, 2<<20)); status != 413 {
		t.Fatalf("with the token, a body over the bound: %d, want 413", status)
	}
}
