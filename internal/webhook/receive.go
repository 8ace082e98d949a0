package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits on what one webhook request may carry.
const (
	MaxMessagesPerRequest = 1000 // LINE sends at most 100 events per request
	MaxTextBytes          = 5000 // LINE's limit for a text message
)

// Source tells which receiver a message came through.
type Source string

// Sources.
const (
	SourceCallback Source = "callback"
	SourceLINE     Source = "line"
)

// Message is one message to process.
type Message struct {
	ID         string    `json:"id"` // webhookEventId for LINE; otherwise given when the message is done
	Source     Source    `json:"source"`
	Text       string    `json:"text"`
	ReplyToken string    `json:"reply_token,omitempty"`
	Event      string    `json:"event,omitempty"` // LINE's event type (see LINEEvent)
	RetryKey   uuid.UUID `json:"retry_key"`       // sent as X-Line-Retry-Key: the API can drop repeats
	Received   time.Time `json:"received"`
}

// BadRequest is a webhook body that cannot be accepted; Error is safe to
// show to the sender.
type BadRequest struct{ msg string }

func (e *BadRequest) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &BadRequest{msg: fmt.Sprintf(format, args...)}
}

// ParseCallback reads the /callback body: {"messages":"1,2,3"} (comma-separated)
// or {"messages":["1","2","3"]}. Empty items are skipped.
func ParseCallback(body []byte) ([]string, error) {
	var req struct {
		Messages json.RawMessage `json:"messages"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("malformed JSON body: %v", err)
	}
	if dec.More() {
		return nil, badRequest("malformed JSON body: more than one value")
	}
	var texts []string
	switch {
	case len(req.Messages) == 0:
		return nil, badRequest(`missing "messages"`)
	case req.Messages[0] == '"':
		var s string
		if err := json.Unmarshal(req.Messages, &s); err != nil {
			return nil, badRequest(`"messages" must be a string or an array of strings`)
		}
		texts = strings.Split(s, ",")
	default:
		if err := json.Unmarshal(req.Messages, &texts); err != nil {
			return nil, badRequest(`"messages" must be a string or an array of strings`)
		}
	}
	out := texts[:0]
	for _, t := range texts {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out, checkTexts(out)
}

func checkTexts(texts []string) error {
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

// LINE webhook body, as documented by the Messaging API. Fields we do not
// use are ignored, as LINE adds fields over time.
type lineBody struct {
	Destination string      `json:"destination"`
	Events      []lineEvent `json:"events"`
}

type lineEvent struct {
	Type            string `json:"type"`
	Mode            string `json:"mode"`
	WebhookEventID  string `json:"webhookEventId"`
	ReplyToken      string `json:"replyToken"`
	Timestamp       int64  `json:"timestamp"`
	DeliveryContext struct {
		IsRedelivery bool `json:"isRedelivery"`
	} `json:"deliveryContext"`
	Message *struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"message"`
}

// LINEEvent is one event taken from a LINE webhook: a message of any kind,
// a follow, an unsend, a postback, ... (LINE documents the types and adds
// new ones; all are taken).
type LINEEvent struct {
	EventID string
	// Event is the event's type, with the message's type for a message
	// event: "message.text", "message.sticker", "follow", "unsend", ...
	Event string
	// ReplyToken is empty where LINE gives none (standby mode, unsend,
	// unfollow, leave, ...): no reply can be sent.
	ReplyToken string
	// Text is a text message's text; empty for other events.
	Text string
}

// ErrSignature is returned for a missing or wrong X-Line-Signature.
var ErrSignature = errors.New("invalid X-Line-Signature")

// VerifyLINE checks that signature is base64(HMAC-SHA256(secret, body)),
// comparing in constant time.
func VerifyLINE(secret, body []byte, signature string) error {
	if len(secret) == 0 || signature == "" {
		return ErrSignature
	}
	got, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return ErrSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrSignature
	}
	return nil
}

// ParseLINE reads a (verified) LINE webhook body and returns its events.
// An empty events list is LINE's connectivity check.
func ParseLINE(body []byte) (events []LINEEvent, err error) {
	var req lineBody
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("malformed JSON body: %v", err)
	}
	if len(req.Events) > MaxMessagesPerRequest {
		return nil, badRequest("%d events in one request, more than the limit of %d", len(req.Events), MaxMessagesPerRequest)
	}
	for i, e := range req.Events {
		if e.WebhookEventID == "" || len(e.WebhookEventID) > 128 {
			return nil, badRequest("event %d has no valid webhookEventId", i+1)
		}
		if !validEventType(e.Type) {
			return nil, badRequest("event %d has no valid type", i+1)
		}
		if len(e.ReplyToken) > 256 {
			return nil, badRequest("event %d has an oversized replyToken", i+1)
		}
		ev := LINEEvent{EventID: e.WebhookEventID, Event: e.Type, ReplyToken: e.ReplyToken}
		if e.Type == "message" {
			if e.Message == nil || !validEventType(e.Message.Type) {
				return nil, badRequest("event %d is a message without a valid message type", i+1)
			}
			ev.Event += "." + e.Message.Type
			if e.Message.Type == "text" {
				if err := checkTexts([]string{e.Message.Text}); err != nil {
					return nil, badRequest("event %d: %v", i+1, err)
				}
				ev.Text = e.Message.Text
			}
		}
		events = append(events, ev)
	}
	return events, nil
}

// validEventType accepts LINE's type names (camelCase ASCII letters), so
// that an event's type can be recorded as it is.
func validEventType(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
