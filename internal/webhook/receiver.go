package webhook

import (
	"errors"
	"log/slog"
	"net/http"

	"tsubame/internal/render"
)

// Receiver answers webhook requests: it validates them, queues their
// messages on a Processor and says at once whether they were taken. It
// knows nothing of the HTTP server: the adapter passes the body and the
// signature header and writes the status and body it gets back.
type Receiver struct {
	p          *Processor
	lineSecret []byte
	maxBody    int
	log        *slog.Logger
}

// NewReceiver returns a Receiver. An empty lineSecret disables LINE().
func NewReceiver(p *Processor, lineSecret string, maxBody int, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	return &Receiver{p: p, lineSecret: []byte(lineSecret), maxBody: maxBody, log: log}
}

// LINEEnabled reports whether a channel secret is configured.
func (r *Receiver) LINEEnabled() bool { return len(r.lineSecret) > 0 }

var (
	okCallback = []byte(`{"ok":"ok"}`)
	okLINE     = []byte(`{}`)
)

// Callback handles POST /callback: {"messages":"1,2,3"}.
func (r *Receiver) Callback(body []byte) (int, []byte) {
	if len(body) > r.maxBody {
		return http.StatusRequestEntityTooLarge, errorBody("request body too large")
	}
	if r.p.Full() { // refused before parsing: a burst against a full queue costs little
		return unavailable(ErrQueueFull)
	}
	texts, err := ParseCallback(body)
	if err != nil {
		return http.StatusBadRequest, errorBody(err.Error())
	}
	if err := r.p.EnqueueTexts(texts); err != nil {
		return unavailable(err)
	}
	return http.StatusOK, okCallback
}

// LINE handles POST /webhook/line with its X-Line-Signature header value.
func (r *Receiver) LINE(body []byte, signature string) (int, []byte) {
	if !r.LINEEnabled() {
		return http.StatusNotFound, errorBody("not found")
	}
	if len(body) > r.maxBody {
		return http.StatusRequestEntityTooLarge, errorBody("request body too large")
	}
	if err := VerifyLINE(r.lineSecret, body, signature); err != nil {
		return http.StatusUnauthorized, errorBody("invalid signature")
	}
	if r.p.Full() {
		return unavailable(ErrQueueFull)
	}
	events, err := ParseLINE(body)
	if err != nil {
		return http.StatusBadRequest, errorBody(err.Error())
	}
	if _, err := r.p.EnqueueLINE(events); err != nil {
		return unavailable(err)
	}
	return http.StatusOK, okLINE
}

func unavailable(err error) (int, []byte) {
	if errors.Is(err, ErrQueueFull) {
		return http.StatusServiceUnavailable, errorBody("message queue is full, retry later")
	}
	return http.StatusServiceUnavailable, errorBody("server is stopping, retry later")
}

func errorBody(msg string) []byte {
	b := append([]byte(`{"error":`), render.AppendJSONString(nil, msg)...)
	return append(b, '}')
}
