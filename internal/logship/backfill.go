package logship

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/accesslog"
)

// ShipFiles ships whole log files once (a backfill: files kept from before
// the shipper ran, or exported from the store), each line under the same
// id the shipper gives it (node/file-key/line), so a consumer drops the
// lines it already has. It returns the lines acknowledged and the lines
// skipped (not records), and fails if any line was not acknowledged.
func ShipFiles(ctx context.Context, client *kgo.Client, node string, byPlacement bool, paths []string) (shipped, skipped int64, err error) {
	var mu sync.Mutex
	var firstErr error
	var acked int64
	promise := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			firstErr = cmpErr(firstErr, err)
			return
		}
		acked++
	}
	for _, path := range paths {
		first, err := accesslog.FirstLine(path)
		if err != nil {
			return acked, skipped, err
		}
		if first == nil {
			continue // no whole line
		}
		prefix := node + "/" + accesslog.FileKey(first) + "/"
		r, err := accesslog.OpenLines(path)
		if err != nil {
			return acked, skipped, err
		}
		br := bufio.NewReaderSize(r, 1<<20)
		var lineNo int64
		for {
			line, rerr := br.ReadBytes('\n')
			if len(line) > 0 {
				lineNo++
				if !accesslog.ValidLine(line) {
					skipped++
				} else {
					rec := &kgo.Record{Value: line[:len(line)-1],
						Headers: []kgo.RecordHeader{{Key: IDHeader, Value: strconv.AppendInt([]byte(prefix), lineNo, 10)}}}
					if byPlacement {
						rec.Key = accesslog.LinePlacement(line)
					}
					client.Produce(ctx, rec, promise)
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				r.Close()
				return acked, skipped, fmt.Errorf("%s: %w", path, rerr)
			}
		}
		r.Close()
	}
	ferr := client.Flush(ctx)
	mu.Lock()
	defer mu.Unlock()
	if firstErr == nil {
		firstErr = ferr
	}
	return acked, skipped, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
