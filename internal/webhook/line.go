package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
)

// LINE is the LINE Messaging API's platform: POST /webhook/line, signed
// with the channel secret (X-Line-Signature), each text message with a
// reply token answered through the reply endpoint (the webhook's API).
type LINE struct{ secret []byte }

// NewLINE returns the LINE platform for a channel secret (never logged).
func NewLINE(channelSecret string) *LINE { return &LINE{secret: []byte(channelSecret)} }

const lineRetryHeader = "X-Line-Retry-Key"

var okLINE = []byte(`{}`)

func (*LINE) Source() Source      { return SourceLINE }
func (*LINE) Ack() []byte         { return okLINE }
func (*LINE) RetryHeader() string { return lineRetryHeader }

// Verify checks X-Line-Signature.
func (l *LINE) Verify(body []byte, h Header, _ time.Time) error {
	return VerifyLINE(l.secret, body, string(h.Peek("X-Line-Signature")))
}

// Parse takes every event, LINE's connectivity check (no events) included.
func (*LINE) Parse(body []byte, _ Header) ([]Message, []byte, error) {
	msgs, err := ParseLINE(body)
	return msgs, nil, err
}

// Reply answers a text message through the reply endpoint, which needs its
// replyToken: events without one (standby mode, unsend, unfollow, leave,
// ...) and events other than text messages are recorded without a call.
func (*LINE) Reply(m *Message) ([]byte, error) {
	if m.ReplyToken == "" || m.Text == "" {
		return nil, nil
	}
	return replyJSON(m)
}

type replyBody struct {
	ReplyToken string        `json:"replyToken,omitempty"`
	Messages   []textMessage `json:"messages"`
}

type textMessage struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// replyJSON is the LINE reply-style body for m.
func replyJSON(m *Message) ([]byte, error) {
	return json.Marshal(replyBody{ReplyToken: m.ReplyToken, Messages: []textMessage{{Type: "text", Text: m.Text}}})
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

// ErrSignature is returned for a missing or wrong signature.
var ErrSignature = errors.New("invalid signature")

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

// ParseLINE reads a (verified) LINE webhook body into one message per
// event: a message of any kind, a follow, an unsend, a postback, ... (LINE
// documents the types and adds new ones; all are taken). A message's Event
// is the event's type, with the message's type for a message event
// ("message.text", "message.sticker", "follow", ...); its Text is a text
// message's text. An empty events list is LINE's connectivity check.
func ParseLINE(body []byte) (msgs []Message, err error) {
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
		m := Message{ID: e.WebhookEventID, Event: e.Type, ReplyToken: e.ReplyToken}
		if e.Type == "message" {
			if e.Message == nil || !validEventType(e.Message.Type) {
				return nil, badRequest("event %d is a message without a valid message type", i+1)
			}
			m.Event += "." + e.Message.Type
			if e.Message.Type == "text" {
				if err := checkTexts(e.Message.Text); err != nil {
					return nil, badRequest("event %d: %v", i+1, err)
				}
				m.Text = e.Message.Text
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}
