package webhook

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// Callback is the /callback endpoint's platform, as the Phoenix LINE-bot
// write-up had it: {"messages":"1,2,3"}, each message answered LINE
// reply-style through the webhook's API. Its requests are authorized by
// the server (a bearer token) before they get here, so Verify takes all.
type Callback struct{}

var okCallback = []byte(`{"ok":"ok"}`)

func (Callback) Source() Source                         { return SourceCallback }
func (Callback) Verify([]byte, Header, time.Time) error { return nil }
func (Callback) Ack() []byte                            { return okCallback }
func (Callback) RetryHeader() string                    { return lineRetryHeader }
func (Callback) Reply(m *Message) ([]byte, error)       { return replyJSON(m) }

func (Callback) Parse(body []byte, _ Header) ([]Message, []byte, error) {
	texts, err := ParseCallback(body)
	if err != nil {
		return nil, nil, err
	}
	msgs := make([]Message, len(texts))
	for i, t := range texts {
		msgs[i].Text = t
	}
	return msgs, nil, nil
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
	return out, checkTexts(out...)
}
