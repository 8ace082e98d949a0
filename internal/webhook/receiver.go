package webhook

import (
	"errors"
	"log/slog"
	"net/http"

	"tsubame"
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
func (r *Receiver) Callback(body []byte) (int, []byte) { return answer(r.callback(body), okCallback) }

func (r *Receiver) callback(body []byte) error {
	if len(body) > r.maxBody {
		return errTooLarge
	}
	if r.p.Full() { // refused before parsing: a burst against a full queue costs little
		return unavailable(ErrQueueFull)
	}
	texts, err := ParseCallback(body)
	if err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
	}
	return unavailable(r.p.EnqueueTexts(texts))
}

// LINE handles POST /webhook/line with its X-Line-Signature header value.
func (r *Receiver) LINE(body []byte, signature string) (int, []byte) {
	return answer(r.line(body, signature), okLINE)
}

func (r *Receiver) line(body []byte, signature string) error {
	if !r.LINEEnabled() {
		return errNotFound
	}
	if len(body) > r.maxBody {
		return errTooLarge
	}
	if err := VerifyLINE(r.lineSecret, body, signature); err != nil {
		return tsubame.WrapError(tsubame.EUNAUTHORIZED, err, "invalid signature")
	}
	if r.p.Full() {
		return unavailable(ErrQueueFull)
	}
	events, err := ParseLINE(body)
	if err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
	}
	_, err = r.p.EnqueueLINE(events)
	return unavailable(err)
}

var (
	errTooLarge = tsubame.Errorf(tsubame.ETOOLARGE, "request body too large")
	errNotFound = tsubame.Errorf(tsubame.ENOTFOUND, "not found")
)

// unavailable gives a refusal by the queue its kind (nil stays nil).
func unavailable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrQueueFull):
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "message queue is full, retry later")
	}
	return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "server is stopping, retry later")
}

// answer is a webhook's answer: ok, or err's status (the one error→status
// map, render.HTTPStatus) with {"error": its client-safe message}.
func answer(err error, ok []byte) (int, []byte) {
	if err == nil {
		return http.StatusOK, ok
	}
	return render.HTTPStatus(err), errorBody(tsubame.ErrorMessage(err))
}

func errorBody(msg string) []byte {
	b := append([]byte(`{"error":`), render.AppendJSONString(nil, msg)...)
	return append(b, '}')
}
