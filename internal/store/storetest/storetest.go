// Package storetest is the conformance suite every tsubame.Store passes: the
// backends in internal/store and the cache decorator over them. A new backend
// is done when Run passes against a real instance of it under -race.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/logbatch"
)

// Run runs the suite. newStore returns an empty store; it is called once per
// subtest and must arrange for the store to be closed when the test ends (the
// suite closes it too, so Close must tolerate a second call or the cleanup
// must ignore its error).
func Run(t *testing.T, newStore func(t *testing.T) tsubame.Store) {
	t.Run("GetMissing", func(t *testing.T) { testGetMissing(t, newStore(t)) })
	t.Run("PutGet", func(t *testing.T) { testPutGet(t, newStore(t)) })
	t.Run("ReplaceKeepsLatest", func(t *testing.T) { testReplace(t, newStore(t)) })
	t.Run("CallerOwnsValues", func(t *testing.T) { testOwnership(t, newStore(t)) })
	t.Run("PutRejectsInvalid", func(t *testing.T) { testPutInvalid(t, newStore(t)) })
	t.Run("PutManyAllOrNothing", func(t *testing.T) { testPutManyAtomic(t, newStore(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, newStore(t)) })
	t.Run("ListPages", func(t *testing.T) { testList(t, newStore(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore(t)) })
	t.Run("ClosedFails", func(t *testing.T) { testClosed(t, newStore(t)) })
}

// Placement returns a valid placement with the given id and n urls derived from it.
func Placement(id string, n int) *tsubame.Placement {
	p := &tsubame.Placement{ID: id}
	for i := range n {
		p.URLs = append(p.URLs, fmt.Sprintf("http://ad%d.example.com/%s/tag.js", i+1, id))
	}
	return p
}

func ctx(t *testing.T) context.Context { return t.Context() }

func mustPut(t *testing.T, s tsubame.Store, p *tsubame.Placement) {
	t.Helper()
	if err := s.Put(ctx(t), p); err != nil {
		t.Fatalf("Put(%q): %v", p.ID, err)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := tsubame.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

func samePlacement(t *testing.T, got, want *tsubame.Placement) {
	t.Helper()
	if got.ID != want.ID || !slices.Equal(got.URLs, want.URLs) || got.Name != want.Name || !slices.Equal(got.Deps, want.Deps) {
		t.Fatalf("placement = %+v, want %+v", got, want)
	}
}

func testGetMissing(t *testing.T, s tsubame.Store) {
	_, err := s.Get(ctx(t), "nope")
	wantCode(t, err, tsubame.ENOTFOUND)
}

func testPutGet(t *testing.T, s tsubame.Store) {
	p := Placement("42", 3)
	p.Name = "top banner"
	p.Deps = []string{"campaign:7", "site:news"}
	before := time.Now().Add(-time.Second)
	mustPut(t, s, p)
	got, err := s.Get(ctx(t), "42")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	samePlacement(t, got, p)
	if got.UpdatedAt.Before(before) || got.UpdatedAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("UpdatedAt = %v, want about now", got.UpdatedAt)
	}
}

func testReplace(t *testing.T, s tsubame.Store) {
	mustPut(t, s, Placement("1", 2))
	first, err := s.Get(ctx(t), "1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	second := Placement("1", 1)
	second.URLs[0] = "https://other.example.com/x.js"
	mustPut(t, s, second)
	got, err := s.Get(ctx(t), "1")
	if err != nil {
		t.Fatal(err)
	}
	samePlacement(t, got, second)
	if !got.UpdatedAt.After(first.UpdatedAt) {
		t.Fatalf("UpdatedAt did not advance: %v then %v", first.UpdatedAt, got.UpdatedAt)
	}
}

func testOwnership(t *testing.T, s tsubame.Store) {
	p := Placement("7", 2)
	mustPut(t, s, p)
	p.URLs[0] = "http://mutated.example.com/"
	got, err := s.Get(ctx(t), "7")
	if err != nil {
		t.Fatal(err)
	}
	if got.URLs[0] == "http://mutated.example.com/" {
		t.Fatal("store kept the caller's slice after Put")
	}
	got.URLs[1] = "http://mutated.example.com/"
	again, err := s.Get(ctx(t), "7")
	if err != nil {
		t.Fatal(err)
	}
	if again.URLs[1] == "http://mutated.example.com/" {
		t.Fatal("store handed out memory it still uses")
	}
}

func testPutInvalid(t *testing.T, s tsubame.Store) {
	bad := []*tsubame.Placement{
		{ID: "", URLs: []string{"http://a.example.com/"}},
		{ID: "has space", URLs: []string{"http://a.example.com/"}},
		{ID: "x", URLs: nil},
		{ID: "x", URLs: []string{"javascript:alert(1)"}},
		{ID: "x", URLs: []string{"/relative.js"}},
		{ID: "x", URLs: []string{"http://a.example.com/\n"}},
		{ID: "x", URLs: []string{"http://a.example.com/"}, Deps: []string{""}},
	}
	for _, p := range bad {
		wantCode(t, s.Put(ctx(t), p), tsubame.EINVALID)
	}
	page, err := s.List(ctx(t), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 0 {
		t.Fatalf("invalid placements were stored: %v", page)
	}
}

func testPutManyAtomic(t *testing.T, s tsubame.Store) {
	good := []*tsubame.Placement{Placement("a", 1), Placement("b", 2)}
	if err := s.PutMany(ctx(t), good); err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	batch := []*tsubame.Placement{Placement("c", 1), {ID: "d"}, Placement("e", 1)}
	wantCode(t, s.PutMany(ctx(t), batch), tsubame.EINVALID)
	dup := []*tsubame.Placement{Placement("f", 1), Placement("f", 2)}
	wantCode(t, s.PutMany(ctx(t), dup), tsubame.EINVALID)
	page, err := s.List(ctx(t), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range page {
		ids = append(ids, p.ID)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("after a rejected batch the store holds %v, want [a b]", ids)
	}
}

func testDelete(t *testing.T, s tsubame.Store) {
	mustPut(t, s, Placement("gone", 1))
	if err := s.Delete(ctx(t), "gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Get(ctx(t), "gone")
	wantCode(t, err, tsubame.ENOTFOUND)
	wantCode(t, s.Delete(ctx(t), "gone"), tsubame.ENOTFOUND)
}

func testList(t *testing.T, s tsubame.Store) {
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("p%03d", i)
		want = append(want, id)
	}
	// Insert out of order: List must sort.
	for _, i := range []int{3, 0, 24, 11} {
		mustPut(t, s, Placement(want[i], 1))
	}
	var rest []*tsubame.Placement
	for i, id := range want {
		if i != 3 && i != 0 && i != 24 && i != 11 {
			rest = append(rest, Placement(id, 1))
		}
	}
	if err := s.PutMany(ctx(t), rest); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for {
		page, err := s.List(ctx(t), after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 10 {
			t.Fatalf("List returned %d > limit 10", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			got = append(got, p.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged List = %v\nwant %v", got, want)
	}
	ids, err := s.IDs(ctx(t))
	if err != nil || !slices.Equal(ids, want) {
		t.Fatalf("IDs = %v, %v\nwant %v", ids, err, want)
	}
	mustDelete := s.Delete(ctx(t), want[5])
	if ids, err := s.IDs(ctx(t)); mustDelete != nil || err != nil || slices.Contains(ids, want[5]) || len(ids) != len(want)-1 {
		t.Fatalf("IDs after deleting %s = %v, %v (delete: %v)", want[5], ids, err, mustDelete)
	}
	mustPut(t, s, Placement(want[5], 1))
	page, err := s.List(ctx(t), "p005x", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].ID != "p006" || page[1].ID != "p007" {
		t.Fatalf("List after a missing id = %v", page)
	}
	_, err = s.List(ctx(t), "", 0)
	wantCode(t, err, tsubame.EINVALID)
}

func testConcurrent(t *testing.T, s tsubame.Store) {
	const workers, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("w%d-%d", w, r%5)
				if err := s.Put(ctx(t), Placement(id, 1+r%3)); err != nil {
					errs <- err
					return
				}
				if _, err := s.Get(ctx(t), id); err != nil {
					errs <- err
					return
				}
				if _, err := s.List(ctx(t), "", 3); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	page, err := s.List(ctx(t), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != workers*5 {
		t.Fatalf("after concurrent puts List has %d placements, want %d", len(page), workers*5)
	}
}

func testClosed(t *testing.T, s tsubame.Store) {
	mustPut(t, s, Placement("1", 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Get(ctx(t), "1"); err == nil {
		t.Fatal("Get after Close succeeded")
	}
	if err := s.Put(ctx(t), Placement("2", 1)); err == nil {
		t.Fatal("Put after Close succeeded")
	}
}

// LogStore is the access log's keyspace of a store (the port
// internal/accesslog.LogStore names; a store package does not import its
// consumers).
type LogStore interface {
	AppendLog(ctx context.Context, batch []byte) error
	ScanLog(ctx context.Context, fn func(line []byte) error) error
}

// ResultStore is the webhook results' keyspace (webhook.ResultStore).
type ResultStore interface {
	PutResult(ctx context.Context, id string, result []byte) error
	PutResults(ctx context.Context, results []tsubame.Result) error
	GetResult(ctx context.Context, id string) ([]byte, error)
	CountResults(ctx context.Context) (int, error)
}

// RunLog runs the LogStore part of the suite.
func RunLog(t *testing.T, newStore func(t *testing.T) LogStore) {
	t.Run("AppendScanInOrder", func(t *testing.T) {
		s := newStore(t)
		var want []string
		for b := range 5 {
			var batch []byte
			for i := range 100 {
				line := fmt.Sprintf("time:x\tbatch:%d\tn:%d", b, i)
				want = append(want, line)
				batch = append(batch, line+"\n"...)
			}
			if err := s.AppendLog(ctx(t), batch); err != nil {
				t.Fatal(err)
			}
			copy(batch, "XXXX") // the store must have copied
		}
		var got []string
		if err := s.ScanLog(ctx(t), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scanned %d lines, want %d in order (first %q)", len(got), len(want), got[:min(1, len(got))])
		}
	})
	t.Run("CompressedAndPlainBatches", func(t *testing.T) {
		// The store sink compresses batches (internal/logbatch); batches
		// written before, or with store_compression: none, are plain lines.
		s := newStore(t)
		var want []string
		for b := range 4 {
			var batch []byte
			for i := range 500 {
				line := fmt.Sprintf("time:x\tbatch:%d\tn:%d", b, i)
				want = append(want, line)
				batch = append(batch, line+"\n"...)
			}
			if b%2 == 0 {
				batch = logbatch.Compress(nil, batch)
			}
			if err := s.AppendLog(ctx(t), batch); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		if err := s.ScanLog(ctx(t), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scanned %d lines, want %d in order", len(got), len(want))
		}
		// A compressed batch damaged at rest stops the scan with an error.
		bad := logbatch.Compress(nil, []byte("time:y\n"))
		bad[len(bad)-1] ^= 0xff
		if err := s.AppendLog(ctx(t), bad); err != nil {
			t.Fatal(err)
		}
		if err := s.ScanLog(ctx(t), func([]byte) error { return nil }); !errors.Is(err, logbatch.ErrCorrupt) {
			t.Fatalf("ScanLog over a damaged batch = %v, want ErrCorrupt", err)
		}
	})
	t.Run("ConcurrentAppends", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 20 {
					if err := s.AppendLog(ctx(t), fmt.Appendf(nil, "%d-%d\n", w, i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		n := 0
		if err := s.ScanLog(ctx(t), func([]byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 160 {
			t.Fatalf("%d lines after 160 appends", n)
		}
	})
}

// RunResults runs the ResultStore part of the suite.
func RunResults(t *testing.T, newStore func(t *testing.T) ResultStore) {
	t.Run("PutGetReplaceCount", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.GetResult(ctx(t), "m1"); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
			t.Fatalf("missing result: %v", err)
		}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					v := fmt.Appendf(nil, `{"status":"ok","n":%d}`, i)
					if err := s.PutResult(ctx(t), fmt.Sprintf("m%d-%d", w, i), v); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		buf := []byte(`{"status":"failed"}`)
		if err := s.PutResult(ctx(t), "m0-0", buf); err != nil {
			t.Fatal(err)
		}
		copy(buf, "XXXX")
		got, err := s.GetResult(ctx(t), "m0-0")
		if err != nil || string(got) != `{"status":"failed"}` {
			t.Fatalf("replaced result = %s, %v", got, err)
		}
		if n, err := s.CountResults(ctx(t)); err != nil || n != 200 {
			t.Fatalf("CountResults = %d, %v; want 200", n, err)
		}
		// A batch, larger than one Redis command, replacing one result.
		batch := make([]tsubame.Result, 2500)
		for i := range batch {
			batch[i] = tsubame.Result{ID: fmt.Sprintf("b%d", i), Value: fmt.Appendf(nil, `{"n":%d}`, i)}
		}
		batch[0].ID = "m0-0"
		if err := s.PutResults(ctx(t), batch); err != nil {
			t.Fatal(err)
		}
		batch[1].Value[0] = 'X' // the store kept its own copy
		if got, err := s.GetResult(ctx(t), "b1"); err != nil || string(got) != `{"n":1}` {
			t.Fatalf("batched result = %s, %v", got, err)
		}
		if got, _ := s.GetResult(ctx(t), "m0-0"); string(got) != `{"n":0}` {
			t.Fatalf("replaced by a batch = %s", got)
		}
		if n, err := s.CountResults(ctx(t)); err != nil || n != 2699 {
			t.Fatalf("CountResults after the batch = %d, %v; want 2699", n, err)
		}
	})
}
