package openrtb_test

import (
	"os"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/openrtb"
)

func decodeFile(t *testing.T, name string) *openrtb.BidRequest {
	t.Helper()
	body, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := openrtb.Decode(body)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// The specification's examples decode with the fields the bidder reads;
// the others are skipped.
func TestDecodeSpecExamples(t *testing.T) {
	r := decodeFile(t, "example-6.2.1-banner.json")
	if r.ID != "80ce30c53c16e6ede735f123ef6e32361bfc7b22" || r.AT != 1 || len(r.Cur) != 1 || r.Cur[0] != "USD" ||
		len(r.Imp) != 1 || r.Imp[0].ID != "1" || r.Imp[0].BidFloor != 30_000 || r.Imp[0].Banner == nil ||
		r.Imp[0].Banner.W != 300 || r.Imp[0].Banner.H != 250 || r.Site == nil || r.Site.Domain != "www.foobar.com" ||
		r.Site.Publisher == nil || r.Site.Publisher.ID != "8953" || r.User == nil || r.User.BuyerUID != "" {
		t.Errorf("6.2.1: %+v", r)
	}
	r = decodeFile(t, "example-6.2.2-expandable.json")
	if r.AT != 2 || r.User.BuyerUID != "545678765467876567898765678987654" || r.Imp[0].Banner.W != 300 {
		t.Errorf("6.2.2: %+v", r)
	}
	r = decodeFile(t, "example-6.2.3-mobile.json")
	if r.App == nil || r.App.Bundle != "12345" || r.Site != nil || r.Device == nil || r.Device.IFA != "AA000DFE74168477C70D291f574D344790E0BB11" ||
		r.Device.DeviceType != 1 || !strings.HasPrefix(r.Device.UA, "Mozilla/5.0 (iPhone") || len(r.BCat) != 5 || len(r.BAdv) != 3 || r.BAdv[0] != "apple.com" ||
		r.Imp[0].BidFloor != 500_000 || r.Imp[0].Banner.W != 728 || r.Imp[0].TagID != "agltb3B1Yi1pbmNyDQsSBFNpdGUY7fD0FAw" {
		t.Errorf("6.2.3: %+v", r)
	}
	r = decodeFile(t, "example-6.2.4-video.json")
	v := r.Imp[0].Video
	if r.TMax != 120 || v == nil || v.W != 640 || v.H != 480 || v.MinDuration != 5 || v.MaxDuration != 30 || len(v.Protocols) != 2 ||
		v.Protocols[1] != 3 || len(v.MIMEs) != 3 || v.MIMEs[1] != "video/mp4" {
		t.Errorf("6.2.4: %+v", v)
	}
	r = decodeFile(t, "example-6.2.5-pmp.json")
	p := r.Imp[0].Pmp
	if p == nil || p.PrivateAuction != 1 || len(p.Deals) != 2 || p.Deals[0].ID != "AB-Agency1-0001" || p.Deals[0].BidFloor != 2_500_000 ||
		p.Deals[0].WSeat[0] != "Agency1" || p.Deals[1].WSeat[0] != "Agency2" || p.Deals[1].BidFloor != 2_000_000 {
		t.Errorf("6.2.5: %+v", p)
	}
}

// Exchanges' requests: numbers as strings, the 2.5 places of gdpr,
// us_privacy, consent and schain, fields the specification does not
// define.
func TestDecodeDeviations(t *testing.T) {
	r := decodeFile(t, "real-1-web.json")
	b := r.Imp[0].Banner
	if r.TMax != 180 || r.Imp[0].BidFloor != 850_000 || len(b.Format) != 3 || b.Format[2].W != 320 || b.Format[2].H != 50 ||
		r.Imp[1].BidFloor != 420_000 || r.Imp[1].Pmp.Deals[0].BidFloor != 3_500_000 {
		t.Errorf("numbers as strings: %+v %+v", r.Imp[0], b)
	}
	if r.Regs.GDPR == nil || *r.Regs.GDPR != 1 || r.Regs.USPrivacy != "1YNN" || !strings.HasPrefix(r.User.Consent, "CQBx3oAQ") {
		t.Errorf("regs %+v, consent %q", r.Regs, r.User.Consent)
	}
	sc := r.Source.SChain
	if sc == nil || sc.Complete != 1 || len(sc.Nodes) != 2 || sc.Nodes[1].ASI != "exchange.example" || sc.Nodes[1].SID != "ssp-44" ||
		sc.Nodes[0].HP == nil || *sc.Nodes[0].HP != 1 {
		t.Errorf("schain %+v", sc)
	}
	if g := r.Device.Geo; g == nil || g.Country != "JPN" || g.Region != "13" || r.Device.DeviceType != 4 {
		t.Errorf("geo %+v", r.Device.Geo)
	}
	r = decodeFile(t, "real-2-app-video.json")
	if r.Device.DeviceType != 4 || r.Test != 0 || r.Imp[0].BidFloor != 2_400_000 || r.Regs.GDPR != nil || r.Regs.GPP == "" ||
		r.Source.SChain == nil || r.Source.SChain.Nodes[0].ASI != "mediation.example" || r.User.Consent != "" {
		t.Errorf("app video: %+v %+v", r.Device, r.Regs)
	}
	// A 2.6 field wins over its 2.5 extension.
	r, err := openrtb.Decode([]byte(`{"id":"x","imp":[{"id":"1"}],"regs":{"gdpr":0,"us_privacy":"1NNN","ext":{"gdpr":1,"us_privacy":"1YYN"}},
		"user":{"consent":"new","ext":{"consent":"old"}},"source":{"schain":{"complete":0,"ver":"1.0","nodes":[]},"ext":{"schain":{"complete":1}}}}`))
	if err != nil || *r.Regs.GDPR != 0 || r.Regs.USPrivacy != "1NNN" || r.User.Consent != "new" || r.Source.SChain.Complete != 0 {
		t.Errorf("2.6 fields: %v %+v %+v", err, r.Regs, r.User)
	}
}

// What makes a request unusable is refused; what the specification says
// to tolerate is not.
func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"empty", ``},
		{"not JSON", `id=1&imp=2`},
		{"array", `[{"id":"1","imp":[{"id":"1"}]}]`},
		{"truncated", `{"id":"1","imp":[{"id":"1"}`},
		{"trailing garbage", `{"id":"1","imp":[{"id":"1"}]} x`},
		{"no id", `{"imp":[{"id":"1"}]}`},
		{"empty id", `{"id":"","imp":[{"id":"1"}]}`},
		{"no imp", `{"id":"1"}`},
		{"empty imp", `{"id":"1","imp":[]}`},
		{"imp without id", `{"id":"1","imp":[{"banner":{"w":1,"h":1}}]}`},
		{"duplicate imp ids", `{"id":"1","imp":[{"id":"a"},{"id":"b"},{"id":"a"}]}`},
		{"too many imps", `{"id":"1","imp":[` + strings.Repeat(`{"id":"i"},`, openrtb.MaxImps) + `{"id":"last"}]}`},
		{"long id", `{"id":"` + strings.Repeat("x", openrtb.MaxIDLength+1) + `","imp":[{"id":"1"}]}`},
		{"negative floor", `{"id":"1","imp":[{"id":"1","bidfloor":-0.5}]}`},
		{"floor not a number", `{"id":"1","imp":[{"id":"1","bidfloor":"cheap"}]}`},
		{"id not a string", `{"id":7,"imp":[{"id":"1"}]}`},
	} {
		if r, err := openrtb.Decode([]byte(tc.body)); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%s: %+v, %v; want EINVALID", tc.name, r, err)
		}
	}
	for _, tc := range []struct{ name, body string }{
		{"unknown fields", `{"id":"1","imp":[{"id":"1","future":{"x":[1,2]}}],"newthing":true}`},
		{"unknown enums", `{"id":"1","at":700,"imp":[{"id":"1","banner":{"w":1,"h":1,"pos":99,"api":[1000]}}]}`},
		{"nulls", `{"id":"1","imp":[{"id":"1","bidfloor":null,"banner":null}],"site":null,"tmax":null}`},
		{"bad integer reads 0", `{"id":"1","tmax":"soon","imp":[{"id":"1","banner":{"w":"","h":1.5}}]}`},
		{"spaces around", " \n\t{\"id\":\"1\",\"imp\":[{\"id\":\"1\"}]}\n"},
	} {
		if _, err := openrtb.Decode([]byte(tc.body)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestPriceAndInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want openrtb.Price
		ok   bool
	}{
		{`0`, 0, true}, {`0.03`, 30_000, true}, {`"2.5"`, 2_500_000, true}, {`1`, 1_000_000, true},
		{`1.0000001`, 1_000_001, true}, // past the micro-unit: up
		{`0.0000001`, 1, true},         // the same, from zero
		{`1.2e1`, 12_000_000, true},    // exponent
		{`125E-2`, 1_250_000, true},    // negative exponent
		{`1.5e-7`, 1, true},            // far below a micro-unit: one
		{`9223372036854.775807`, 9223372036854775807, true},
		{`9223372036854.775808`, 0, false}, // past int64
		{`null`, 0, true}, {`""`, 0, true},
		{`-1`, 0, false}, {`-0`, 0, true}, {`"1,5"`, 0, false}, {`1.`, 0, false}, {`.5`, 0, false}, {`0x10`, 0, false}, {`1e`, 0, false},
		{`true`, 0, false},
	} {
		var p openrtb.Price
		err := p.UnmarshalJSON([]byte(tc.in))
		if (err == nil) != tc.ok || err == nil && p != tc.want {
			t.Errorf("Price %s = %d, %v; want %d (ok %v)", tc.in, p, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want openrtb.Int
	}{
		{`300`, 300}, {`"300"`, 300}, {`-540`, -540}, {`1.0`, 1}, {`3e2`, 300}, {`1.5`, 0}, {`""`, 0}, {`null`, 0},
		{`"x"`, 0}, {`true`, 0}, {`99999999999999999999`, 0},
	} {
		var n openrtb.Int
		if err := n.UnmarshalJSON([]byte(tc.in)); err != nil || n != tc.want {
			t.Errorf("Int %s = %d, %v; want %d", tc.in, n, err, tc.want)
		}
	}
}
