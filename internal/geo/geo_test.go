package geo_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"tsubame"
	"tsubame/internal/geo"
	"tsubame/internal/geo/geotest"
)

var testNets = map[string]geo.Location{
	"203.0.113.0/24":  {Country: "JP", Region: "JP-13"},
	"203.0.113.64/26": {Country: "JP", Region: "JP-27"}, // narrower wins
	"198.51.100.0/24": {Country: "US"},                  // a Country database: no region
	"192.0.2.0/24":    {},                               // a record without a country
	"2001:db8::/32":   {Country: "DE", Region: "DE-BE"},
	"2001:db8:1::/48": {Country: "FR", Region: "FR-IDF"},
}

func openTest(t testing.TB) *geo.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.mmdb")
	geotest.Write(t, path, testNets)
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestLookup(t *testing.T) {
	db := openTest(t)
	for _, tc := range []struct {
		addr string
		want geo.Location
	}{
		{"203.0.113.1", geo.Location{Country: "JP", Region: "JP-13"}},
		{"203.0.113.255", geo.Location{Country: "JP", Region: "JP-13"}},
		{"203.0.113.64", geo.Location{Country: "JP", Region: "JP-27"}},
		{"203.0.113.127", geo.Location{Country: "JP", Region: "JP-27"}},
		{"203.0.113.128", geo.Location{Country: "JP", Region: "JP-13"}},
		{"198.51.100.7", geo.Location{Country: "US"}},
		{"::ffff:203.0.113.9", geo.Location{Country: "JP", Region: "JP-13"}}, // IPv4-mapped
		{"::ffff:198.51.100.7", geo.Location{Country: "US"}},
		{"2001:db8::1", geo.Location{Country: "DE", Region: "DE-BE"}},
		{"2001:db8:ffff::1", geo.Location{Country: "DE", Region: "DE-BE"}},
		{"2001:db8:1::1", geo.Location{Country: "FR", Region: "FR-IDF"}},
		{"2001:db8::1%eth0", geo.Location{Country: "DE", Region: "DE-BE"}},  // the zone is ignored
		{"192.0.2.1", geo.Location{}},                                       // a record without a country
		{"8.8.8.8", geo.Location{}},                                         // not in the database
		{"2001:4860::8888", geo.Location{}},                                 // not in the database
		{"127.0.0.1", geo.Location{}},                                       // loopback
		{"::1", geo.Location{}},                                             // loopback
		{"10.1.2.3", geo.Location{}},                                        // private
		{"192.168.1.1", geo.Location{}},                                     // private
		{"fd00::1", geo.Location{}},                                         // private
		{"fe80::1", geo.Location{}},                                         // link-local
		{"0.0.0.0", geo.Location{}},                                         // unspecified
		{"::ffff:127.0.0.1", geo.Location{}},                                // mapped loopback
		{"224.0.0.1", geo.Location{}},                                       // multicast
		{"2001:db9::1", geo.Location{}},                                     // just past 2001:db8::/32
		{"203.0.112.255", geo.Location{}},                                   // just before 203.0.113.0/24
		{"2002:cb00:7101::1", geo.Location{Country: "JP", Region: "JP-13"}}, // 6to4 of 203.0.113.1, aliased to IPv4
	} {
		addr := netip.MustParseAddr(tc.addr)
		for range 2 { // decoded, then cached
			if got := db.Lookup(addr); got != tc.want {
				t.Errorf("Lookup(%s) = %+v, want %+v", tc.addr, got, tc.want)
			}
		}
	}
	if got := db.Lookup(netip.Addr{}); got != (geo.Location{}) {
		t.Errorf("Lookup(zero Addr) = %+v", got)
	}
}

func TestLookupInternsStrings(t *testing.T) {
	db := openTest(t)
	a := db.Lookup(netip.MustParseAddr("203.0.113.1"))
	b := db.Lookup(netip.MustParseAddr("203.0.113.65")) // another record, same country
	if a.Country != "JP" || b.Country != "JP" {
		t.Fatalf("countries %q, %q", a.Country, b.Country)
	}
	if p, q := unsafe.StringData(a.Country), unsafe.StringData(b.Country); p != q {
		t.Errorf("two records of one country return different strings (%p, %p)", p, q)
	}
}

func TestMetadata(t *testing.T) {
	db := openTest(t)
	m := db.Metadata()
	if m.Type != geotest.DatabaseType || !m.Built.Equal(geotest.BuildTime) || m.Nodes == 0 || m.IPVersion != 6 {
		t.Errorf("Metadata() = %+v", m)
	}
	want := fmt.Sprintf("%s built 2026-01-02T03:04:05Z, %d nodes, IPv6", geotest.DatabaseType, m.Nodes)
	if s := m.String(); s != want {
		t.Errorf("String() = %q, want %q", s, want)
	}
}

func TestClose(t *testing.T) {
	db := openTest(t)
	addr := netip.MustParseAddr("203.0.113.1")
	if db.Lookup(addr).Country != "JP" {
		t.Fatal("not found before Close")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := db.Lookup(addr); got != (geo.Location{}) {
		t.Errorf("Lookup after Close = %+v", got)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The file is read into memory: overwriting it in place (cp over it) does
// not change, or crash, the open database.
func TestOverwriteInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.mmdb")
	geotest.Write(t, path, testNets)
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := db.Lookup(netip.MustParseAddr("2001:db8::1")); got.Country != "DE" {
		t.Errorf("Lookup after the file was overwritten = %+v", got)
	}
}

func TestConcurrentLookups(t *testing.T) {
	db := openTest(t)
	addrs := []struct {
		addr netip.Addr
		want string
	}{
		{netip.MustParseAddr("203.0.113.1"), "JP"},
		{netip.MustParseAddr("198.51.100.1"), "US"},
		{netip.MustParseAddr("2001:db8::1"), "DE"},
		{netip.MustParseAddr("2001:db8:1::1"), "FR"},
		{netip.MustParseAddr("8.8.8.8"), ""},
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				a := addrs[(g+i)%len(addrs)]
				if got := db.Lookup(a.addr).Country; got != a.want {
					t.Errorf("Lookup(%s).Country = %q, want %q", a.addr, got, a.want)
					return
				}
			}
		})
	}
	wg.Go(func() { db.Metadata() })
	wg.Wait()
	db.Close() // while nothing runs: lookups after it return zero
	wg.Go(func() { db.Lookup(addrs[0].addr) })
	wg.Wait()
}

// Close while lookups run: they finish with a result or the zero Location,
// never a crash or a race.
func TestCloseDuringLookups(t *testing.T) {
	db := openTest(t)
	addr := netip.MustParseAddr("203.0.113.1")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if c := db.Lookup(addr).Country; c != "JP" && c != "" {
					t.Errorf("Country = %q", c)
					return
				}
			}
		})
	}
	db.Close()
	wg.Wait()
}

// An IPv4-only database answers IPv4 and mapped addresses, and no IPv6.
func TestIPv4Database(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v4.mmdb")
	writeRaw(t, path, 4, map[string]mmdbtype.DataType{"203.0.113.0/24": countryRecord("JP")})
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if m := db.Metadata(); m.IPVersion != 4 {
		t.Errorf("IPVersion = %d", m.IPVersion)
	}
	for addr, want := range map[string]string{"203.0.113.5": "JP", "::ffff:203.0.113.5": "JP", "2001:db8::1": "", "198.51.100.1": ""} {
		if got := db.Lookup(netip.MustParseAddr(addr)).Country; got != want {
			t.Errorf("Lookup(%s).Country = %q, want %q", addr, got, want)
		}
	}
}

// A database whose records place loopback and private networks (no real one
// does) still answers nothing for them.
func TestLookupSkipsLocalAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.mmdb")
	writeRaw(t, path, 6, map[string]mmdbtype.DataType{
		"127.0.0.0/8":    countryRecord("JP"),
		"10.0.0.0/8":     countryRecord("JP"),
		"203.0.113.0/24": countryRecord("JP"),
	})
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for addr, want := range map[string]string{"127.0.0.1": "", "10.0.0.1": "", "203.0.113.1": "JP"} {
		if got := db.Lookup(netip.MustParseAddr(addr)).Country; got != want {
			t.Errorf("Lookup(%s).Country = %q, want %q", addr, got, want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.mmdb")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.mmdb")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	asn := filepath.Join(dir, "asn.mmdb")
	writeRaw(t, asn, 6, map[string]mmdbtype.DataType{
		"203.0.113.0/24": mmdbtype.Map{
			"autonomous_system_number":       mmdbtype.Uint32(64496),
			"autonomous_system_organization": mmdbtype.String("Example"),
		},
	})
	flat := filepath.Join(dir, "flat.mmdb") // another vendor's layout: country is a string
	writeRaw(t, flat, 6, map[string]mmdbtype.DataType{
		"203.0.113.0/24": mmdbtype.Map{"country": mmdbtype.String("JP"), "continent": mmdbtype.String("AS")},
	})
	nothing := filepath.Join(dir, "nothing.mmdb") // no network at all
	writeRaw(t, nothing, 6, nil)

	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "missing.mmdb"), "does not exist"},
		{"directory", dir, "is not a regular file"},
		{"garbage", garbage, "is not a MaxMind DB file"},
		{"empty", empty, "is not a MaxMind DB file"},
		{"asn", asn, "has no country data: none of its first 1 records has country.iso_code"},
		{"flat", flat, "has no country data: record of 203.0.113.0/24"},
		{"nothing", nothing, "has no country data: it has no networks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := geo.Open(tc.path)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not name the file and say %q", err, tc.want)
			}
			if code := tsubame.ErrorCode(err); code != tsubame.EINVALID {
				t.Errorf("error code %q, want %q", code, tsubame.EINVALID)
			}
		})
	}
}

// The probe looks past records without a country, as in a real database
// whose first networks are anonymous proxies or satellite providers.
func TestOpenFindsCountryPastFirstRecords(t *testing.T) {
	nets := map[string]geo.Location{}
	for i := range 50 {
		nets[fmt.Sprintf("198.51.100.%d/32", i)] = geo.Location{}
	}
	nets["203.0.113.0/24"] = geo.Location{Country: "JP"}
	path := filepath.Join(t.TempDir(), "test.mmdb")
	geotest.Write(t, path, nets)
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

func TestWriteReplacesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.mmdb")
	geotest.Write(t, path, map[string]geo.Location{"203.0.113.0/24": {Country: "JP"}})
	geotest.Write(t, path, map[string]geo.Location{"203.0.113.0/24": {Country: "KR"}})
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Lookup(netip.MustParseAddr("203.0.113.1")).Country; got != "KR" {
		t.Errorf("Country = %q after the second Write, want KR", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("Write left %d files behind", len(entries))
	}
}

func countryRecord(cc string) mmdbtype.Map {
	return mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(cc)}}
}

// writeRaw writes records geotest.Write would not: other layouts, local
// networks, an IPv4-only tree.
func writeRaw(t *testing.T, path string, ipVersion int, nets map[string]mmdbtype.DataType) {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "Raw-Test", IPVersion: ipVersion, RecordSize: 24, IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	for s, rec := range nets {
		_, ipnet, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.Insert(ipnet, rec); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
