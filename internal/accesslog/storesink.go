package accesslog

import (
	"context"
	"time"

	"tsubame"
	"tsubame/internal/logbatch"
)

// StoreSink writes batches into a tsubame.LogStore: one store write per
// batch (the 2016 Phoenix ad server wrote one per request and fell to 93 req/s),
// compressed unless told otherwise (see internal/logbatch).
type StoreSink struct {
	store    tsubame.LogStore
	timeout  time.Duration
	compress bool
	buf      []byte // the compressed batch; Write is called by one goroutine
}

// NewStoreSink returns a sink over store; each batch write is bounded by
// timeout, and compressed if compress.
func NewStoreSink(store tsubame.LogStore, timeout time.Duration, compress bool) *StoreSink {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &StoreSink{store: store, timeout: timeout, compress: compress}
}

// Write stores the batch p in one store write (all or none, as the store guarantees).
func (s *StoreSink) Write(p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if s.compress {
		s.buf = logbatch.Compress(s.buf, p)
		p = s.buf
	}
	return s.store.AppendLog(ctx, p)
}

// Sync is a no-op: each store write is durable when it returns.
func (s *StoreSink) Sync() error { return nil }

// Tick is a no-op: a store has no files to rotate.
// Boundary is zero: the store keeps no time ranges.
func (s *StoreSink) Boundary() time.Time { return time.Time{} }

func (s *StoreSink) Tick(time.Time) error { return nil }

// Reopen is a no-op.
func (s *StoreSink) Reopen() error { return nil }

// Recover is a no-op: the store reconnects by itself.
func (s *StoreSink) Recover() error { return nil }

// Close is a no-op: the store is closed by its owner.
func (s *StoreSink) Close(context.Context) error { return nil }
