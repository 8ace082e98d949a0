package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Notifier posts alerts to a webhook (admin.alert_webhook) so that they
// reach a person: a burst of authentication failures, a new user, a new API
// token, a failed audit write. The body is {"text": "..."}, which Slack's
// incoming webhooks take, as do Mattermost's and Rocket.Chat's. Posting is
// off the caller's path: alerts queue (bounded; an overflow is counted) and
// one goroutine sends them, retrying a failed post a few times.
type Notifier struct {
	url    string
	client *http.Client
	log    *slog.Logger
	node   string

	q       chan string
	done    chan struct{}
	closeMu sync.Once

	sent, failed, dropped atomic.Uint64
}

// notifyQueue bounds the alerts waiting to be sent.
const notifyQueue = 256

// ValidWebhookURL checks an alert webhook URL: https, with a host.
func ValidWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return fmt.Errorf("must be an https:// URL with a host")
	}
	return nil
}

// NewNotifier starts a notifier posting to webhookURL with client (nil:
// a client with a 10 s timeout). node names this server in the texts.
func NewNotifier(webhookURL string, client *http.Client, node string, log *slog.Logger) (*Notifier, error) {
	if err := ValidWebhookURL(webhookURL); err != nil {
		return nil, fmt.Errorf("admin.alert_webhook %w", err)
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if log == nil {
		log = slog.Default()
	}
	n := &Notifier{url: webhookURL, client: client, log: log, node: node, q: make(chan string, notifyQueue), done: make(chan struct{})}
	go n.run()
	return n, nil
}

// Notify queues an alert; it never blocks.
func (n *Notifier) Notify(format string, args ...any) {
	text := fmt.Sprintf("Tsubame admin on %s: ", n.node) + fmt.Sprintf(format, args...)
	select {
	case n.q <- slackEscape(text):
	default:
		n.dropped.Add(1)
	}
}

// slackEscape escapes the three characters Slack's markup gives a meaning
// (a name cannot become a link or a mention).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func (n *Notifier) run() {
	defer close(n.done)
	for text := range n.q {
		if err := n.post(text); err != nil {
			n.failed.Add(1)
			n.log.Error("admin alert not delivered to admin.alert_webhook", "err", err)
			continue
		}
		n.sent.Add(1)
	}
}

// post sends one alert, retrying network errors, 429 and 5xx.
func (n *Notifier) post(text string) error {
	body, _ := json.Marshal(map[string]string{"text": text})
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			time.Sleep(time.Duration(1<<(attempt-1)) * 500 * time.Millisecond)
		}
		var resp *http.Response
		resp, err = n.client.Post(n.url, "application/json", bytes.NewReader(body))
		if err != nil {
			// The URL holds the webhook's secret: report the error alone.
			if uerr, ok := errors.AsType[*url.Error](err); ok {
				err = uerr.Err
			}
			continue
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300:
			return nil
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			err = fmt.Errorf("webhook answered %s", resp.Status)
		default:
			return fmt.Errorf("webhook answered %s", resp.Status)
		}
	}
	return err
}

// Close sends what is queued, until ctx ends.
func (n *Notifier) Close(ctx context.Context) {
	n.closeMu.Do(func() { close(n.q) })
	select {
	case <-n.done:
	case <-ctx.Done():
	}
}

// NotifierStats are the notifier's counters.
type NotifierStats struct{ Sent, Failed, Dropped uint64 }

// Stats returns the counters.
func (n *Notifier) Stats() NotifierStats {
	if n == nil {
		return NotifierStats{}
	}
	return NotifierStats{Sent: n.sent.Load(), Failed: n.failed.Load(), Dropped: n.dropped.Load()}
}
