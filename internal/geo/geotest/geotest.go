// Package geotest writes MaxMind DB files for tests: real databases in the
// GeoIP2 Country/City record layout, so code under test opens them the way
// it opens an operator's GeoLite2 file.
package geotest

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"tsubame/internal/geo"
)

// DatabaseType is the database_type of the files Write makes.
const DatabaseType = "Tsubame-Test-City"

// BuildTime is the build time written in the files' metadata.
var BuildTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Write writes an IPv6 database (IPv4 networks included) to path that places
// the addresses of each prefix (a CIDR such as "203.0.113.0/24" or
// "2001:db8::/32") at its Location. Region, when set, must be the Country
// followed by "-" and the subdivision ("JP-13"). A zero Location writes a
// record without a country (as real databases have for some networks).
//
// Use documentation or public prefixes (192.0.2.0/24, 198.51.100.0/24,
// 203.0.113.0/24, 2001:db8::/32): geo.DB never looks up loopback, private,
// link-local or multicast addresses, so Write refuses a prefix of only such
// addresses rather than let a test wonder why they are not found. A more specific prefix wins over one
// that contains it, whatever the map's order. The file is replaced by a
// rename, so a server reading path never sees half a database.
func Write(tb testing.TB, path string, nets map[string]geo.Location) {
	tb.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            DatabaseType,
		Description:             map[string]string{"en": "Test database"},
		Languages:               []string{"en"},
		IPVersion:               6,
		RecordSize:              24,
		IncludeReservedNetworks: true, // the documentation prefixes are reserved
		BuildEpoch:              BuildTime.Unix(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	prefixes := make([]netip.Prefix, 0, len(nets))
	locs := make(map[netip.Prefix]geo.Location, len(nets))
	for s, loc := range nets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			tb.Fatalf("geotest: %v", err)
		}
		p = p.Masked()
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if local(p) {
			tb.Fatalf("geotest: %s is never looked up (loopback, private, link-local, multicast or unspecified); use a documentation prefix such as 203.0.113.0/24", s)
		}
		if loc.Region != "" && (loc.Country == "" || !strings.HasPrefix(loc.Region, loc.Country+"-") || len(loc.Region) == len(loc.Country)+1) {
			tb.Fatalf("geotest: %s: region %q is not country %q, \"-\" and a subdivision", s, loc.Region, loc.Country)
		}
		if _, dup := locs[p]; dup {
			tb.Fatalf("geotest: prefix %s given twice", p)
		}
		prefixes = append(prefixes, p)
		locs[p] = loc
	}
	// Wider prefixes first, so the narrower ones inserted later replace
	// their part of them.
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return a.Addr().Compare(b.Addr())
	})
	for _, p := range prefixes {
		ipnet := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := tree.Insert(ipnet, record(locs[p])); err != nil {
			tb.Fatalf("geotest: insert %s: %v", p, err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".geotest-*.mmdb")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tree.WriteTo(tmp); err != nil {
		tmp.Close()
		tb.Fatalf("geotest: write %s: %v", path, err)
	}
	if err := tmp.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		tb.Fatal(err)
	}
}

// localNets hold the addresses geo.DB.Lookup answers without looking up.
var localNets = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("::/128"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"), netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("ff00::/8"),
}

// local reports whether every address of p is one geo.DB never looks up.
func local(p netip.Prefix) bool {
	for _, l := range localNets {
		if l.Bits() <= p.Bits() && l.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// record is a GeoIP2 City record: the fields geo reads and, around them, a
// few it must skip.
func record(loc geo.Location) mmdbtype.Map {
	if loc.Country == "" {
		return mmdbtype.Map{"continent": mmdbtype.Map{"code": mmdbtype.String("EU")}}
	}
	country := mmdbtype.Map{
		"iso_code": mmdbtype.String(loc.Country),
		"names":    mmdbtype.Map{"en": mmdbtype.String(loc.Country)},
	}
	m := mmdbtype.Map{
		"country":            country,
		"registered_country": country,
		"location":           mmdbtype.Map{"accuracy_radius": mmdbtype.Uint16(100), "time_zone": mmdbtype.String("UTC")},
	}
	if loc.Region != "" {
		m["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{
			"iso_code": mmdbtype.String(strings.TrimPrefix(loc.Region, loc.Country+"-")),
			"names":    mmdbtype.Map{"en": mmdbtype.String(loc.Region)},
		}}
	}
	return m
}
