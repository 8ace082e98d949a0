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
	if r.Regs.GDPR != openrtb.FlagOn || r.Regs.USPrivacy.Value != "1YNN" || r.Regs.COPPA != openrtb.FlagOff ||
		r.Device.DNT != openrtb.FlagOff || r.Device.LMT != openrtb.FlagOff || !strings.HasPrefix(r.User.Consent.Value, "CQBx3oAQ") {
		t.Errorf("regs %+v, consent %+v", r.Regs, r.User.Consent)
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
	if r.Device.DeviceType != 4 || r.Test != 0 || r.Imp[0].BidFloor != 2_400_000 || r.Regs.GDPR != openrtb.FlagAbsent ||
		r.Regs.GPP.Value == "" || r.Regs.GPPSID.Flag != openrtb.FlagOn || r.Source.SChain == nil ||
		r.Source.SChain.Nodes[0].ASI != "mediation.example" || r.User.Consent != (openrtb.Text{}) {
		t.Errorf("app video: %+v %+v", r.Device, r.Regs)
	}
	// A 2.6 field wins over its 2.5 extension, except a privacy
	// signal's: the stricter of the two counts, and two strings that
	// differ are unreadable.
	r, err := openrtb.Decode([]byte(`{"id":"x","imp":[{"id":"1"}],"regs":{"gdpr":0,"us_privacy":"1NNN","ext":{"gdpr":1,"us_privacy":"1YYN"}},
		"user":{"consent":"new","ext":{"consent":"old"}},"source":{"schain":{"complete":0,"ver":"1.0","nodes":[]},"ext":{"schain":{"complete":1}}}}`))
	if err != nil || r.Regs.GDPR != openrtb.FlagOn || !r.Regs.USPrivacy.Unreadable || !r.User.Consent.Unreadable ||
		r.Source.SChain.Complete != 0 {
		t.Errorf("2.6 fields: %v %+v %+v", err, r.Regs, r.User)
	}
	r, err = openrtb.Decode([]byte(`{"id":"x","imp":[{"id":"1"}],"regs":{"gdpr":1,"us_privacy":"1YNN","gpp_sid":[-1],
		"ext":{"gdpr":0,"us_privacy":"1YNN","gpp":"DBABMA~x","gpp_sid":[2]}},"user":{"consent":"same","ext":{"consent":"same"}}}`))
	if err != nil || r.Regs.GDPR != openrtb.FlagOn || r.Regs.USPrivacy != (openrtb.Text{Value: "1YNN"}) || r.Regs.GPP.Value != "DBABMA~x" ||
		r.Regs.GPPSID.Flag != openrtb.FlagOn || r.User.Consent != (openrtb.Text{Value: "same"}) {
		t.Errorf("2.6 and 2.5 together: %v %+v %+v", err, r.Regs, r.User)
	}
}

// Privacy signals in every type an exchange may send: each request
// decodes, and each signal reads as it says, or as unreadable.
func TestDecodePrivacy(t *testing.T) {
	flags := []struct {
		in   string
		want openrtb.Flag
	}{
		{`null`, openrtb.FlagAbsent},
		{`0`, openrtb.FlagOff}, {`false`, openrtb.FlagOff}, {`"0"`, openrtb.FlagOff}, {`"false"`, openrtb.FlagOff}, {`0.0`, openrtb.FlagOff},
		{`1`, openrtb.FlagOn}, {`true`, openrtb.FlagOn}, {`"1"`, openrtb.FlagOn}, {`"true"`, openrtb.FlagOn}, {`1e0`, openrtb.FlagOn},
		{`2`, openrtb.FlagUnreadable}, {`-1`, openrtb.FlagUnreadable}, {`""`, openrtb.FlagUnreadable}, {`"yes"`, openrtb.FlagUnreadable},
		{`"True"`, openrtb.FlagUnreadable}, {`0.5`, openrtb.FlagUnreadable}, {`{}`, openrtb.FlagUnreadable}, {`[1]`, openrtb.FlagUnreadable},
		{`99999999999999999999`, openrtb.FlagUnreadable},
	}
	texts := []struct {
		in   string
		want openrtb.Text
	}{
		{`null`, openrtb.Text{}}, {`""`, openrtb.Text{}}, {`"1YNN"`, openrtb.Text{Value: "1YNN"}},
		{`"1Y\u004eN"`, openrtb.Text{Value: "1YNN"}}, {`1`, openrtb.Text{Unreadable: true}}, {`true`, openrtb.Text{Unreadable: true}},
		{`{"a":"1YYN"}`, openrtb.Text{Unreadable: true}}, {`["1YYN"]`, openrtb.Text{Unreadable: true}},
	}
	sections := []struct {
		in   string
		want openrtb.Flag
	}{
		{`null`, openrtb.FlagAbsent}, {`[]`, openrtb.FlagOff}, {`[ ]`, openrtb.FlagOff}, {`[-1]`, openrtb.FlagOff},
		{`[7]`, openrtb.FlagOn}, {`[2, 6]`, openrtb.FlagOn}, {`["7"]`, openrtb.FlagOn}, {`[-1,8]`, openrtb.FlagOn},
		{`7`, openrtb.FlagUnreadable}, {`"7"`, openrtb.FlagUnreadable}, {`{}`, openrtb.FlagUnreadable}, {`[[7]]`, openrtb.FlagUnreadable},
		{`[7.5]`, openrtb.FlagUnreadable}, {`["x"]`, openrtb.FlagUnreadable}, {`[null]`, openrtb.FlagUnreadable}, {`[{"a":1,"b":2}]`, openrtb.FlagUnreadable},
	}
	decode := func(t *testing.T, regs, device, user string) *openrtb.BidRequest {
		t.Helper()
		body := `{"id":"1","imp":[{"id":"1"}],"regs":{` + regs + `},"device":{` + device + `},"user":{` + user + `}}`
		r, err := openrtb.Decode([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return r
	}
	for _, tc := range flags {
		for _, field := range []string{"coppa", "gdpr", "ext.gdpr", "dnt", "lmt"} {
			var got openrtb.Flag
			switch field {
			case "coppa":
				got = decode(t, `"coppa":`+tc.in, "", "").Regs.COPPA
			case "gdpr":
				got = decode(t, `"gdpr":`+tc.in, "", "").Regs.GDPR
			case "ext.gdpr":
				got = decode(t, `"ext":{"gdpr":`+tc.in+`}`, "", "").Regs.GDPR
			case "dnt":
				got = decode(t, "", `"dnt":`+tc.in, "").Device.DNT
			case "lmt":
				got = decode(t, "", `"lmt":`+tc.in, "").Device.LMT
			}
			if got != tc.want {
				t.Errorf("%s %s: %d, want %d", field, tc.in, got, tc.want)
			}
		}
	}
	for _, tc := range texts {
		for _, field := range []string{"us_privacy", "ext.us_privacy", "gpp", "ext.gpp", "consent", "ext.consent"} {
			var got openrtb.Text
			switch field {
			case "us_privacy":
				got = decode(t, `"us_privacy":`+tc.in, "", "").Regs.USPrivacy
			case "ext.us_privacy":
				got = decode(t, `"ext":{"us_privacy":`+tc.in+`}`, "", "").Regs.USPrivacy
			case "gpp":
				got = decode(t, `"gpp":`+tc.in, "", "").Regs.GPP
			case "ext.gpp":
				got = decode(t, `"ext":{"gpp":`+tc.in+`}`, "", "").Regs.GPP
			case "consent":
				got = decode(t, "", "", `"consent":`+tc.in).User.Consent
			case "ext.consent":
				got = decode(t, "", "", `"ext":{"consent":`+tc.in+`}`).User.Consent
			}
			if got != tc.want {
				t.Errorf("%s %s: %+v, want %+v", field, tc.in, got, tc.want)
			}
		}
	}
	for _, tc := range sections {
		if got := decode(t, `"gpp_sid":`+tc.in, "", "").Regs.GPPSID.Flag; got != tc.want {
			t.Errorf("gpp_sid %s: %d, want %d", tc.in, got, tc.want)
		}
		if got := decode(t, `"ext":{"gpp_sid":`+tc.in+`}`, "", "").Regs.GPPSID.Flag; got != tc.want {
			t.Errorf("ext.gpp_sid %s: %d, want %d", tc.in, got, tc.want)
		}
	}
	// An extension that is not an object: whatever it could carry is
	// unreadable.
	for _, ext := range []string{`"gdpr"`, `[{"gdpr":0}]`, `1`} {
		r := decode(t, `"gdpr":0,"ext":`+ext, "", `"consent":"c","ext":`+ext)
		if g := r.Regs; g.GDPR != openrtb.FlagUnreadable || !g.USPrivacy.Unreadable || !g.GPP.Unreadable ||
			g.GPPSID.Flag != openrtb.FlagUnreadable || !r.User.Consent.Unreadable {
			t.Errorf("ext %s: %+v, consent %+v", ext, g, r.User.Consent)
		}
	}
	if r := decode(t, `"gdpr":0,"ext":null`, "", `"ext":null`); r.Regs.GDPR != openrtb.FlagOff || r.User.Consent != (openrtb.Text{}) {
		t.Errorf("null extensions: %+v %+v", r.Regs, r.User)
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
