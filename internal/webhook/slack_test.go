package webhook

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	slackSecret = "slack-signing-secret-for-tests"
	slackToken  = "xoxb-test-token"
)

// slackRequest signs body as Slack does, at time at.
func slackRequest(secret, body string, at time.Time) header {
	ts := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":" + body))
	return header{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + hex.EncodeToString(m.Sum(nil))}
}

func slack(r *Receiver, body string, h header) (int, []byte) {
	return r.Serve(SourceSlack, []byte(body), h)
}

// The example from Slack's "Verifying requests from Slack" page (the
// signature checked with openssl dgst -sha256 -hmac too).
func TestSlackSignatureVectors(t *testing.T) {
	const (
		secret = "8f742231b10e8888abcd99yyyzzz85a5"
		ts     = "1531420618"
		good   = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
		body   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar" +
			"&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands" +
			"%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	)
	at := time.Unix(1531420618, 0)
	if err := VerifySlack([]byte(secret), []byte(body), ts, good, at.Add(4*time.Minute)); err != nil {
		t.Fatalf("good signature refused: %v", err)
	}
	for name, c := range map[string]struct {
		secret, body, ts, sig string
		now                   time.Time
		want                  error
	}{
		"missing":          {secret, body, ts, "", at, ErrSignature},
		"no version":       {secret, body, ts, good[3:], at, ErrSignature},
		"v1":               {secret, body, ts, "v1=" + good[3:], at, ErrSignature},
		"wrong":            {secret, body, ts, "v0=b" + good[4:], at, ErrSignature},
		"tampered body":    {secret, body + "x", ts, good, at, ErrSignature},
		"other timestamp":  {secret, body, "1531420619", good, at, ErrSignature},
		"no timestamp":     {secret, body, "", good, at, ErrSignature},
		"not hex":          {secret, body, ts, "v0=zz", at, ErrSignature},
		"other secret":     {"another", body, ts, good, at, ErrSignature},
		"no secret known":  {"", body, ts, good, at, ErrSignature},
		"replayed later":   {secret, body, ts, good, at.Add(SlackWindow + time.Second), ErrStale},
		"from the future":  {secret, body, ts, good, at.Add(-SlackWindow - time.Second), ErrStale},
		"sign then replay": {secret, body, ts, good, at.Add(time.Hour), ErrStale},
	} {
		if err := VerifySlack([]byte(c.secret), []byte(c.body), c.ts, c.sig, c.now); !errors.Is(err, c.want) {
			t.Errorf("%s: VerifySlack = %v, want %v", name, err, c.want)
		}
	}
}

// slackEvent is an event_callback body for a message event.
func slackEvent(id, fields string) string {
	return `{"token":"unused","team_id":"T1","api_app_id":"A1","type":"event_callback","event_id":"` + id +
		`","event_time":1700000000,"event":{` + fields + `,"event_ts":"1700000000.000100"}}`
}

func TestSlackReceiverAnswers(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	p, _ := newProcessor(t, Options{QueueSize: 8, MaxInFlight: 1, Platforms: []Platform{NewSlack(slackSecret, slackToken, "")},
		Handle: func(ctx context.Context, m *Message) error { <-hold; return nil }})
	r := NewReceiver(p, 1<<20, quiet)
	now := time.Now()
	text := slackEvent("Ev1", `"type":"message","channel":"C1","user":"U1","text":"hi","ts":"1700000000.000100"`)
	challenge := `{"token":"unused","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	retry := slackRequest(slackSecret, text, now)
	retry["X-Slack-Retry-Num"], retry["X-Slack-Retry-Reason"] = "1", "http_timeout"
	cases := []answerCase{
		{"url verification", 200, `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}`,
			func() (int, []byte) { return slack(r, challenge, slackRequest(slackSecret, challenge, now)) }, 0},
		{"url verification unsigned", 401, "", func() (int, []byte) { return slack(r, challenge, header{}) }, 0},
		{"wrong secret", 401, "", func() (int, []byte) { return slack(r, text, slackRequest("other", text, now)) }, 0},
		{"replayed an hour later", 401, `{"error":"request timestamp too far from now"}`,
			func() (int, []byte) { return slack(r, text, slackRequest(slackSecret, text, now.Add(-time.Hour))) }, 0},
		{"malformed but signed", 400, "", func() (int, []byte) { return slack(r, `{"type":`, slackRequest(slackSecret, `{"type":`, now)) }, 0},
		{"unknown type", 400, "", func() (int, []byte) {
			b := `{"type":"block_actions"}`
			return slack(r, b, slackRequest(slackSecret, b, now))
		}, 0},
		{"no event id", 400, "", func() (int, []byte) {
			b := slackEvent("", `"type":"message","channel":"C1","user":"U1","text":"hi"`)
			return slack(r, b, slackRequest(slackSecret, b, now))
		}, 0},
		{"a message", 200, `{}`, func() (int, []byte) { return slack(r, text, slackRequest(slackSecret, text, now)) }, 1},
		{"its retry (X-Slack-Retry-Num)", 200, `{}`, func() (int, []byte) { return slack(r, text, retry) }, 1},
		{"rate-limit notice", 200, `{}`, func() (int, []byte) {
			b := `{"token":"unused","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}`
			return slack(r, b, slackRequest(slackSecret, b, now))
		}, 1},
		{"a message in a thread", 200, `{}`, func() (int, []byte) {
			b := slackEvent("Ev2", `"type":"app_mention","channel":"C1","user":"U1","text":"<@B1> hi","ts":"1700000001.000200","thread_ts":"1700000000.000100"`)
			return slack(r, b, slackRequest(slackSecret, b, now))
		}, 2},
	}
	checkAnswers(t, p, cases)
	if st := p.Stats(); st.Duplicates != 1 {
		t.Errorf("%d duplicates, want the retry", st.Duplicates)
	}
}

// Which events are answered, and where: a person's message in its channel
// (and thread); a bot's message (this bot's answers among them), edits and
// other subtypes are recorded without an answer, so the bot never talks to
// itself.
func TestSlackParse(t *testing.T) {
	s := NewSlack(slackSecret, slackToken, "")
	for _, c := range []struct {
		name, event, wantEvent, wantReply, wantBody string
	}{
		{"message", `"type":"message","channel":"C1","user":"U1","text":"hi","ts":"1.2"`, "message", "C1", `{"channel":"C1","text":"hi"}`},
		{"thread", `"type":"message","channel":"C1","user":"U1","text":"hi","ts":"1.3","thread_ts":"1.2"`, "message", "C1/1.2", `{"channel":"C1","text":"hi","thread_ts":"1.2"}`},
		{"mention", `"type":"app_mention","channel":"C2","user":"U1","text":"<@B1> yo","ts":"1.2"`, "app_mention", "C2", `{"channel":"C2","text":"\u003c@B1\u003e yo"}`},
		{"bot", `"type":"message","channel":"C1","bot_id":"B1","user":"U9","text":"echo","ts":"1.2"`, "message", "", ""},
		{"bot subtype", `"type":"message","subtype":"bot_message","channel":"C1","bot_id":"B1","text":"echo","ts":"1.2"`, "message.bot_message", "", ""},
		{"edit", `"type":"message","subtype":"message_changed","channel":"C1","hidden":true,"ts":"1.2"`, "message.message_changed", "", ""},
		{"reaction", `"type":"reaction_added","user":"U1","reaction":"thumbsup","item":{"type":"message","channel":"C1","ts":"1.2"}`, "reaction_added", "", ""},
		{"odd channel", `"type":"message","channel":"C1\n","user":"U1","text":"hi","ts":"1.2"`, "message", "", ""},
	} {
		msgs, answer, err := s.Parse([]byte(slackEvent("Ev"+strings.ReplaceAll(c.name, " ", ""), c.event)), nil)
		if err != nil || answer != nil || len(msgs) != 1 {
			t.Errorf("%s: %v %s %v", c.name, msgs, answer, err)
			continue
		}
		m := msgs[0]
		body, err := s.Reply(&m)
		if m.Event != c.wantEvent || m.ReplyToken != c.wantReply || string(body) != c.wantBody || err != nil {
			t.Errorf("%s: event %q, reply to %q, body %s (%v); want %q, %q, %s", c.name, m.Event, m.ReplyToken, body, err, c.wantEvent, c.wantReply, c.wantBody)
		}
	}
	for name, event := range map[string]string{
		"no type":        `"channel":"C1"`,
		"odd type":       `"type":"mes sage"`,
		"odd subtype":    `"type":"message","subtype":"x y"`,
		"bad thread":     `"type":"message","channel":"C1","user":"U1","text":"hi","thread_ts":"1.2\"x"`,
		"not UTF-8 text": `"type":"message","channel":"C1","user":"U1","text":"\xff"`,
		"long text":      `"type":"message","channel":"C1","user":"U1","text":"` + strings.Repeat("あ", 40001) + `"`,
	} {
		if _, _, err := s.Parse([]byte(slackEvent("Ev1", event)), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, body := range map[string]string{
		"odd event id":    slackEvent("Ev 1", `"type":"message"`),
		"no event":        `{"type":"event_callback","event_id":"Ev1"}`,
		"empty challenge": `{"type":"url_verification","challenge":""}`,
		"odd challenge":   `{"type":"url_verification","challenge":"a\nb"}`,
	} {
		if _, _, err := s.Parse([]byte(body), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// fakeSlack is chat.postMessage: it checks the token and the body, and
// answers as its answers say for the text (default {"ok":true}), one
// answer an attempt.
type fakeSlack struct {
	*httptest.Server
	mu      sync.Mutex
	posts   []slackPost
	answers map[string][]string
	bad     int
}

type slackPost struct {
	Channel  string `json:"channel"`
	Text     string `json:"text"`
	ThreadTS string `json:"thread_ts"`
}

func startFakeSlack(t *testing.T, answers map[string][]string) *fakeSlack {
	f := &fakeSlack{answers: answers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p slackPost
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+slackToken ||
			!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || dec.Decode(&p) != nil || p.Channel == "" || p.Text == "" {
			f.bad++
			fmt.Fprint(w, `{"ok":false,"error":"invalid_auth"}`)
			return
		}
		f.posts = append(f.posts, p)
		answer := `{"ok":true,"channel":"` + p.Channel + `","ts":"1700000009.000900"}`
		if q := f.answers[p.Text]; len(q) > 0 {
			answer, f.answers[p.Text] = q[0], q[1:]
		}
		if answer == "429" {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"ok":false,"error":"ratelimited"}`)
			return
		}
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(f.Close)
	return f
}

// Slack messages are answered with chat.postMessage: its "ok":false in a
// 200 is read like a status (ratelimited and internal_error retried, the
// rest final), a 429's Retry-After is honoured, and what cannot be posted
// goes to the dead-letter file with Slack's reason.
func TestSlackRepliesThroughChatPostMessage(t *testing.T) {
	api := startFakeSlack(t, map[string][]string{
		"busy":   {`{"ok":false,"error":"ratelimited"}`, `{"ok":false,"error":"internal_error"}`},
		"slow":   {"429"},
		"nobody": {`{"ok":false,"error":"channel_not_found"}`},
		"junk":   {`<html>bad gateway</html>`},
	})
	dead := t.TempDir() + "/dead.jsonl"
	p, store := newProcessor(t, Options{DeadLetterPath: dead, Platforms: []Platform{NewSlack(slackSecret, slackToken, api.URL)},
		API: APIOptions{Retries: 3, Backoff: time.Millisecond, MaxBackoff: 2 * time.Second}})
	r := NewReceiver(p, 1<<20, quiet)
	events := map[string]string{
		"Ev1": `"type":"message","channel":"C1","user":"U1","text":"hello","ts":"1.1"`,
		"Ev2": `"type":"message","channel":"C1","user":"U1","text":"busy","ts":"1.2","thread_ts":"1.1"`,
		"Ev3": `"type":"message","channel":"C1","user":"U1","text":"slow","ts":"1.3"`,
		"Ev4": `"type":"message","channel":"C404","user":"U1","text":"nobody","ts":"1.4"`,
		"Ev5": `"type":"message","channel":"C1","bot_id":"B1","text":"an answer of ours","ts":"1.5"`,
		"Ev6": `"type":"message","channel":"C1","user":"U1","text":"junk","ts":"1.6"`,
	}
	for id, e := range events {
		b := slackEvent(id, e)
		if status, body := slack(r, b, slackRequest(slackSecret, b, time.Now())); status != 200 {
			t.Fatalf("%s: %d %s", id, status, body)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	attempts := map[string]int{}
	for _, post := range api.posts {
		attempts[post.Text]++
		if post.Text == "busy" && (post.Channel != "C1" || post.ThreadTS != "1.1") {
			t.Errorf("the threaded message was answered in %+v", post)
		}
	}
	want := map[string]int{"hello": 1, "busy": 3, "slow": 2, "nobody": 1, "junk": 2}
	if fmt.Sprint(attempts) != fmt.Sprint(want) || api.bad != 0 {
		t.Fatalf("chat.postMessage calls %v (%d refused), want %v", attempts, api.bad, want)
	}
	st := p.Stats()
	if st.Processed != 5 || st.Failed != 1 || st.Retries != 4 {
		t.Fatalf("stats %+v: want 5 processed, the unknown channel dead-lettered, 4 retries", st)
	}
	for id, n := range map[string]int{"Ev1": 1, "Ev2": 3, "Ev3": 2, "Ev5": 0, "Ev6": 2} {
		b, err := store.GetResult(context.Background(), id)
		var res struct {
			Source   Source
			Event    string
			Attempts int
		}
		if err != nil || json.Unmarshal(b, &res) != nil || res.Source != SourceSlack || res.Event != "message" || res.Attempts != n {
			t.Errorf("result %s: %s (%v), want source slack, event message, %d attempts", id, b, err, n)
		}
	}
	f, err := os.Open(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []deadLetter
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var d deadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, d)
	}
	if len(lines) != 1 || lines[0].ID != "Ev4" || lines[0].Attempts != 1 || !strings.Contains(lines[0].Error, "channel_not_found") {
		t.Fatalf("dead letters %+v, want Ev4 with Slack's reason after one attempt", lines)
	}
}
