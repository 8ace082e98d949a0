package openrtb_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"tsubame/internal/openrtb"
)

func intp(n openrtb.Int) *openrtb.Int { return &n }

// fullRequest sets every field of every object, each to a value that
// reads back as itself (no unreadable signal), with strings that need
// escaping and exts that need compacting.
func fullRequest() *openrtb.BidRequest {
	return &openrtb.BidRequest{
		ID: "req-1 <&> \"quoted\" \u2028",
		Imp: []openrtb.Imp{
			{
				ID:          "1",
				Banner:      &openrtb.Banner{Format: []openrtb.Format{{W: 300, H: 250}, {W: 320}}, W: 300, H: 250},
				Pmp:         &openrtb.Pmp{PrivateAuction: 1, Deals: []openrtb.Deal{{ID: "d1", BidFloor: 2_500_001, BidFloorCur: "JPY", WSeat: []string{"s1", "s<2>"}}, {ID: "d2"}}},
				Instl:       1,
				TagID:       "top/300x250",
				BidFloor:    850_000,
				BidFloorCur: "USD",
				Secure:      openrtb.FlagOn,
				Exp:         300,
			},
			{
				ID:       "2",
				Video:    &openrtb.Video{MIMEs: []string{"video/mp4", "application/javascript"}, MinDuration: 5, MaxDuration: 30, Protocols: []openrtb.Int{2, 3, 7}, W: 640, H: 480, Plcmt: 1, Linearity: 1},
				BidFloor: 12_345_678_901,
				Secure:   openrtb.FlagOff,
			},
		},
		Site: &openrtb.Site{ID: "site-1", Name: "Daily <News>", Domain: "news.example", Page: "https://news.example/a?b=c&d=e",
			Ref: "https://search.example/?q=x", Publisher: &openrtb.Publisher{ID: "pub-1", Name: "News Group", Domain: "news.example"}},
		App: &openrtb.App{ID: "app-1", Name: "Game", Bundle: "com.example.game", Domain: "game.example",
			StoreURL: "https://play.example/store/apps/details?id=com.example.game", Publisher: &openrtb.Publisher{ID: "pub-2", Name: "Games", Domain: "games.example"}},
		Device: &openrtb.Device{UA: "Mozilla/5.0 (iPhone)", Geo: &openrtb.Geo{Country: "JPN", Region: "13"}, DNT: openrtb.FlagOff, LMT: openrtb.FlagOn,
			IP: "203.0.113.0", IPv6: "2001:db8::", DeviceType: 4, OS: "iOS", Language: "ja", IFA: "AA000DFE-74168477"},
		User:  &openrtb.User{ID: "u-1", BuyerUID: "buyer-1", Consent: openrtb.Text{Value: "CQBx3oAQ.x_y"}, Ext: json.RawMessage(` { "eids" : [ { "source" : "id5 <x>" , "n" : 1.50 } ] } `)},
		Test:  1,
		AT:    2,
		TMax:  120,
		WSeat: []string{"w1"},
		BSeat: []string{"b1", "b2"},
		Cur:   []string{"USD", "JPY"},
		BCat:  []string{"IAB25", "IAB26"},
		BAdv:  []string{"rival.example"},
		BApp:  []string{"com.rival.app"},
		Source: &openrtb.Source{FD: intp(1), TID: openrtb.Text{Value: "5f1d0b64"}, SChain: &openrtb.SupplyChain{Complete: 1, Ver: "1.0", Nodes: []openrtb.SupplyChainNode{
			{ASI: "ssp.example", SID: "pub-1", RID: "req-0", Name: "Pub, Inc.", Domain: "pub.example", HP: intp(1)},
			{ASI: "exchange.example", SID: "44", HP: intp(0)},
		}}, Ext: json.RawMessage("{\"omidpn\":\"a\u2029b\",\n\"x\":[1,\t2]}")},
		Regs: &openrtb.Regs{COPPA: openrtb.FlagOff, GDPR: openrtb.FlagOn, USPrivacy: openrtb.Text{Value: "1YNN"}, GPP: openrtb.Text{Value: "DBABMA~CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA"},
			GPPSID: openrtb.NewSections(2, 6), Ext: json.RawMessage(`{"dsa":{"dsarequired":1}}`)},
	}
}

// requests are what the encoder is checked on: the full request, objects
// with every field empty, and the specification's and exchanges' requests
// as Decode reads them.
func requests(t testing.TB) map[string]*openrtb.BidRequest {
	out := map[string]*openrtb.BidRequest{
		"full":            fullRequest(),
		"zero":            {},
		"empty imps":      {ID: "x", Imp: []openrtb.Imp{}},
		"empty objects":   {ID: "x", Imp: []openrtb.Imp{{Banner: &openrtb.Banner{Format: []openrtb.Format{{}}}, Video: &openrtb.Video{}, Pmp: &openrtb.Pmp{}}}, Site: &openrtb.Site{Publisher: &openrtb.Publisher{}}, App: &openrtb.App{}, Device: &openrtb.Device{Geo: &openrtb.Geo{}}, User: &openrtb.User{}, Source: &openrtb.Source{SChain: &openrtb.SupplyChain{}}, Regs: &openrtb.Regs{}},
		"empty lists":     {ID: "x", Imp: []openrtb.Imp{{Banner: &openrtb.Banner{Format: []openrtb.Format{}}, Video: &openrtb.Video{Protocols: []openrtb.Int{}}}}, Cur: []string{}, Source: &openrtb.Source{SChain: &openrtb.SupplyChain{Nodes: []openrtb.SupplyChainNode{}}}},
		"unreadable":      {ID: "x", Imp: []openrtb.Imp{{ID: "1", Secure: openrtb.FlagUnreadable}}, Device: &openrtb.Device{DNT: openrtb.FlagUnreadable, LMT: 9}, User: &openrtb.User{Consent: openrtb.Text{Unreadable: true}}, Source: &openrtb.Source{TID: openrtb.Text{Unreadable: true}}, Regs: &openrtb.Regs{COPPA: openrtb.FlagUnreadable, USPrivacy: openrtb.Text{Unreadable: true}, GPPSID: openrtb.Sections{Flag: openrtb.FlagUnreadable}}},
		"sections off":    {ID: "x", Regs: &openrtb.Regs{GPPSID: openrtb.NewSections()}},
		"sections none":   {ID: "x", Regs: &openrtb.Regs{GPPSID: openrtb.NewSections(-1)}},
		"escapes":         {ID: "\x00\x1f\x7f\xff\xfe é \u2028\u2029 \\ \"", Imp: []openrtb.Imp{{ID: "</script>", TagID: "\t"}}, Site: &openrtb.Site{Ref: "\xc3"}, Regs: &openrtb.Regs{Ext: json.RawMessage(`{"a":"\u003c<\\\"&\u2028"}`)}},
		"fd 0":            {ID: "x", Imp: []openrtb.Imp{{ID: "1"}}, Source: &openrtb.Source{FD: intp(0)}}, // sent: 0 is the exchange
		"negative amount": {ID: "x", Imp: []openrtb.Imp{{ID: "1", BidFloor: -1_500_000}}},
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := openrtb.Decode(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[filepath.Base(name)] = r
	}
	return out
}

// AppendRequest writes what encoding/json writes, byte for byte: every
// field in order, the empty ones left out as the tags say, strings and
// exts escaped alike.
func TestAppendRequest(t *testing.T) {
	for name, r := range requests(t) {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := openrtb.AppendRequest(nil, r); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		// Appended, not written over.
		if got := openrtb.AppendRequest([]byte("prefix"), r); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("%s: not appended: %s", name, got)
		}
	}
}

// What AppendRequest writes, Decode reads back as it was: every field of
// the full request, and the requests of testdata as Decode read them.
func TestAppendRequestRoundTrip(t *testing.T) {
	for name, r := range requests(t) {
		switch {
		case r.ID == "" || len(r.Imp) == 0 || r.Imp[0].ID == "" || name == "negative amount":
			continue // what Decode refuses
		case name == "unreadable":
			continue // written as its strictest reading, which reads as that
		case name == "escapes":
			continue // invalid UTF-8 is written as U+FFFD, as Marshal writes it
		}
		body := openrtb.AppendRequest(nil, r)
		got, err := openrtb.Decode(body)
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, body)
			continue
		}
		if want := compacted(t, r); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	// Every field of the full request, one by one, so that a field the
	// encoder forgot shows by name.
	r, err := openrtb.Decode(openrtb.AppendRequest(nil, fullRequest()))
	if err != nil {
		t.Fatal(err)
	}
	want := compacted(t, fullRequest())
	checkFields(t, "request", reflect.ValueOf(r).Elem(), reflect.ValueOf(want).Elem(), true)
}

// compacted is r with its exts as Marshal writes a json.RawMessage
// (compacted, '<', '>', '&', U+2028 and U+2029 escaped), which is how they
// come back.
func compacted(t *testing.T, r *openrtb.BidRequest) *openrtb.BidRequest {
	t.Helper()
	compact := func(raw json.RawMessage) json.RawMessage {
		if len(raw) == 0 {
			return raw
		}
		var buf, out bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			t.Fatal(err)
		}
		json.HTMLEscape(&out, buf.Bytes())
		return out.Bytes()
	}
	c := *r
	if r.User != nil {
		u := *r.User
		u.Ext = compact(u.Ext)
		c.User = &u
	}
	if r.Source != nil {
		s := *r.Source
		s.Ext = compact(s.Ext)
		c.Source = &s
	}
	if r.Regs != nil {
		g := *r.Regs
		g.Ext = compact(g.Ext)
		c.Regs = &g
	}
	return &c
}

// checkFields compares got and want field by field, naming those that
// differ; set says that want must set every field (but the first
// elements' of lists, flags and the signals' Unreadable, which are set
// only where needed).
func checkFields(t *testing.T, path string, got, want reflect.Value, set bool) {
	t.Helper()
	switch want.Kind() {
	case reflect.Pointer:
		if got.IsNil() != want.IsNil() {
			t.Errorf("%s: got %v, want %v", path, got, want)
			return
		}
		if !want.IsNil() {
			checkFields(t, path, got.Elem(), want.Elem(), set)
		}
	case reflect.Struct:
		for i := range want.NumField() {
			checkFields(t, path+"."+want.Type().Field(i).Name, got.Field(i), want.Field(i), set)
		}
	case reflect.Slice:
		if got.Len() != want.Len() {
			t.Errorf("%s: %d elements, want %d", path, got.Len(), want.Len())
			return
		}
		for i := range want.Len() {
			checkFields(t, fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i), set && i == 0)
		}
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Errorf("%s: got %v, want %v", path, got, want)
		}
		if set && want.IsZero() && want.Kind() != reflect.Bool {
			t.Errorf("%s: the full request leaves it empty, and so unchecked", path)
		}
	}
}

// Privacy signals are written as the specification writes them: a flag as
// 0 or 1, an unreadable one as 1; a text as its string, an unreadable one
// not at all; sections as their ids, unreadable ones not at all.
func TestAppendRequestPrivacy(t *testing.T) {
	for _, tc := range []struct {
		name string
		regs openrtb.Regs
		want string
	}{
		{"absent", openrtb.Regs{}, `{}`},
		{"off", openrtb.Regs{COPPA: openrtb.FlagOff, GDPR: openrtb.FlagOff}, `{"coppa":0,"gdpr":0}`},
		{"on", openrtb.Regs{COPPA: openrtb.FlagOn, GDPR: openrtb.FlagOn}, `{"coppa":1,"gdpr":1}`},
		{"unreadable flags", openrtb.Regs{COPPA: openrtb.FlagUnreadable, GDPR: openrtb.FlagUnreadable}, `{"coppa":1,"gdpr":1}`},
		{"texts", openrtb.Regs{USPrivacy: openrtb.Text{Value: "1YNN"}, GPP: openrtb.Text{Value: "DBA~x"}}, `{"us_privacy":"1YNN","gpp":"DBA~x"}`},
		{"unreadable texts", openrtb.Regs{USPrivacy: openrtb.Text{Unreadable: true}, GPP: openrtb.Text{Unreadable: true}}, `{}`},
		{"sections", openrtb.Regs{GPPSID: openrtb.NewSections(2, 6)}, `{"gpp_sid":[2,6]}`},
		{"no section", openrtb.Regs{GPPSID: openrtb.NewSections()}, `{"gpp_sid":[]}`},
		{"none applies", openrtb.Regs{GPPSID: openrtb.NewSections(-1)}, `{"gpp_sid":[-1]}`},
		{"unreadable sections", openrtb.Regs{GPPSID: openrtb.Sections{Flag: openrtb.FlagUnreadable}}, `{}`},
		{"too many sections", openrtb.Regs{GPPSID: openrtb.NewSections(make([]openrtb.Int, openrtb.MaxSections+1)...)}, `{}`},
	} {
		r := &openrtb.BidRequest{ID: "x", Imp: []openrtb.Imp{{ID: "1"}}, Regs: &tc.regs}
		want := `{"id":"x","imp":[{"id":"1"}],"regs":` + tc.want + `}`
		if got := openrtb.AppendRequest(nil, r); string(got) != want {
			t.Errorf("%s: %s, want %s", tc.name, got, want)
		}
	}
}

// An ext that is not JSON, on which Marshal fails, is left out.
func TestAppendRequestInvalidExt(t *testing.T) {
	r := &openrtb.BidRequest{ID: "x", Imp: []openrtb.Imp{{ID: "1"}}, User: &openrtb.User{BuyerUID: "b", Ext: json.RawMessage(`{"a":`)},
		Regs: &openrtb.Regs{Ext: json.RawMessage(`x`)}, Source: &openrtb.Source{Ext: json.RawMessage(`{} {}`)}}
	want := `{"id":"x","imp":[{"id":"1"}],"user":{"buyeruid":"b"},"source":{},"regs":{}}`
	if got := openrtb.AppendRequest(nil, r); string(got) != want {
		t.Errorf("%s, want %s", got, want)
	}
	if _, err := json.Marshal(r); err == nil {
		t.Error("Marshal wrote an invalid ext")
	}
}

// FuzzAppendRequest: whatever request Decode reads, AppendRequest writes
// it as Marshal does, and Decode reads what it wrote. Seeded with
// testdata's requests.
func FuzzAppendRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"1","imp":[{"id":"1","secure":"x"}],"regs":{"gpp_sid":[-1,"7"],"ext":{"us_privacy":1,"a":"<\u2028>"}},"user":{"ext":" [ 1 , 2 ] "}}`))
	f.Add([]byte(`{"id":"\u00e9\ud800","imp":[{"id":"1"}],"site":{"ref":5,"name":"\u003c"},"source":{"fd":"1","schain":{"complete":1,"ver":2,"nodes":[{"asi":"a","sid":"b","rid":{}}]}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := openrtb.Decode(body)
		if err != nil {
			return
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got := openrtb.AppendRequest(nil, r)
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		if !json.Valid(got) {
			t.Fatalf("invalid JSON: %s", got)
		}
	})
}

// FuzzAppendRequestStrings: strings of any bytes are escaped as Marshal
// escapes them, in every kind of string field.
func FuzzAppendRequestStrings(f *testing.F) {
	f.Add("req-1", "<a href=\"x\">é</a>", "1YNN", int64(1_250_000), int64(300))
	f.Add("\u2028", "\xff\xfe", "", int64(-5), int64(0))
	f.Fuzz(func(t *testing.T, id, s, text string, price, n int64) {
		r := &openrtb.BidRequest{ID: id, Imp: []openrtb.Imp{{ID: s, TagID: text, BidFloor: openrtb.Price(price), Instl: openrtb.Int(n),
			Banner: &openrtb.Banner{W: openrtb.Int(n)}, Pmp: &openrtb.Pmp{Deals: []openrtb.Deal{{ID: s, BidFloor: openrtb.Price(n), WSeat: []string{s, text}}}}}},
			Site:   &openrtb.Site{Name: openrtb.String(s), Ref: openrtb.String(text)},
			User:   &openrtb.User{ID: openrtb.String(id), Consent: openrtb.Text{Value: s}},
			Source: &openrtb.Source{FD: intp(openrtb.Int(n)), SChain: &openrtb.SupplyChain{Ver: openrtb.String(text), Nodes: []openrtb.SupplyChainNode{{ASI: s, SID: id, RID: openrtb.String(text)}}}},
			Regs:   &openrtb.Regs{USPrivacy: openrtb.Text{Value: text}, GPPSID: openrtb.NewSections(openrtb.Int(n), openrtb.Int(price)), GDPR: openrtb.Flag(n & 7)},
			BCat:   []string{s, id, text}}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := openrtb.AppendRequest(nil, r); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	})
}

var sink []byte

// BenchmarkAppendRequest encodes the full request and an exchange's
// request into a buffer that has room: no allocation; encoding/json's
// Marshal, for reference.
func BenchmarkAppendRequest(b *testing.B) {
	body, err := os.ReadFile("testdata/real-1-web.json")
	if err != nil {
		b.Fatal(err)
	}
	web, err := openrtb.Decode(body)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		r    *openrtb.BidRequest
	}{{"full", fullRequest()}, {"real-1-web", web}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 16<<10)
			b.SetBytes(int64(len(openrtb.AppendRequest(buf[:0], bc.r))))
			for b.Loop() {
				sink = openrtb.AppendRequest(buf[:0], bc.r)
			}
		})
		b.Run(bc.name+"/encoding-json", func(b *testing.B) { // for reference
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = json.Marshal(bc.r)
			}
		})
	}
}

// AppendRequest25 writes what AppendRequest writes, and the fields 2.6
// took out of the extensions where 2.5 readers find them: regs.ext's
// privacy signals, user.ext.consent and source.ext.schain, equal to
// their 2.6 places; an object's own ext is kept instead; nothing is
// written for an object without such fields.
func TestAppendRequest25(t *testing.T) {
	r := fullRequest()
	r.User.Ext, r.Source.Ext, r.Regs.Ext = nil, nil, nil
	var got struct {
		User struct {
			Consent string
			Ext     struct{ Consent string }
		}
		Source struct {
			SChain json.RawMessage
			Ext    struct{ SChain json.RawMessage }
		}
		Regs struct {
			COPPA *int
			Ext   map[string]any
		}
	}
	out := openrtb.AppendRequest25(nil, r)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.User.Ext.Consent != "CQBx3oAQ.x_y" || got.User.Consent != got.User.Ext.Consent {
		t.Errorf("user: %+v", got.User)
	}
	if len(got.Source.SChain) == 0 || string(got.Source.Ext.SChain) != string(got.Source.SChain) {
		t.Errorf("source: %s and ext %s", got.Source.SChain, got.Source.Ext.SChain)
	}
	want := map[string]any{"gdpr": 1.0, "us_privacy": "1YNN", "gpp": r.Regs.GPP.Value, "gpp_sid": []any{2.0, 6.0}}
	if fmt.Sprint(got.Regs.Ext) != fmt.Sprint(want) || got.Regs.COPPA == nil {
		t.Errorf("regs.ext %v, want %v (coppa %v)", got.Regs.Ext, want, got.Regs.COPPA)
	}
	// Decoded, it is the request AppendRequest writes.
	a, err := openrtb.Decode(openrtb.AppendRequest(nil, r))
	if err != nil {
		t.Fatal(err)
	}
	b, err := openrtb.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	a.User.Ext, b.User.Ext, a.Source.Ext, b.Source.Ext, a.Regs.Ext, b.Regs.Ext = nil, nil, nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("decoded apart:\n%+v\n%+v", a, b)
	}

	full := fullRequest() // with exts of their own
	if out := openrtb.AppendRequest25(nil, full); string(out) != string(openrtb.AppendRequest(nil, full)) {
		t.Errorf("own exts not kept:\n%s", out)
	}
	bare := &openrtb.BidRequest{ID: "x", User: &openrtb.User{ID: "u"}, Source: &openrtb.Source{TID: openrtb.Text{Value: "t"}},
		Regs: &openrtb.Regs{COPPA: openrtb.FlagOn}}
	if out := openrtb.AppendRequest25(nil, bare); string(out) != string(openrtb.AppendRequest(nil, bare)) {
		t.Errorf("an ext with nothing in it:\n%s", out)
	}
}
