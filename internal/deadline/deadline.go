// Package deadline is the context of a request that must be answered by a
// time: its deadline is the request's budget (a bid's tmax less the way
// back, a decision's configured timeout), and every store call the
// request makes is bounded by it, rather than each call by a fixed
// timeout of its own.
//
// A Context is a time and nothing else until a call waits on it: most
// requests make no store call (a line item without frequency caps takes
// nothing from the store), and context.WithDeadline would cost each of
// them a timer and three allocations. The first Done or Err arms it
// (makes the channel and the timer); a request that made a store call
// pays that once, however many calls it makes.
//
// It imports no package of ours (arch_test.go).
package deadline

import (
	"context"
	"sync"
	"time"
)

// Context is a context.Context that ends at a deadline, or when its parent
// ends. Its methods are safe for concurrent use; Reset and Stop are its
// owner's (the request's), called when no call is using it.
type Context struct {
	parent context.Context
	at     time.Time

	mu sync.Mutex
	// armed is the context Done and Err read, made by the first of them;
	// stop ends it (its timer) when the request is done.
	armed context.Context
	stop  context.CancelFunc
}

var _ context.Context = (*Context)(nil)

// New returns a Context that ends at at, or when parent does (nil:
// context.Background()).
func New(parent context.Context, at time.Time) *Context {
	c := &Context{}
	c.set(parent, at)
	return c
}

// Reset readies c for another request, ending at at or when parent does,
// and reports true; or, when c was armed (a call waited on it, and may
// hold it still), leaves it as it is and reports false: the caller then
// takes a New one. A pooled request scratch keeps its Context this way.
func (c *Context) Reset(parent context.Context, at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed != nil {
		return false
	}
	c.set(parent, at)
	return true
}

func (c *Context) set(parent context.Context, at time.Time) {
	if parent == nil {
		parent = context.Background()
	}
	if d, ok := parent.Deadline(); ok && d.Before(at) {
		at = d
	}
	c.parent, c.at = parent, at
}

// Stop ends c's timer, if it was armed: the request is done. Calls still
// waiting on c see it end (context.Canceled).
func (c *Context) Stop() {
	c.mu.Lock()
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Deadline returns when c ends. It does not arm c.
func (c *Context) Deadline() (time.Time, bool) { return c.at, true }

// Done arms c and returns a channel closed when it ends.
func (c *Context) Done() <-chan struct{} { return c.arm().Done() }

// Err arms c and returns why it ended, nil while it has not.
func (c *Context) Err() error { return c.arm().Err() }

// Value is the parent's value of key.
func (c *Context) Value(key any) any { return c.parent.Value(key) }

func (c *Context) arm() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == nil {
		c.armed, c.stop = context.WithDeadline(c.parent, c.at)
	}
	return c.armed
}
