package accesslog

import (
	"context"
	"time"

	"tsubame/internal/logbatch"
)

// LogStore keeps access-log lines in a store, in a keyspace of their own
// (endpoints with access_log: store). Implementations must be safe for
// concurrent use.
type LogStore interface {
	// AppendLog stores a batch after those already stored, all or none:
	// whole lines, each ending in '\n', or such lines compressed by
	// logbatch. The store copies what it keeps.
	AppendLog(ctx context.Context, batch []byte) error
	// ScanLog calls fn with each stored line in order, without its '\n',
	// decompressing the batches that are compressed. The line is only
	// valid during the call.
	ScanLog(ctx context.Context, fn func(line []byte) error) error
}

// StoreSink writes batches into a LogStore: one store write per
// batch (the 2016 Phoenix ad server wrote one per request and fell to 93 req/s),
// compressed unless told otherwise (see internal/logbatch).
type StoreSink struct {
	store    LogStore
	timeout  time.Duration
	compress bool
	buf      []byte // the compressed batch; Write is called by one goroutine
}

// NewStoreSink returns a sink over store; each batch write is bounded by
// timeout, and compressed if compress.
func NewStoreSink(store LogStore, timeout time.Duration, compress bool) *StoreSink {
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
