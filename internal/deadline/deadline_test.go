package deadline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"tsubame/internal/deadline"
)

// A Context ends at its deadline, or earlier with its parent; its
// deadline is the earlier of the two; it is reused until something
// waits on it, and never after.
func TestContext(t *testing.T) {
	at := time.Now().Add(20 * time.Millisecond)
	c := deadline.New(context.Background(), at)
	if d, ok := c.Deadline(); !ok || !d.Equal(at) {
		t.Fatalf("deadline %v %v, want %v", d, ok, at)
	}
	if !c.Reset(context.Background(), at.Add(time.Hour)) {
		t.Fatal("an unarmed context was not reused")
	}
	if d, _ := c.Deadline(); !d.Equal(at.Add(time.Hour)) {
		t.Fatalf("deadline after Reset %v", d)
	}
	if !c.Reset(context.Background(), at) {
		t.Fatal("not reused")
	}
	if c.Err() != nil {
		t.Fatal("ended before its deadline")
	}
	<-c.Done() // the deadline passes: no bound here but the deadline itself
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !time.Now().After(at) {
		t.Fatalf("err %v at %v, deadline %v", c.Err(), time.Now(), at)
	}
	if c.Reset(context.Background(), at.Add(time.Hour)) {
		t.Fatal("a context something waited on was reused")
	}
	if d, _ := c.Deadline(); !d.Equal(at) {
		t.Fatalf("a refused Reset changed the deadline: %v", d)
	}

	// The parent's deadline when earlier, its values, its end.
	type key struct{}
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), at.Add(time.Minute))
	c = deadline.New(parent, at.Add(time.Hour))
	if d, _ := c.Deadline(); !d.Equal(at.Add(time.Minute)) {
		t.Fatalf("deadline under an earlier parent: %v", d)
	}
	if c.Value(key{}) != "v" {
		t.Fatal("the parent's value is lost")
	}
	cancel()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("err after the parent's end: %v", c.Err())
	}

	// Stop ends a waiting call.
	c = deadline.New(context.Background(), time.Now().Add(time.Hour))
	done := c.Done()
	c.Stop()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("err after Stop: %v", c.Err())
	}
}

// Readying a pooled Context for a request, reading its deadline and
// stopping it cost nothing while no call waits on it.
func TestContextUnarmedAllocatesNothing(t *testing.T) {
	c := deadline.New(context.Background(), time.Now())
	var ctx context.Context = c
	if n := testing.AllocsPerRun(100, func() {
		if !c.Reset(context.Background(), time.Now().Add(time.Second)) {
			t.Fatal("not reused")
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Fatal("no deadline")
		}
		c.Stop()
	}); n != 0 {
		t.Fatalf("%v allocations a request", n)
	}
}
