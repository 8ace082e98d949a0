package geo_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"tsubame/internal/geo"
	"tsubame/internal/geo/geotest"
)

var sink geo.Location

var benchCountries = []string{"JP", "US", "KR", "TW", "CN", "GB", "DE", "FR", "IN", "ID", "TH", "VN", "PH", "MY", "SG",
	"AU", "NZ", "CA", "MX", "BR", "AR", "CL", "ES", "IT", "NL", "BE", "SE", "NO", "DK", "FI", "PL", "CZ", "AT"}

// benchDB writes a database of 20,000 IPv4 /24s and 2,000 IPv6 /32s in
// public space, in 33 countries of 20 regions each, and returns it with
// addresses inside those networks.
func benchDB(b *testing.B) (*geo.DB, []netip.Addr) {
	b.Helper()
	r := rand.New(rand.NewPCG(7, 2026))
	nets := map[string]geo.Location{}
	var addrs []netip.Addr
	for len(nets) < 22_000 {
		cc := benchCountries[r.IntN(len(benchCountries))]
		loc := geo.Location{Country: cc, Region: fmt.Sprintf("%s-%d", cc, r.IntN(20))}
		var a netip.Addr
		var p string
		if len(nets) < 20_000 {
			a = netip.AddrFrom4([4]byte{byte(11 + r.IntN(116)), byte(r.IntN(256)), byte(r.IntN(256)), byte(1 + r.IntN(254))})
			p = fmt.Sprintf("%d.%d.%d.0/24", a.As4()[0], a.As4()[1], a.As4()[2])
		} else {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, byte(r.IntN(256)), byte(r.IntN(256)), 15: 1})
			p = fmt.Sprintf("2001:%02x%02x::/32", a.As16()[2], a.As16()[3])
		}
		if _, dup := nets[p]; dup {
			continue
		}
		nets[p] = loc
		addrs = append(addrs, a)
	}
	path := filepath.Join(b.TempDir(), "bench.mmdb")
	geotest.Write(b, path, nets)
	db, err := geo.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	r.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	for _, a := range addrs {
		db.Lookup(a) // every record decoded once: the benchmarks measure hits
	}
	return db, addrs
}

// BenchmarkLookup measures a lookup whose record is cached: the tree walk,
// one map read.
func BenchmarkLookup(b *testing.B) {
	db, addrs := benchDB(b)
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = db.Lookup(addrs[i%len(addrs)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var loc geo.Location
			i := 0
			for pb.Next() {
				loc = db.Lookup(addrs[i%len(addrs)])
				i++
			}
			_ = loc
		})
	})
	b.Run("unknown", func(b *testing.B) {
		b.ReportAllocs()
		a := netip.MustParseAddr("198.18.0.1")
		for b.Loop() {
			sink = db.Lookup(a)
		}
	})
	b.Run("loopback", func(b *testing.B) {
		b.ReportAllocs()
		a := netip.MustParseAddr("127.0.0.1")
		for b.Loop() {
			sink = db.Lookup(a)
		}
	})
}

// TestLookupAllocatesNothing holds a lookup whose record is cached to zero
// allocations.
func TestLookupAllocatesNothing(t *testing.T) {
	db := openTest(t)
	addrs := []netip.Addr{
		netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("::ffff:203.0.113.70"),
		netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("127.0.0.1"),
	}
	for _, a := range addrs {
		db.Lookup(a)
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		sink = db.Lookup(addrs[i%len(addrs)])
		i++
	}); a != 0 {
		t.Fatalf("Lookup allocates %v times per call, want 0", a)
	}
}
