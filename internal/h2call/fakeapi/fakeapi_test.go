package fakeapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// post sends one reply-style call with key and returns the status; it
// fails the test if the call did not use HTTP/major.
func post(t *testing.T, c *http.Client, major int, url, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"messages":[{"type":"text","text":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Line-Retry-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != major {
		t.Fatalf("the call went over %s, want HTTP/%d", resp.Proto, major)
	}
	return resp.StatusCode
}

func TestFakeCountsKeysOverBothProtocols(t *testing.T) {
	s, err := Start(Options{FailFirst: 1, MinDelay: time.Millisecond, MaxDelay: 3 * time.Millisecond, RecordTexts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var h2only http.Protocols
	h2only.SetUnencryptedHTTP2(true) // HTTP/2 with prior knowledge, as Tsubame's client speaks it
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2only}}
	for name, c := range map[string]*http.Client{"HTTP/1.1": {}, "h2c": h2c} {
		major := map[string]int{"HTTP/1.1": 1, "h2c": 2}[name]
		s.ResetKeys()
		a, b := uuid.NewString(), uuid.NewString()
		// FailFirst: 1 — each key's first attempt gets a 500, the second a 200.
		for i, want := range []int{500, 200, 200} {
			if got := post(t, c, major, s.URL, a); got != want {
				t.Fatalf("%s: attempt %d of a key answered %d, want %d", name, i+1, got, want)
			}
		}
		if got := post(t, c, major, s.URL, b); got != 500 {
			t.Fatalf("%s: a new key's first attempt answered %d, want 500", name, got)
		}
		if got := post(t, c, major, s.URL, "not-a-uuid"); got != 400 {
			t.Fatalf("%s: a malformed key answered %d, want 400", name, got)
		}
		if distinct, maxAttempts := s.Keys(); distinct != 2 || maxAttempts != 3 {
			t.Fatalf("%s: Keys() = %d, %d; want 2 keys, at most 3 attempts", name, distinct, maxAttempts)
		}
		if texts := s.Texts(); texts["hi"] != 2 {
			t.Fatalf("%s: Texts() = %v", name, texts)
		}
	}
	if s.Calls() != 10 || s.Bad() != 2 {
		t.Errorf("Calls() = %d, Bad() = %d; want 10 and 2 (kept across ResetKeys)", s.Calls(), s.Bad())
	}
	s.ResetKeys()
	if distinct, _ := s.Keys(); distinct != 0 || len(s.Texts()) != 0 {
		t.Errorf("ResetKeys left %d keys", distinct)
	}
}

// Hold keeps every answer until Release, over both protocols: the calls
// arrive and are counted, none is answered, and all are answered after.
func TestFakeHoldsAnswersUntilRelease(t *testing.T) {
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var h2only http.Protocols
	h2only.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2only}}
	s.Hold()
	done := make(chan int, 4)
	for _, c := range []struct {
		client *http.Client
		major  int
	}{{&http.Client{}, 1}, {h2c, 2}, {&http.Client{}, 1}, {h2c, 2}} {
		go func() {
			status := -1 // if post fails the test, its Goexit still runs this defer
			defer func() { done <- status }()
			status = post(t, c.client, c.major, s.URL, uuid.NewString())
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Calls() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Calls() != 4 || s.Answered() != 0 || len(done) != 0 {
		t.Fatalf("held: %d calls, %d answered, %d replies; want 4, 0, 0", s.Calls(), s.Answered(), len(done))
	}
	s.Release()
	for range 4 {
		if status := <-done; status != 200 {
			t.Fatalf("a released call answered %d", status)
		}
	}
	if s.Answered() != 4 {
		t.Fatalf("%d answered after Release, want 4", s.Answered())
	}
}
