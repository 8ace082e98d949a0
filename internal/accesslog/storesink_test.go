package accesslog

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"tsubame/internal/logbatch"
)

// capture is a LogStore that keeps each batch as written.
type capture struct{ batches [][]byte }

func (c *capture) AppendLog(_ context.Context, b []byte) error {
	c.batches = append(c.batches, bytes.Clone(b))
	return nil
}

func (c *capture) ScanLog(_ context.Context, fn func([]byte) error) error {
	var d logbatch.Decoder
	for _, b := range c.batches {
		if err := d.Each(b, fn); err != nil {
			return err
		}
	}
	return nil
}

var _ LogStore = (*capture)(nil)

func TestStoreSinkCompression(t *testing.T) {
	batch := []byte(strings.Repeat("time:2026-11-22T06:00:00Z\thost:127.0.0.1\turi:/api/sample5.js?id=1\tstatus:200\n", 200))
	for _, compress := range []bool{true, false} {
		store := &capture{}
		sink := NewStoreSink(store, 0, compress)
		for range 2 {
			if err := sink.Write(batch); err != nil {
				t.Fatal(err)
			}
		}
		raw := store.batches[0]
		if compress && (bytes.Equal(raw, batch) || len(raw)*10 > len(batch)) {
			t.Errorf("compressed: stored %d bytes for %d", len(raw), len(batch))
		}
		if !compress && !bytes.Equal(raw, batch) {
			t.Errorf("store_compression none: the batch was changed")
		}
		var n int
		if err := store.ScanLog(context.Background(), func(l []byte) error {
			if !strings.HasPrefix(string(l), "time:") {
				t.Fatalf("line %q", l)
			}
			n++
			return nil
		}); err != nil || n != 400 {
			t.Errorf("compress %v: %d lines read back (%v), want 400", compress, n, err)
		}
	}
}
