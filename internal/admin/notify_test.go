package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// hook is a webhook receiver that records the texts posted to it and
// answers with the statuses queued in answers (then 200).
type hook struct {
	mu      sync.Mutex
	texts   []string
	answers []int
	hold    chan struct{}
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.hold != nil {
		<-h.hold
	}
	var body struct{ Text string }
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	status := http.StatusOK
	if len(h.answers) > 0 {
		status, h.answers = h.answers[0], h.answers[1:]
	}
	if status == http.StatusOK {
		h.texts = append(h.texts, body.Text)
	}
	w.WriteHeader(status)
}

func (h *hook) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.texts...)
}

func startHook(t *testing.T, h *hook) (*httptest.Server, *Notifier) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	n, err := NewNotifier(srv.URL+"/services/T000/B000/secret", srv.Client(), "node-1", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return srv, n
}

// The audit log's alerts reach the webhook: a burst of failures, a new
// user, a new token, as Slack-compatible {"text"} bodies with markup
// escaped; failed posts are retried.
func TestAlertsReachTheWebhook(t *testing.T) {
	h := &hook{answers: []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}} // the first post is retried twice
	_, n := startHook(t, h)
	a, err := OpenAudit(AuditOptions{Path: t.TempDir() + "/audit.log", AlertAt: 3, AlertWindow: time.Minute, Notifier: n,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.Record(AuditRecord{Actor: "alice", Remote: "10.0.0.1", Action: "user.create", Target: "bob", Result: "ok"})
	a.Record(AuditRecord{Actor: "alice", Remote: "10.0.0.1", Action: "token.create", Target: "4f2a", Result: "ok"})
	a.Record(AuditRecord{Actor: "cli:root", Remote: "local", Action: "token.delete", Target: "4f2a", Result: "ok"})
	a.Record(AuditRecord{Actor: "cli:root", Remote: "local", Action: "user.password+totp", Target: "bob", Result: "ok"})
	a.Record(AuditRecord{Actor: "alice", Action: "placement.put", Target: "1", Result: "ok"}) // not an alert
	for range 3 {
		a.Record(AuditRecord{Actor: "<@here>", Remote: "203.0.113.9", Action: "login", Result: "denied"})
	}
	_ = a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.Close(ctx)
	texts := h.got()
	want := []string{`user "bob" created by alice from 10.0.0.1`, `API token 4f2a created by alice from 10.0.0.1`,
		`API token 4f2a deleted by cli:root from local`, `credentials of user "bob" replaced by cli:root from local`,
		"ALERT: 3 authentication failures within 1m0s"}
	if len(texts) != len(want) {
		t.Fatalf("posted %q", texts)
	}
	for i, w := range want {
		if !strings.HasPrefix(texts[i], "Tsubame admin on node-1: ") || !strings.Contains(texts[i], w) {
			t.Errorf("alert %d: %q, want %q", i, texts[i], w)
		}
	}
	if st := n.Stats(); st.Sent != 5 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if got := slackEscape(`user "<@here>" & <!channel>`); got != `user "&lt;@here&gt;" &amp; &lt;!channel&gt;` {
		t.Errorf("escaped %q", got)
	}
}

// A refused post is counted as failed; a full queue drops, counted; only
// https URLs are taken.
func TestAlertFailuresAreCounted(t *testing.T) {
	h := &hook{answers: []int{http.StatusForbidden}}
	_, n := startHook(t, h)
	n.Notify("one")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.Close(ctx)
	if st := n.Stats(); st.Failed != 1 || st.Sent != 0 {
		t.Errorf("a 403: %+v", st)
	}

	held := &hook{hold: make(chan struct{})}
	_, n2 := startHook(t, held)
	for range notifyQueue + 10 {
		n2.Notify("flood")
	}
	close(held.hold)
	n2.Close(ctx)
	if st := n2.Stats(); st.Dropped < 9 || st.Sent+st.Dropped != notifyQueue+10 {
		t.Errorf("overflow: %+v", st)
	}

	for _, bad := range []string{"http://hooks.example.com/x", "https://", "ftp://x", "https://user:pw@hooks.example.com/x", ":"} {
		if _, err := NewNotifier(bad, nil, "n", nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
