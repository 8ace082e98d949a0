package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Slack is the Slack Events API's platform: POST /webhook/slack, signed
// with the app's signing secret (X-Slack-Signature v0 over
// X-Slack-Request-Timestamp, which must be within five minutes of now),
// each user message answered with chat.postMessage and the bot token, in
// its thread if it was in one.
//
// Slack delivers an event again (X-Slack-Retry-Num) when it saw no answer
// within three seconds or got an error: the event_id drops the repeat.
// Messages from bots (this one's answers among them) and edits, deletions
// and other message subtypes are recorded without an answer, so that the
// bot never answers itself.
type Slack struct {
	secret []byte
	token  string // xoxb-…; never logged
	apiURL string
}

// SlackAPI is chat.postMessage's URL.
const SlackAPI = "https://slack.com/api/chat.postMessage"

// NewSlack returns the Slack platform for an app's signing secret and bot
// token; apiURL is chat.postMessage's URL (SlackAPI when empty).
func NewSlack(signingSecret, botToken, apiURL string) *Slack {
	if apiURL == "" {
		apiURL = SlackAPI
	}
	return &Slack{secret: []byte(signingSecret), token: botToken, apiURL: apiURL}
}

// SlackWindow is how far a request's timestamp may be from now: an older
// signed request is a replay.
const SlackWindow = 5 * time.Minute

// slackMaxText bounds a message's text: Slack's own limit, in characters.
const slackMaxText = 40000

var okSlack = []byte(`{}`)

func (*Slack) Source() Source      { return SourceSlack }
func (*Slack) Ack() []byte         { return okSlack }
func (*Slack) RetryHeader() string { return "" } // chat.postMessage has no idempotency key

// Verify checks X-Slack-Signature and X-Slack-Request-Timestamp.
func (s *Slack) Verify(body []byte, h Header, now time.Time) error {
	return VerifySlack(s.secret, body, string(h.Peek("X-Slack-Request-Timestamp")), string(h.Peek("X-Slack-Signature")), now)
}

// ErrStale is a signed request whose timestamp is outside SlackWindow.
var ErrStale = errors.New("request timestamp too far from now")

// VerifySlack checks that signature is "v0=" + hex(HMAC-SHA256(secret,
// "v0:" + timestamp + ":" + body)), comparing in constant time, and that
// timestamp (Unix seconds) is within SlackWindow of now.
func VerifySlack(secret, body []byte, timestamp, signature string, now time.Time) error {
	hexSig, ok := strings.CutPrefix(signature, "v0=")
	if len(secret) == 0 || !ok || timestamp == "" || len(timestamp) > 20 {
		return ErrSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return ErrSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrSignature
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return ErrSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > SlackWindow || d < -SlackWindow {
		return ErrStale
	}
	return nil
}

// slackBody is an Events API request: a URL verification, an event, or a
// rate-limit notice. Fields we do not use are ignored.
type slackBody struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	EventID   string `json:"event_id"`
	Event     *struct {
		Type     string `json:"type"`
		Subtype  string `json:"subtype"`
		Channel  string `json:"channel"`
		User     string `json:"user"`
		BotID    string `json:"bot_id"`
		Text     string `json:"text"`
		ThreadTS string `json:"thread_ts"`
	} `json:"event"`
}

// Parse answers a URL verification with its challenge, takes an event as
// one message and a rate-limit notice as none.
func (*Slack) Parse(body []byte, _ Header) ([]Message, []byte, error) {
	var req slackBody
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, badRequest("malformed JSON body: %v", err)
	}
	switch req.Type {
	case "url_verification":
		if req.Challenge == "" || len(req.Challenge) > 256 || !printable(req.Challenge) {
			return nil, nil, badRequest("url_verification without a valid challenge")
		}
		answer, err := json.Marshal(struct {
			Challenge string `json:"challenge"`
		}{req.Challenge})
		return nil, answer, err
	case "app_rate_limited":
		// Slack stopped sending events for a minute: nothing to process.
		return nil, nil, nil
	case "event_callback":
	default:
		return nil, nil, badRequest("unknown request type %q", req.Type)
	}
	if req.EventID == "" || len(req.EventID) > 128 || !alnum(req.EventID) {
		return nil, nil, badRequest("event without a valid event_id")
	}
	e := req.Event
	if e == nil || !validEventType(e.Type) || e.Subtype != "" && !validEventType(e.Subtype) {
		return nil, nil, badRequest("event without a valid type")
	}
	m := Message{ID: req.EventID, Event: e.Type}
	if e.Subtype != "" {
		m.Event += "." + e.Subtype
	}
	if !utf8.ValidString(e.Text) || utf8.RuneCountInString(e.Text) > slackMaxText {
		return nil, nil, badRequest("event text is not valid UTF-8 or longer than %d characters", slackMaxText)
	}
	m.Text = e.Text
	// A person's message (or mention of the bot) is answered where it was
	// written; nothing else is.
	if (e.Type == "message" || e.Type == "app_mention") && e.Subtype == "" && e.BotID == "" && e.User != "" && slackID(e.Channel) {
		m.ReplyToken = e.Channel
		if e.ThreadTS != "" {
			if !slackTS(e.ThreadTS) {
				return nil, nil, badRequest("event with an invalid thread_ts")
			}
			m.ReplyToken += "/" + e.ThreadTS
		}
	}
	return []Message{m}, nil, nil
}

// Reply posts the message's text to its channel (and thread).
func (*Slack) Reply(m *Message) ([]byte, error) {
	if m.ReplyToken == "" || m.Text == "" {
		return nil, nil
	}
	channel, thread, _ := strings.Cut(m.ReplyToken, "/")
	return json.Marshal(struct {
		Channel  string `json:"channel"`
		Text     string `json:"text"`
		ThreadTS string `json:"thread_ts,omitempty"`
	}{channel, m.Text, thread})
}

// API is chat.postMessage with the bot token, over shared's timeouts and
// retries.
func (s *Slack) API(shared APIOptions) APIOptions {
	shared.URL, shared.Token, shared.H2C = s.apiURL, s.token, false
	return shared
}

// slackRetryable are chat.postMessage errors a later attempt may not get.
var slackRetryable = []string{"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}

// CheckAnswer reads chat.postMessage's answer: Slack reports most
// failures as {"ok":false,"error":"…"} in a 200.
func (*Slack) CheckAnswer(status int, body []byte) error {
	if err := statusError(status); err != nil {
		return err
	}
	var a struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("Slack answered %d without its JSON body", status)
	}
	switch {
	case a.OK:
		return nil
	case slices.Contains(slackRetryable, a.Error):
		return fmt.Errorf("Slack answered %q", a.Error)
	}
	return Permanent(fmt.Errorf("Slack refused the message: %q", a.Error))
}

// slackID accepts a Slack id (channel, user): upper-case letters and digits.
func slackID(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// slackTS accepts a message timestamp: digits, a dot, digits.
func slackTS(s string) bool {
	sec, frac, ok := strings.Cut(s, ".")
	return ok && len(s) <= 32 && sec != "" && frac != "" && digits(sec) && digits(frac)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
