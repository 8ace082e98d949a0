package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"tsubame"
)

// RunHandovers runs the Handovers part of the suite. open returns two
// handles on the same, empty data, as two nodes sharing the store would
// hold them.
func RunHandovers(t *testing.T, open func(t *testing.T) (a, b tsubame.Handovers)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, a, b tsubame.Handovers)
	}{
		{"PutThenClaimOnce", testHandoverOnce},
		{"ClaimedOnceUnderRace", testHandoverRace},
		{"ExpiredNotClaimed", testHandoverTTL},
		{"RejectsInvalid", testHandoverInvalid},
	} {
		t.Run("Handovers"+tc.name, func(t *testing.T) {
			a, b := open(t)
			tc.test(t, a, b)
		})
	}
}

func claim(t *testing.T, h tsubame.Handovers) (string, []byte) {
	t.Helper()
	holder, data, err := h.ClaimHandover(ctx(t))
	if err != nil {
		t.Fatalf("ClaimHandover: %v", err)
	}
	return holder, data
}

func testHandoverOnce(t *testing.T, a, b tsubame.Handovers) {
	if holder, _ := claim(t, b); holder != "" {
		t.Fatalf("claimed %q from an empty store", holder)
	}
	data := bytes.Repeat([]byte("x\x00y"), 1000)
	if err := a.PutHandover(ctx(t), "node-a/1f", []byte("old"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.PutHandover(ctx(t), "node-a/1f", data, time.Hour); err != nil { // replaces
		t.Fatal(err)
	}
	holder, got := claim(t, b)
	if holder != "node-a/1f" || !bytes.Equal(got, data) {
		t.Fatalf("claimed %q with %d bytes, want node-a/1f with %d", holder, len(got), len(data))
	}
	if holder, _ := claim(t, a); holder != "" {
		t.Fatalf("claimed %q twice", holder)
	}
}

func testHandoverRace(t *testing.T, a, b tsubame.Handovers) {
	const n, claimers = 12, 8
	for i := range n {
		if err := a.PutHandover(ctx(t), fmt.Sprint("node-", i), []byte(fmt.Sprint("data-", i)), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for c := range claimers {
		h := []tsubame.Handovers{a, b}[c%2]
		wg.Go(func() {
			for {
				holder, data, err := h.ClaimHandover(ctx(t))
				if err != nil {
					t.Error(err)
					return
				}
				if holder == "" {
					return
				}
				mu.Lock()
				got[holder]++
				mu.Unlock()
				if want := "data-" + holder[len("node-"):]; string(data) != want {
					t.Errorf("%s's data is %q, want %q", holder, data, want)
				}
			}
		})
	}
	wg.Wait()
	if len(got) != n {
		t.Fatalf("%d handovers claimed of %d", len(got), n)
	}
	for holder, c := range got {
		if c != 1 {
			t.Fatalf("%s claimed %d times", holder, c)
		}
	}
}

func testHandoverTTL(t *testing.T, a, b tsubame.Handovers) {
	if err := a.PutHandover(ctx(t), "short", []byte("s"), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := a.PutHandover(ctx(t), "long", []byte("l"), time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the short one's ttl: no bound is asserted
	holder, _ := claim(t, b)
	if holder != "long" {
		t.Fatalf("claimed %q, want the unexpired long", holder)
	}
	if holder, _ := claim(t, b); holder != "" {
		t.Fatalf("claimed the expired %q", holder)
	}
}

func testHandoverInvalid(t *testing.T, a, b tsubame.Handovers) {
	for _, tc := range []struct {
		holder string
		data   []byte
		ttl    time.Duration
	}{{"", []byte("x"), time.Hour}, {"a|b", []byte("x"), time.Hour}, {"a", nil, time.Hour}, {"a", []byte("x"), 0},
		{"a", []byte("x"), tsubame.MaxLeaseTTL + 1}, {"a", make([]byte, tsubame.MaxHandoverBytes+1), time.Hour}} {
		if err := a.PutHandover(ctx(t), tc.holder, tc.data, tc.ttl); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("PutHandover(%q, %d bytes, %v): %v, want EINVALID", tc.holder, len(tc.data), tc.ttl, err)
		}
	}
	if holder, _ := claim(t, b); holder != "" {
		t.Fatalf("a refused handover was kept: %q", holder)
	}
}
