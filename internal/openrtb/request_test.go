package openrtb_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"tsubame/internal/openrtb"
)

// The fields a seller sends are read from an exchange's request.
func TestDecodeSellerFields(t *testing.T) {
	r := decodeFile(t, "real-1-web.json")
	s := r.Site
	if s.ID != "site-8872" || s.Name != "Daily News Example" || s.Ref != "https://www.search.example/?q=markets" ||
		s.Publisher.Name != "Example News Group" || s.Publisher.Domain != "news.example" {
		t.Errorf("site %+v, publisher %+v", s, s.Publisher)
	}
	if d := r.Device; d.OS != "iOS" || d.Language != "ja" {
		t.Errorf("device %+v", d)
	}
	if r.User.ID != "exch-user-93f1c0" || r.Imp[0].Exp != 300 || r.Imp[1].Exp != 0 {
		t.Errorf("user %+v, imp %+v", r.User, r.Imp[0])
	}
	src := r.Source
	if src.FD == nil || *src.FD != 1 || src.SChain.Ver != "1.0" || src.SChain.Nodes[0].RID != "b8c1f4de" || src.SChain.Nodes[1].RID != "" {
		t.Errorf("source %+v, schain %+v", src, src.SChain)
	}
	r = decodeFile(t, "example-6.2.4-video.json")
	if v := r.Imp[0].Video; v.Linearity != 1 {
		t.Errorf("video %+v", v)
	}
	r = decodeFile(t, "example-6.2.3-mobile.json")
	if a := r.App; a.ID != "agltb3B1Yi1pbmNyDAsSA0FwcBiJkfIUDA" || a.Name != "Yahoo Weather" || a.Publisher.Name != "yahoo" ||
		a.Publisher.Domain != "www.yahoo.com" || a.StoreURL != "https://itunes.apple.com/id628677149" || r.Device.OS != "iOS" || r.Device.Language != "en" {
		t.Errorf("app %+v %+v, device %+v", a, a.Publisher, r.Device)
	}
	r, err := openrtb.Decode([]byte(`{"id":"1","imp":[{"id":"1","instl":1,"video":{"plcmt":"2","linearity":1}}],
		"app":{"domain":"game.example","storeurl":"https://store.example/app"},"source":{"fd":0}}`))
	if err != nil || r.Imp[0].Instl != 1 || r.Imp[0].Video.Plcmt != 2 || r.App.Domain != "game.example" ||
		r.App.StoreURL != "https://store.example/app" || r.Source.FD == nil || *r.Source.FD != 0 {
		t.Errorf("%v: %+v", err, r)
	}
}

// The string fields the bidder once skipped read a value of another type
// as empty: a request accepted before they were defined is accepted
// still.
func TestDecodeTolerantStrings(t *testing.T) {
	fields := []struct {
		json string
		get  func(*openrtb.BidRequest) openrtb.String
	}{
		{`"site":{"id":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.Site.ID }},
		{`"site":{"name":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.Site.Name }},
		{`"site":{"ref":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.Site.Ref }},
		{`"site":{"publisher":{"name":%s}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Site.Publisher.Name }},
		{`"site":{"publisher":{"domain":%s}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Site.Publisher.Domain }},
		{`"app":{"id":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.App.ID }},
		{`"app":{"name":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.App.Name }},
		{`"app":{"domain":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.App.Domain }},
		{`"app":{"storeurl":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.App.StoreURL }},
		{`"device":{"os":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.Device.OS }},
		{`"device":{"language":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.Device.Language }},
		{`"user":{"id":%s}`, func(r *openrtb.BidRequest) openrtb.String { return r.User.ID }},
		{`"source":{"schain":{"complete":1,"nodes":[],"ver":%s}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Source.SChain.Ver }},
		{`"source":{"schain":{"complete":1,"nodes":[{"asi":"a","sid":"b","rid":%s}]}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Source.SChain.Nodes[0].RID }},
		{`"source":{"schain":{"complete":1,"nodes":[{"asi":"a","sid":"b","name":%s}]}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Source.SChain.Nodes[0].Name }},
		{`"source":{"schain":{"complete":1,"nodes":[{"asi":"a","sid":"b","domain":%s}]}}`, func(r *openrtb.BidRequest) openrtb.String { return r.Source.SChain.Nodes[0].Domain }},
	}
	for _, f := range fields {
		for _, tc := range []struct {
			value string
			want  openrtb.String
		}{
			{`"x.example"`, "x.example"}, {`"a\"b\u00e9"`, `a"bé`}, {`""`, ""},
			{`5`, ""}, {`null`, ""}, {`true`, ""}, {`{"a":"b"}`, ""}, {`["x"]`, ""}, {`1.5e3`, ""},
		} {
			body := `{"id":"1","imp":[{"id":"1"}],` + strings.Replace(f.json, "%s", tc.value, 1) + `}`
			r, err := openrtb.Decode([]byte(body))
			if err != nil {
				t.Errorf("%s: %v", body, err)
				continue
			}
			if got := f.get(r); got != tc.want {
				t.Errorf("%s: %q, want %q", body, got, tc.want)
			}
		}
	}
	// The same in source.ext.schain, the 2.5 place: the chain is kept.
	r, err := openrtb.Decode([]byte(`{"id":"1","imp":[{"id":"1"}],"source":{"ext":{"schain":{"complete":1,"ver":1,"nodes":[{"asi":"a","sid":"b","rid":7,"hp":1}]}}}}`))
	if err != nil || r.Source.SChain == nil || r.Source.SChain.Nodes[0].ASI != "a" || r.Source.SChain.Ver != "" || r.Source.SChain.Nodes[0].RID != "" {
		t.Errorf("ext schain: %v %+v", err, r.Source)
	}
}

// gpp_sid keeps the ids it read, as well as its reading, in both its
// places; two lists are merged, the stricter reading counting.
func TestDecodeSections(t *testing.T) {
	for _, tc := range []struct {
		regs string
		want openrtb.Sections
	}{
		{`"gpp_sid":[2,6]`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{2, 6}}},
		{`"gpp_sid":["7", -1]`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{7, -1}}},
		{`"gpp_sid":[-1]`, openrtb.Sections{Flag: openrtb.FlagOff, IDs: []openrtb.Int{-1}}},
		{`"gpp_sid":[]`, openrtb.Sections{Flag: openrtb.FlagOff}},
		{`"gpp_sid":null`, openrtb.Sections{}},
		{`"gpp_sid":[2,"x"]`, openrtb.Sections{Flag: openrtb.FlagUnreadable}},
		{`"gpp_sid":[` + strings.Repeat("1,", openrtb.MaxSections-1) + `2]`, openrtb.NewSections(ones(openrtb.MaxSections-1, 2)...)},
		{`"gpp_sid":[` + strings.Repeat("1,", openrtb.MaxSections) + `2]`, openrtb.Sections{Flag: openrtb.FlagUnreadable}},
		{`"ext":{"gpp_sid":[8]}`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{8}}},
		{`"gpp_sid":[2],"ext":{"gpp_sid":[2]}`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{2}}},
		{`"gpp_sid":[2],"ext":{"gpp_sid":[6,2]}`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{2, 6}}},
		{`"gpp_sid":[-1],"ext":{"gpp_sid":[7]}`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{7}}},
		{`"gpp_sid":[7],"ext":{"gpp_sid":[]}`, openrtb.Sections{Flag: openrtb.FlagOn, IDs: []openrtb.Int{7}}},
		{`"gpp_sid":[],"ext":{"gpp_sid":[-1]}`, openrtb.Sections{Flag: openrtb.FlagOff, IDs: []openrtb.Int{-1}}},
		{`"gpp_sid":[7],"ext":{"gpp_sid":"7"}`, openrtb.Sections{Flag: openrtb.FlagUnreadable}},
		{`"gpp_sid":[7],"ext":"x"`, openrtb.Sections{Flag: openrtb.FlagUnreadable}},
	} {
		r, err := openrtb.Decode([]byte(`{"id":"1","imp":[{"id":"1"}],"regs":{` + tc.regs + `}}`))
		if err != nil {
			t.Errorf("%s: %v", tc.regs, err)
			continue
		}
		if got := r.Regs.GPPSID; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.regs, got, tc.want)
		}
	}
	// Merging lists that agree on their reading: the two together, and
	// unreadable past MaxSections.
	body := `{"id":"1","imp":[{"id":"1"}],"regs":{"gpp_sid":[` + seq(1, 20) + `],"ext":{"gpp_sid":[` + seq(15, 40) + `]}}}`
	if r, err := openrtb.Decode([]byte(body)); err != nil || r.Regs.GPPSID.Flag != openrtb.FlagUnreadable || r.Regs.GPPSID.IDs != nil {
		t.Errorf("40 sections in two lists: %v %+v", err, r.Regs.GPPSID)
	}
	if s := openrtb.NewSections(); s.Flag != openrtb.FlagOff || s.IDs != nil {
		t.Errorf("NewSections(): %+v", s)
	}
	ids := []openrtb.Int{3}
	s := openrtb.NewSections(ids...)
	ids[0] = 4
	if s.IDs[0] != 3 {
		t.Error("NewSections keeps the caller's slice")
	}
}

// ones is n ones and then last.
func ones(n int, last openrtb.Int) []openrtb.Int {
	out := make([]openrtb.Int, n, n+1)
	for i := range out {
		out[i] = 1
	}
	return append(out, last)
}

// seq is the integers from a to b, as a JSON list's elements.
func seq(a, b int) string {
	var s []string
	for i := a; i <= b; i++ {
		s = append(s, strconv.Itoa(i))
	}
	return strings.Join(s, ",")
}
