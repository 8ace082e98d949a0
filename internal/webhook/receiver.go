package webhook

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"tsubame"
	"tsubame/internal/render"
)

// Receiver answers webhook requests: it checks and reads them through
// their platform, queues their messages on a Processor and says at once
// whether they were taken. It knows nothing of the HTTP server: the
// adapter passes the platform's name, the body and the header, and writes
// the status and body it gets back.
type Receiver struct {
	p       *Processor
	maxBody int
	log     *slog.Logger
}

// NewReceiver returns a Receiver for p's platforms.
func NewReceiver(p *Processor, maxBody int, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	return &Receiver{p: p, maxBody: maxBody, log: log}
}

// Enabled reports whether source's platform is served.
func (r *Receiver) Enabled(source Source) bool { return r.p.Platform(source) != nil }

// Sources lists the platforms served, the callback first.
func (r *Receiver) Sources() []Source {
	out := make([]Source, len(r.p.routes))
	for i, rt := range r.p.routes {
		out[i] = rt.platform.Source()
	}
	return out
}

// Serve answers one request to source's platform: 200 with the platform's
// answer, or the error's status (the one error→status map,
// render.HTTPStatus) with {"error": its client-safe message}.
func (r *Receiver) Serve(source Source, body []byte, h Header) (int, []byte) {
	ok, err := r.serve(source, body, h)
	if err == nil {
		return http.StatusOK, ok
	}
	return render.HTTPStatus(err), errorBody(tsubame.ErrorMessage(err))
}

func (r *Receiver) serve(source Source, body []byte, h Header) ([]byte, error) {
	pl := r.p.Platform(source)
	if pl == nil {
		return nil, errNotFound
	}
	if len(body) > r.maxBody {
		return nil, errTooLarge
	}
	if err := pl.Verify(body, h, time.Now()); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAUTHORIZED, err, "%v", err)
	}
	if r.p.Full() { // refused before parsing: a burst against a full queue costs little
		return nil, unavailable(ErrQueueFull)
	}
	msgs, answer, err := pl.Parse(body, h)
	switch {
	case err != nil:
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
	case answer != nil:
		return answer, nil
	}
	if _, err := r.p.Enqueue(source, msgs); err != nil {
		return nil, unavailable(err)
	}
	return pl.Ack(), nil
}

var (
	errTooLarge = tsubame.Errorf(tsubame.ETOOLARGE, "request body too large")
	errNotFound = tsubame.Errorf(tsubame.ENOTFOUND, "not found")
)

// unavailable gives a refusal by the queue its kind.
func unavailable(err error) error {
	if errors.Is(err, ErrQueueFull) {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "message queue is full, retry later")
	}
	return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "server is stopping, retry later")
}

func errorBody(msg string) []byte {
	b := append([]byte(`{"error":`), render.AppendJSONString(nil, msg)...)
	return append(b, '}')
}
