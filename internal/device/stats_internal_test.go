package device

import (
	"fmt"
	"testing"
)

func TestStats(t *testing.T) {
	p, err := New(Options{CacheSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	ua := func(i int) []byte {
		return fmt.Appendf(nil, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36", i)
	}
	for i := range 3 {
		p.Parse(ua(i))
		p.Parse(ua(i))
	}
	if s := p.Stats(); s.Hits != 3 || s.Misses != 3 || s.Entries != 3 || s.Evictions != 0 {
		t.Errorf("after 3 User-Agents twice: %+v, want 3 hits, 3 misses, 3 entries", s)
	}
	for i := range 50 {
		p.Parse(ua(100 + i))
	}
	p.cache.CleanUp() // the cache evicts in batches, on its own schedule
	if s := p.Stats(); s.Misses != 53 || s.Evictions < 49 || s.Entries > 4 {
		t.Errorf("after 50 more through a cache of 4: %+v, want 53 misses, at least 49 evictions, at most 4 entries", s)
	}
}
