package geotest_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"tsubame/internal/geo"
	"tsubame/internal/geo/geotest"
)

// fatalTB stops Write at its first Fatal, for the test to read the message.
type fatalTB struct {
	testing.TB
}

type fatal string

func (fatalTB) Helper()                           {}
func (fatalTB) Fatal(args ...any)                 { panic(fatal(fmt.Sprint(args...))) }
func (fatalTB) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }

func writeErr(t *testing.T, nets map[string]geo.Location) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = string(r.(fatal))
		}
	}()
	geotest.Write(fatalTB{t}, filepath.Join(t.TempDir(), "x.mmdb"), nets)
	return ""
}

func TestWriteRefuses(t *testing.T) {
	for _, tc := range []struct {
		nets map[string]geo.Location
		want string
	}{
		{map[string]geo.Location{"127.0.0.0/8": {Country: "JP"}}, "is never looked up"},
		{map[string]geo.Location{"10.1.0.0/16": {Country: "JP"}}, "is never looked up"},
		{map[string]geo.Location{"fe80::/64": {Country: "JP"}}, "is never looked up"},
		{map[string]geo.Location{"203.0.113.0/33": {Country: "JP"}}, "203.0.113.0/33"},
		{map[string]geo.Location{"203.0.113.0/24": {Country: "JP", Region: "13"}}, `region "13" is not country "JP"`},
		{map[string]geo.Location{"203.0.113.0/24": {Country: "JP", Region: "JP-"}}, `region "JP-"`},
		{map[string]geo.Location{"203.0.113.0/24": {Region: "JP-13"}}, `region "JP-13"`},
		{map[string]geo.Location{"203.0.113.0/24": {Country: "JP"}, "203.0.113.9/24": {Country: "KR"}}, "given twice"},
	} {
		if msg := writeErr(t, tc.nets); !strings.Contains(msg, tc.want) {
			t.Errorf("Write(%v) failed with %q, want %q", tc.nets, msg, tc.want)
		}
	}
}

// A catch-all prefix places every public address; the local ones stay
// unplaced, and narrower prefixes win over it.
func TestWriteCatchAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "all.mmdb")
	geotest.Write(t, path, map[string]geo.Location{
		"0.0.0.0/0":      {Country: "JP", Region: "JP-13"},
		"::/0":           {Country: "JP", Region: "JP-13"},
		"203.0.113.0/24": {Country: "KR"},
	})
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for addr, want := range map[string]string{"8.8.8.8": "JP", "2606:4700::1": "JP", "203.0.113.1": "KR", "127.0.0.1": "", "10.0.0.1": ""} {
		if got := db.Lookup(netip.MustParseAddr(addr)).Country; got != want {
			t.Errorf("Lookup(%s).Country = %q, want %q", addr, got, want)
		}
	}
}
