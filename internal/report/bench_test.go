package report

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"tsubame/internal/accesslog"
)

// benchFormats are the access log's formats, each benchmarked.
var benchFormats = []struct {
	name   string
	format accesslog.Format
}{{"ltsv", accesslog.LTSV}, {"json", accesslog.JSON}}

// BenchmarkRollup rolls up 12,000 lines of every kind (an event line in
// eleven of twelve) from closed files per op: ns/op ÷ 12,000 is the cost of
// a line, against the access log's rate.
func BenchmarkRollup(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.name, func(b *testing.B) {
			dir := b.TempDir()
			evs := traffic(12000, t0)
			writeLog(b, dir, f.format, false, evs)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				r, err := Open(Options{Dir: dir, Name: "access.log", Path: b.TempDir() + "/" + FileName, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := r.CatchUp(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if r.Stats().Lines != int64(len(evs)) {
					b.Fatalf("read %d lines", r.Stats().Lines)
				}
				r.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/line")
		})
	}
}

// BenchmarkClassify is the parse and count of one event line.
func BenchmarkClassify(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.name, func(b *testing.B) {
			dir := b.TempDir()
			writeLog(b, dir, f.format, false, traffic(12, t0))
			names, _ := accesslog.ClosedFiles(dir, "access.log", false)
			data, err := os.ReadFile(filepath.Join(dir, names[0]))
			if err != nil {
				b.Fatal(err)
			}
			lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
			var (
				l    accesslog.Line
				dims Dims
				c    Counts
			)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := classify(lines[i%len(lines)], &l, &dims, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCount is the roller's count of a batch of 60,000 event lines in
// 24,000 rows (a busy account's: 10,000 line items over 480 placements), no
// commit: the parse, the row key and the batch's map, per line, into a
// batch emptied as a commit leaves it.
func BenchmarkCount(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.name, func(b *testing.B) {
			dir := b.TempDir()
			writeLog(b, dir, f.format, false, traffic(1, t0)) // a decision's line
			names, _ := accesslog.ClosedFiles(dir, "access.log", false)
			one, err := os.ReadFile(filepath.Join(dir, names[0]))
			if err != nil {
				b.Fatal(err)
			}
			var data []byte
			const lines = 60_000
			for i := range lines {
				row := i % 24_000
				line := bytes.Replace(one, []byte("li-0"), fmt.Appendf(nil, "li-%05d", row%10_000), 2)
				data = append(data, bytes.Replace(line, []byte("p-1"), fmt.Appendf(nil, "p-%03d", row/10_000*160+row%160), 1)...)
			}
			r, err := Open(Options{Dir: b.TempDir(), Name: "access.log", Path: b.TempDir() + "/" + FileName, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			bt := &batch{rows: map[string]*Counts{}}
			for b.Loop() {
				if n, _ := r.count(bt, data); n != lines || len(bt.rows) != 24_000 {
					b.Fatalf("counted %d lines in %d rows", n, len(bt.rows))
				}
				bt.reset()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/lines, "ns/line")
		})
	}
}
