package device_test

import (
	"fmt"
	"testing"

	"tsubame/internal/device"
)

var sink device.Info

// browserUAs are the cases' User-Agents as request buffers.
func browserUAs() [][]byte {
	var uas [][]byte
	for _, tc := range cases {
		uas = append(uas, []byte(tc.ua))
	}
	return uas
}

// TestParseAllocatesNothing holds a User-Agent seen before to zero
// allocations.
func TestParseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops entries on purpose (the cache's hit counter takes its stripe from one); make test runs this test again without -race")
	}
	p := newParser(t, device.Options{})
	uas := browserUAs()
	for _, ua := range uas {
		p.Parse(ua)
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		sink = p.Parse(uas[i%len(uas)])
		i++
	}); a != 0 {
		t.Fatalf("Parse of a cached User-Agent allocates %v times per call, want 0", a)
	}
}

// BenchmarkParse measures a User-Agent found in the cache (hit, parallel)
// and one parsed (miss: more distinct User-Agents than the cache holds).
func BenchmarkParse(b *testing.B) {
	uas := browserUAs()
	b.Run("hit", func(b *testing.B) {
		p := newParser(b, device.Options{})
		for _, ua := range uas {
			p.Parse(ua)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = p.Parse(uas[i%len(uas)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := newParser(b, device.Options{})
		for _, ua := range uas {
			p.Parse(ua)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var info device.Info
			i := 0
			for pb.Next() {
				info = p.Parse(uas[i%len(uas)])
				i++
			}
			_ = info
		})
	})
	b.Run("miss", func(b *testing.B) {
		p := newParser(b, device.Options{CacheSize: 16})
		var distinct [][]byte
		for v := range 4096 / len(uas) {
			for _, ua := range uas {
				distinct = append(distinct, fmt.Appendf(nil, "%s Build/%d", ua, v))
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = p.Parse(distinct[i%len(distinct)])
			i++
		}
	})
}
