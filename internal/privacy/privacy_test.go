package privacy_test

import (
	"testing"

	"tsubame/internal/privacy"
	"tsubame/internal/privacy/privacytest"
)

func TestParse(t *testing.T) {
	const A, O, N, U = privacy.Absent, privacy.Off, privacy.On, privacy.Unreadable
	for _, tc := range []struct {
		parse func([]byte) privacy.Flag
		name  string
		in    string
		want  privacy.Flag
	}{
		{privacy.ParseFlag, "flag", "1", N}, {privacy.ParseFlag, "flag", "true", N},
		{privacy.ParseFlag, "flag", "0", O}, {privacy.ParseFlag, "flag", "false", O},
		{privacy.ParseFlag, "flag", "", U}, {privacy.ParseFlag, "flag", "yes", U}, {privacy.ParseFlag, "flag", "TRUE", U},
		{privacy.ParseFlag, "flag", "2", U}, {privacy.ParseFlag, "flag", " 1", U}, {privacy.ParseFlag, "flag", "1.0", U},
		{privacy.ParseFlag, "flag", "${GDPR}", U},

		{privacy.ParseDNT, "dnt", "", A}, {privacy.ParseDNT, "dnt", "1", N}, {privacy.ParseDNT, "dnt", "0", O},
		{privacy.ParseDNT, "dnt", "1abc", N}, {privacy.ParseDNT, "dnt", "0x", O},
		{privacy.ParseDNT, "dnt", "yes", U}, {privacy.ParseDNT, "dnt", "true", U}, {privacy.ParseDNT, "dnt", "1 ", U},
		{privacy.ParseDNT, "dnt", "1,0", U}, {privacy.ParseDNT, "dnt", "2", U}, {privacy.ParseDNT, "dnt", " 1", U},

		{privacy.ParseSections, "gpp_sid", "", A}, {privacy.ParseSections, "gpp_sid", "-1", O},
		{privacy.ParseSections, "gpp_sid", "2", N}, {privacy.ParseSections, "gpp_sid", "2,6", N},
		{privacy.ParseSections, "gpp_sid", "-1,7", N}, {privacy.ParseSections, "gpp_sid", "-1,-1", O},
		{privacy.ParseSections, "gpp_sid", "x", U}, {privacy.ParseSections, "gpp_sid", "2,", U},
		{privacy.ParseSections, "gpp_sid", ",2", U}, {privacy.ParseSections, "gpp_sid", "2;6", U},
		{privacy.ParseSections, "gpp_sid", "-2", U}, {privacy.ParseSections, "gpp_sid", "[2]", U},
		{privacy.ParseSections, "gpp_sid", "999999", U},
	} {
		if got := tc.parse([]byte(tc.in)); got != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.name, tc.in, got, tc.want)
		}
	}
}

// Every signal rules the visitor out when in force or unreadable; GDPR
// only without a consent granting purpose 1 and our vendor.
func TestPrivate(t *testing.T) {
	const us = 755
	consent := privacytest.Consent{Purposes: []int{1}, Vendors: []int{us}}.String()
	other := privacytest.Consent{Purposes: []int{1}, Vendors: []int{us + 1}}.String()
	for _, tc := range []struct {
		name   string
		s      privacy.Signals
		vendor int
		want   bool
	}{
		{"none", privacy.Signals{}, us, false},
		{"all off", privacy.Signals{COPPA: privacy.Off, GDPR: privacy.Off, DNT: privacy.Off, GPC: privacy.Off, LMT: privacy.Off,
			GPPSections: privacy.Off, USPrivacy: privacy.Text{Value: "1YNN"}}, us, false},
		{"coppa", privacy.Signals{COPPA: privacy.On}, us, true},
		{"coppa unreadable", privacy.Signals{COPPA: privacy.Unreadable}, us, true},
		{"dnt", privacy.Signals{DNT: privacy.On}, us, true},
		{"gpc", privacy.Signals{GPC: privacy.On}, us, true},
		{"gpc unreadable", privacy.Signals{GPC: privacy.Unreadable}, us, true},
		{"lmt", privacy.Signals{LMT: privacy.On}, us, true},
		{"gpp", privacy.Signals{GPP: privacy.Text{Value: "DBABMA~x"}}, us, true},
		{"gpp unreadable", privacy.Signals{GPP: privacy.Text{Unreadable: true}}, us, true},
		{"gpp sections", privacy.Signals{GPPSections: privacy.On}, us, true},
		{"us opt-out", privacy.Signals{USPrivacy: privacy.Text{Value: "1YYN"}}, us, true},
		{"us malformed", privacy.Signals{USPrivacy: privacy.Text{Value: "1Y"}}, us, true},
		{"us unreadable", privacy.Signals{USPrivacy: privacy.Text{Unreadable: true}}, us, true},
		{"gdpr, consent", privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: consent}}, us, false},
		{"gdpr, consent to another vendor", privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: other}}, us, true},
		{"gdpr, consent, no vendor id", privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: consent}}, 0, true},
		{"gdpr, no consent", privacy.Signals{GDPR: privacy.On}, us, true},
		{"gdpr, consent unreadable", privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Unreadable: true}}, us, true},
		{"gdpr unreadable, consent", privacy.Signals{GDPR: privacy.Unreadable, Consent: privacy.Text{Value: consent}}, us, true},
		{"gdpr off, no consent", privacy.Signals{GDPR: privacy.Off, Consent: privacy.Text{Value: "garbage"}}, us, false},
		{"no gdpr, consent garbage", privacy.Signals{Consent: privacy.Text{Value: "garbage"}}, 0, false},
	} {
		if got := tc.s.Private(tc.vendor); got != tc.want {
			t.Errorf("%s: private %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMerge(t *testing.T) {
	a, b := privacy.Text{Value: "a"}, privacy.Text{Value: "b"}
	for _, tc := range []struct{ x, y, want privacy.Text }{
		{a, privacy.Text{}, a}, {privacy.Text{}, a, a}, {a, a, a},
		{a, b, privacy.Text{Unreadable: true}}, {a, privacy.Text{Unreadable: true}, privacy.Text{Unreadable: true}},
	} {
		if got := tc.x.Merge(tc.y); got != tc.want {
			t.Errorf("%+v merged with %+v: %+v, want %+v", tc.x, tc.y, got, tc.want)
		}
	}
}
