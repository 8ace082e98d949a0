package ads_test

import (
	"net/http"
	"testing"
	"time"

	"tsubame/internal/track"
)

// A test auction's click (the tracker in its bid's markup) is logged as a
// test, not counted, and never reaches the store's dedupe: it cannot use
// up a real click's id.
func TestTestClickIsNotCounted(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{})
	sg, err := track.NewSigner(f.keys[0].ID, f.keys...)
	if err != nil {
		t.Fatal(err)
	}
	tk := track.Token{Kind: track.KindClick, Decision: "01M89NT76D8GAJY6B1QHZDW6XP", LineItem: "li-top", Campaign: "spring",
		Creative: "banner-1", Placement: "top", User: "buyer-1", Click: "https://acme.example/spring", Expires: time.Now().Add(time.Hour),
		Test: true}
	test, err := sg.Sign(tk)
	if err != nil {
		t.Fatal(err)
	}
	tk.Test = false
	real, _ := sg.Sign(tk)
	for _, tok := range []string{test, test, real} {
		if resp, _ := get(t, n.url+"/t/c/"+tok); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://acme.example/spring" {
			t.Fatalf("click: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	clicks := events(n.lines(t), "click")
	if len(clicks) != 3 {
		t.Fatalf("%d clicks logged", len(clicks))
	}
	for _, c := range clicks[:2] {
		if c["valid"] != "false" || c["test"] != "true" || c["reason"] != "test" {
			t.Errorf("a test auction's click logged %v", c)
		}
	}
	if c := clicks[2]; c["valid"] != "true" || c["test"] != "" || c["uid"] != "buyer-1" {
		t.Errorf("the real click after two test ones logged %v", c)
	}
}
