package webhook

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// A Platform is one chat service's side of the webhook: how its requests
// are verified and read, and how one of its messages is answered. The
// /callback endpoint (Callback), LINE (NewLINE) and Slack (NewSlack) are
// platforms; another is one file implementing this, plus its config
// section. The Receiver and the Processor do the rest: size limits, the
// queue, dedupe, retries, results and dead letters.
type Platform interface {
	// Source names the platform: its messages' Source, its path
	// (/webhook/<source>; the callback is served at /callback) and its
	// metrics route.
	Source() Source
	// Verify checks that body came from the platform, from the request's
	// header (a signature) and the time now (a replay window). It returns
	// an error the sender may see.
	Verify(body []byte, h Header, now time.Time) error
	// Parse reads a verified body into the messages to process (all
	// valid, or a *BadRequest). A message with an ID (the platform's event
	// id) that was seen within the dedupe window is dropped: platforms
	// deliver again what they think was lost. Parse sets Text, ID,
	// ReplyToken and Event; the Processor sets the rest. An answer instead
	// of messages (Slack's URL verification) is sent at once as it is.
	Parse(body []byte, h Header) (msgs []Message, answer []byte, err error)
	// Ack is the body of the answer to an accepted request.
	Ack() []byte
	// Reply is the API request body that answers m, or nil when m is
	// recorded without a call (an event with nothing to answer, or no
	// address to answer to).
	Reply(m *Message) ([]byte, error)
	// RetryHeader names the header that carries each message's RetryKey,
	// the same on every attempt, so that the API can drop repeats; "" for
	// an API without one.
	RetryHeader() string
}

// OwnAPI is a Platform that answers through an API of its own (Slack's
// chat.postMessage) rather than the webhook's (Options.API), and reads
// the answer's body to tell how the call went. Its calls go over net/http,
// one goroutine each: the event-driven HTTP/2 client does not read bodies.
type OwnAPI interface {
	Platform
	// API is the platform's API: its URL and token over shared, the
	// webhook's timeouts, retries and connection bounds.
	API(shared APIOptions) APIOptions
	// CheckAnswer classifies an answer (its body cut at 64 KiB): nil when
	// the message was taken, an error wrapped by Permanent when a retry
	// cannot help, any other error to retry.
	CheckAnswer(status int, body []byte) error
}

// Header gives a request's header values (fasthttp's *RequestHeader is one).
type Header interface {
	Peek(key string) []byte
}

// Source tells which platform a message came through.
type Source string

// Sources of the platforms in this package.
const (
	SourceCallback Source = "callback"
	SourceLINE     Source = "line"
	SourceSlack    Source = "slack"
)

// Message is one message to process.
type Message struct {
	// ID is the platform's event id (LINE's webhookEventId, Slack's
	// event_id); without one (/callback) it is given when the message is
	// done.
	ID     string `json:"id"`
	Source Source `json:"source"`
	Text   string `json:"text"`
	// ReplyToken is where the answer goes, in the platform's terms (LINE's
	// replyToken; Slack's channel, and thread if any); empty when the
	// message cannot be answered.
	ReplyToken string    `json:"reply_token,omitempty"`
	Event      string    `json:"event,omitempty"` // the platform's event type ("message.text", "app_mention", ...)
	RetryKey   uuid.UUID `json:"retry_key"`       // sent under the platform's RetryHeader: the API can drop repeats
	Received   time.Time `json:"received"`
}

// Limits on what one webhook request may carry.
const (
	MaxMessagesPerRequest = 1000 // LINE sends at most 100 events per request
	MaxTextBytes          = 5000 // LINE's limit for a text message
)

// BadRequest is a webhook body that cannot be accepted; Error is safe to
// show to the sender.
type BadRequest struct{ msg string }

func (e *BadRequest) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &BadRequest{msg: fmt.Sprintf(format, args...)}
}

func checkTexts(texts ...string) error {
	if len(texts) > MaxMessagesPerRequest {
		return badRequest("%d messages in one request, more than the limit of %d", len(texts), MaxMessagesPerRequest)
	}
	for i, t := range texts {
		if len(t) > MaxTextBytes {
			return badRequest("message %d is longer than %d bytes", i+1, MaxTextBytes)
		}
		if !utf8.ValidString(t) {
			return badRequest("message %d is not valid UTF-8", i+1)
		}
	}
	return nil
}

// validEventType accepts event type names of camelCase or snake_case ASCII
// letters, so that an event's type can be recorded as it is.
func validEventType(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' && i > 0) {
			return false
		}
	}
	return true
}
