package h2call_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/net/http2/hpack"

	"tsubame/internal/h2call"
	"tsubame/internal/h2call/fakeapi"
)

// owner records how each call ended.
type owner struct {
	mu   sync.Mutex
	done map[uuid.UUID]string
	wg   sync.WaitGroup
}

type callOwner struct {
	o   *owner
	key uuid.UUID
}

func (c callOwner) CallDone(status int, _ time.Duration, err error) {
	c.o.mu.Lock()
	defer c.o.mu.Unlock()
	if err != nil {
		c.o.done[c.key] = "error: " + err.Error()
	} else {
		c.o.done[c.key] = http.StatusText(status)
	}
	c.o.wg.Done()
}

func newClient(t *testing.T, url string, timeout time.Duration) *h2call.Client {
	t.Helper()
	c, err := h2call.New(url, true, 2, []hpack.HeaderField{{Name: "content-type", Value: "application/json"},
		{Name: "authorization", Value: "Bearer tok", Sensitive: true}}, "x-line-retry-key", timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Abort(errors.New("test over")) })
	return c
}

// Many calls on a few connections: each ends once, with the API's status,
// and the API sees each key once.
func TestCallsEndOnceEach(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{Token: "tok", MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c := newClient(t, api.URL, time.Minute)
	o := &owner{done: map[uuid.UUID]string{}}
	const n = 500
	calls := make([]h2call.Call, n)
	for i := range calls {
		key := uuid.New()
		body, _ := json.Marshal(map[string]any{"replyToken": "rt", "messages": []map[string]string{{"type": "text", "text": key.String()}}})
		o.wg.Add(1)
		calls[i].Reset(callOwner{o, key}, key, body)
		c.Do(&calls[i])
	}
	o.wg.Wait()
	if len(o.done) != n {
		t.Fatalf("%d calls ended, want %d", len(o.done), n)
	}
	for key, how := range o.done {
		if how != "OK" {
			t.Fatalf("call %s: %s", key, how)
		}
	}
	if distinct, maxAttempts := api.Keys(); distinct != n || maxAttempts != 1 || api.Bad() != 0 {
		t.Fatalf("the API saw %d keys (max %d attempts, %d bad)", distinct, maxAttempts, api.Bad())
	}
}

// A call the API does not answer ends with an error at its timeout; the
// client stays usable.
func TestCallTimesOut(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	api.Hold()
	defer api.Release()
	c := newClient(t, api.URL, 300*time.Millisecond)
	o := &owner{done: map[uuid.UUID]string{}}
	key := uuid.New()
	var call h2call.Call
	o.wg.Add(1)
	call.Reset(callOwner{o, key}, key, []byte(`{"replyToken":"rt","messages":[{"type":"text","text":"x"}]}`))
	c.Do(&call)
	o.wg.Wait()
	if how := o.done[key]; len(how) < 6 || how[:6] != "error:" {
		t.Fatalf("a held call ended with %q", how)
	}
	if !c.Usable() {
		t.Fatal("a timeout made the client unusable")
	}
}
