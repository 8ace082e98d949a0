package openrtb_test

import (
	"reflect"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/openrtb"
)

func node(asi, sid string, hp openrtb.Int, rid, name, domain openrtb.String) openrtb.SupplyChainNode {
	return openrtb.SupplyChainNode{ASI: asi, SID: sid, HP: &hp, RID: rid, Name: name, Domain: domain}
}

// The examples of supplychainobject.md ("SupplyChain for Non-OpenRTB
// Requests") read as the objects it gives for them.
func TestParseSupplyChainSpecExamples(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want openrtb.SupplyChain
	}{
		{"1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com", openrtb.SupplyChain{Ver: "1.0", Complete: 1,
			Nodes: []openrtb.SupplyChainNode{node("exchange1.com", "1234", 1, "bid-request-1", "publisher", "publisher.com")}}},
		{"1.0,1!exchange1.com,1234,1,,,", openrtb.SupplyChain{Ver: "1.0", Complete: 1,
			Nodes: []openrtb.SupplyChainNode{node("exchange1.com", "1234", 1, "", "", "")}}},
		{"1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com!exchange2.com,abcd,1,bid-request2,intermediary,intermediary.com",
			openrtb.SupplyChain{Ver: "1.0", Complete: 1, Nodes: []openrtb.SupplyChainNode{
				node("exchange1.com", "1234", 1, "bid-request-1", "publisher", "publisher.com"),
				node("exchange2.com", "abcd", 1, "bid-request2", "intermediary", "intermediary.com")}}},
		{"1.0,1!exchange1.com,1234,1,,,!exchange2.com,abcd,1,,,", openrtb.SupplyChain{Ver: "1.0", Complete: 1, Nodes: []openrtb.SupplyChainNode{
			node("exchange1.com", "1234", 1, "", "", ""), node("exchange2.com", "abcd", 1, "", "", "")}}},
		{"1.0,0!exchange2.com,abcd,1,,,", openrtb.SupplyChain{Ver: "1.0", Complete: 0,
			Nodes: []openrtb.SupplyChainNode{node("exchange2.com", "abcd", 1, "", "", "")}}},
		{"1.0,1!exchange1.com,1234%21abcd,1,bid-request-1,publisher%2c%20Inc.,publisher.com", openrtb.SupplyChain{Ver: "1.0", Complete: 1,
			Nodes: []openrtb.SupplyChainNode{node("exchange1.com", "1234!abcd", 1, "bid-request-1", "publisher, Inc.", "publisher.com")}}},
		// Trailing separators left out; the sid of the text's example.
		{"1.0,1!exampleexchange.com,12345,1", openrtb.SupplyChain{Ver: "1.0", Complete: 1,
			Nodes: []openrtb.SupplyChainNode{node("exampleexchange.com", "12345", 1, "", "", "")}}},
		{"1.0,1!exampleexchange.com,123%2CB,1,,,", openrtb.SupplyChain{Ver: "1.0", Complete: 1,
			Nodes: []openrtb.SupplyChainNode{node("exampleexchange.com", "123,B", 1, "", "", "")}}},
		// hp 0, a plus that stays a plus, an ext read past.
		{"1.0,0!a.example,s+1,0,r,,d.example,{\"x\":1,\"y\":2}!b.example,t,1,,,,", openrtb.SupplyChain{Ver: "1.0", Complete: 0,
			Nodes: []openrtb.SupplyChainNode{node("a.example", "s+1", 0, "r", "", "d.example"), node("b.example", "t", 1, "", "", "")}}},
	} {
		got, err := openrtb.ParseSupplyChain(tc.s)
		if err != nil {
			t.Errorf("%s: %v", tc.s, err)
			continue
		}
		if !reflect.DeepEqual(got, &tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.s, got, tc.want)
		}
	}
}

// What is wrong is refused, with EINVALID and a message that says what.
func TestParseSupplyChainRefuses(t *testing.T) {
	long := strings.Repeat("x", openrtb.MaxSupplyChainValue+1)
	for _, tc := range []struct{ s, message string }{
		{"", "ver,complete"},
		{"1.0", "ver,complete"},
		{"1.0!a,b,1", "ver,complete"},
		{"1.0,1,x!a,b,1", "ver,complete"},
		{"2.0,1!a,b,1", "version"},
		{"1,1!a,b,1", "version"},
		{" 1.0,1!a,b,1", "version"},
		{"1.0,2!a,b,1", "complete"},
		{"1.0,!a,b,1", "complete"},
		{"1.0,true!a,b,1", "complete"},
		{"1.0,1", "no node"},
		{"1.0,1!", "node 1: no asi"},
		{"1.0,1!,b,1", "node 1: no asi"},
		{"1.0,1!a", "node 1: no sid"},
		{"1.0,1!a,,1", "node 1: no sid"},
		{"1.0,1!a,b", "node 1: hp"},
		{"1.0,1!a,b,,,,", "node 1: hp"},
		{"1.0,1!a,b,2", "node 1: hp"},
		{"1.0,1!a,b,01", "node 1: hp"},
		{"1.0,1!a,b,1!c,d", "node 2: hp"},
		{"1.0,1!a,b,1!!c,d,1", "node 2: no asi"},
		{"1.0,1!a,b%zz,1", "node 1: sid is not URL-encoded"},
		{"1.0,1!a,b,1,r%", "node 1: rid is not URL-encoded"},
		{"1.0,1!a,b%ff,1", "node 1: sid is not UTF-8"},
		{"1.0,1!a,b,1,,,," + long, "node 1: ext is longer"},
		{"1.0,1!a,b,1,," + long, "node 1: name is longer"},
		{"1.0,1!a,b,1,," + strings.Repeat("%41", openrtb.MaxSupplyChainValue+1), "node 1: name is longer"},
		{"1.0,1!a,b,1,," + strings.Repeat("x", 10_000), "node 1: name is longer"},
		{"1.0,1" + strings.Repeat("!a,b,1", openrtb.MaxSupplyChainNodes+1), "more than 16 nodes"},
		{"1.0,1" + strings.Repeat("!", 100_000), "node 1: no asi"},
	} {
		c, err := openrtb.ParseSupplyChain(tc.s)
		if tsubame.ErrorCode(err) != tsubame.EINVALID || c != nil {
			t.Errorf("%.60q: %+v, %v; want EINVALID", tc.s, c, err)
			continue
		}
		if !strings.Contains(tsubame.ErrorMessage(err), tc.message) {
			t.Errorf("%.60q: %q does not say %q", tc.s, tsubame.ErrorMessage(err), tc.message)
		}
	}
	// The bounds themselves are in.
	s := "1.0,1" + strings.Repeat("!a,b,1,,"+strings.Repeat("%2C", openrtb.MaxSupplyChainValue), openrtb.MaxSupplyChainNodes)
	if c, err := openrtb.ParseSupplyChain(s); err != nil || len(c.Nodes) != openrtb.MaxSupplyChainNodes ||
		c.Nodes[15].Name != openrtb.String(strings.Repeat(",", openrtb.MaxSupplyChainValue)) {
		t.Errorf("at the bounds: %v", err)
	}
}

// AppendSupplyChain writes what ParseSupplyChain reads, in the
// specification's form.
func TestAppendSupplyChain(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com", "1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com"},
		{"1.0,1!exchange1.com,1234,1", "1.0,1!exchange1.com,1234,1,,,"},
		{"1.0,0!exchange1.com,1234,1,,,!exchange2.com,abcd,0,,,", "1.0,0!exchange1.com,1234,1,,,!exchange2.com,abcd,0,,,"},
		{"1.0,1!exchange1.com,1234%21abcd,1,bid-request-1,publisher%2c%20Inc.,publisher.com", "1.0,1!exchange1.com,1234%21abcd,1,bid-request-1,publisher%2C%20Inc.,publisher.com"},
		{"1.0,1!a,s+1&x=y,1,,caf%C3%A9,", "1.0,1!a,s%2B1%26x%3Dy,1,,caf%C3%A9,"},
	} {
		c, err := openrtb.ParseSupplyChain(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := string(openrtb.AppendSupplyChain(nil, c)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
	// A chain built for OpenRTB: no version is the version, no hp empty.
	c := &openrtb.SupplyChain{Complete: 1, Nodes: []openrtb.SupplyChainNode{{ASI: "a.example", SID: "1"}}}
	if got := string(openrtb.AppendSupplyChain([]byte("schain="), c)); got != "schain=1.0,1!a.example,1,,,," {
		t.Errorf("%s", got)
	}
}

// FuzzParseSupplyChain: whatever the string, ParseSupplyChain never
// panics, and what it accepts keeps its bounds and is written back by
// AppendSupplyChain into a string it reads as the same chain.
func FuzzParseSupplyChain(f *testing.F) {
	for _, s := range []string{
		"1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com!exchange2.com,abcd,1,,,",
		"1.0,1!exchange1.com,1234%21abcd,1,bid-request-1,publisher%2c%20Inc.,publisher.com",
		"1.0,0!a,b,0,,,,ext,with,commas",
		"1.0,1!a,b,1!c,d,1!e,f,0",
		"1.0,1!a%,b,1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := openrtb.ParseSupplyChain(s)
		if err != nil {
			if c != nil || tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Fatalf("%+v, %v", c, err)
			}
			return
		}
		if c.Ver != openrtb.SupplyChainVersion || c.Complete < 0 || c.Complete > 1 || len(c.Nodes) == 0 || len(c.Nodes) > openrtb.MaxSupplyChainNodes {
			t.Fatalf("accepted %+v", c)
		}
		for _, n := range c.Nodes {
			if n.ASI == "" || n.SID == "" || n.HP == nil || *n.HP < 0 || *n.HP > 1 || len(n.ASI) > openrtb.MaxSupplyChainValue ||
				len(n.SID) > openrtb.MaxSupplyChainValue || len(n.RID) > openrtb.MaxSupplyChainValue ||
				len(n.Name) > openrtb.MaxSupplyChainValue || len(n.Domain) > openrtb.MaxSupplyChainValue {
				t.Fatalf("accepted node %+v", n)
			}
		}
		again := openrtb.AppendSupplyChain(nil, c)
		c2, err := openrtb.ParseSupplyChain(string(again))
		if err != nil {
			t.Fatalf("%s written as %s: %v", s, again, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("%s written as %s, read as %+v, not %+v", s, again, c2, c)
		}
	})
}
