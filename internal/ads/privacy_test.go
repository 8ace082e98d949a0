package ads_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/privacy/privacytest"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// ourVendor is the operator's IAB TCF vendor id in these tests.
const ourVendor = 755

// recorder is the store's frequency counter, recording the keys a
// decision asks it to count.
type recorder struct {
	tsubame.FrequencyCounter
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	r.mu.Lock()
	r.keys = append(r.keys, freqKey("*", visitor))
	r.mu.Unlock()
	return r.FrequencyCounter.Read(ctx, visitor, rec)
}

func (r *recorder) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	r.mu.Lock()
	r.keys = append(r.keys, freqKey(u.LineItem, u.Visitor))
	r.mu.Unlock()
	return r.FrequencyCounter.Update(ctx, u, rec)
}

// freqKey names a store call about visitor's count of line item line
// ("*" for a read of all of them).
func freqKey(line, visitor string) string { return line + "/" + visitor }

// taken returns the keys counted since the last call, and forgets them.
func (r *recorder) taken() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys
	r.keys = nil
	return k
}

// startCapped starts a node on the test campaigns with li-top-capped
// added: li-top's ad on its placement, a priority above it, capped per
// visitor (1,000 an hour, counted through the returned recorder). A
// request with a visitor gets li-top-capped; one without (a privacy signal
// ruled it out) cannot be counted, so it gets li-top, contextually.
func startCapped(t *testing.T, o nodeOpts) (*fixture, *node, *recorder) {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	var top *tsubame.LineItem
	for _, li := range set.LineItems {
		if li.ID == "li-top" {
			top = li
		}
	}
	capped := *top
	capped.ID, capped.Priority = "li-top-capped", top.Priority-1
	capped.Frequency = []tsubame.FrequencyCap{{Impressions: 1000, Per: tsubame.Duration(time.Hour)}}
	set.LineItems = append(set.LineItems, &capped)
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: st, keys: []track.Key{{ID: "k1", Secret: []byte(strings.Repeat("s", 32))}}}
	rec := &recorder{FrequencyCounter: st}
	o.counters = budget.New(rec, budget.Options{})
	return f, f.startOn(t, st, o), rec
}

// A visitor id that this server could have made (a valid cookie).
const cookieID = "01M89NT1MMEGHRWX2XX0N7AA6T"

// decideCase is a request to /api/decide for placement top from visitor
// u-7 (the uid parameter, unless cookie) with privacy parameters and
// headers, and whether its visitor is kept.
type decideCase struct {
	name   string
	query  string // parameters after placement and uid
	header []string
	cookie bool // the visitor is the cookie cookieID, not uid=u-7
	kept   bool
}

func (c decideCase) visitor() string {
	switch {
	case !c.kept:
		return ""
	case c.cookie:
		return cookieID
	}
	return "u-7"
}

// decideCases are the privacy signals of /api/decide in every form a tag
// sends them: what the specifications write, what tags write instead, and
// what nobody means as "none".
func decideCases() []decideCase {
	var cases []decideCase
	add := func(kept bool, name, query string, header ...string) {
		cases = append(cases, decideCase{name: name, query: query, header: header, kept: kept})
	}
	add(true, "no signal", "")
	granted := privacytest.Consent{Purposes: []int{1, 2, 3, 4}, Vendors: []int{12, ourVendor, 900}}
	grantedRanges := granted
	grantedRanges.Ranges = true
	noPurpose := privacytest.Consent{Purposes: []int{2, 3, 4}, Vendors: []int{ourVendor}}
	noVendor := privacytest.Consent{Purposes: []int{1, 2, 3, 4}, Vendors: []int{12, ourVendor - 1, ourVendor + 1}}
	noVendorRanges := noVendor
	noVendorRanges.Ranges = true
	consent := "&gdpr_consent=" + granted.String()

	flagOff := []string{"0", "false"}
	flagOn := []string{"1", "true"}
	flagBad := []string{"", "yes", "TRUE", "2", "-1", " 1", "1.0", "null", "{}", "${GDPR}"}
	q := url.QueryEscape
	for _, v := range flagOff {
		add(true, "coppa="+v, "&coppa="+q(v))
		add(true, "gdpr="+v, "&gdpr="+q(v))
		add(true, "gdpr="+v+", a consent", "&gdpr="+q(v)+consent)
		add(true, "gdpr="+v+", a refusal", "&gdpr="+q(v)+"&gdpr_consent="+noPurpose.String())
	}
	for _, v := range flagOn {
		add(false, "coppa="+v, "&coppa="+q(v))
		add(false, "gdpr="+v+" without consent", "&gdpr="+q(v))
		add(true, "gdpr="+v+" with consent", "&gdpr="+q(v)+consent)
	}
	for _, v := range flagBad {
		add(false, "coppa="+v, "&coppa="+q(v))
		add(false, "gdpr="+v, "&gdpr="+q(v))
		add(false, "gdpr="+v+" with consent", "&gdpr="+q(v)+consent)
	}
	add(false, "coppa alone", "&coppa")
	add(false, "gdpr alone, with consent", "&gdpr"+consent)

	// Consent where GDPR applies: purpose 1 and our vendor, in either
	// encoding; anything else keeps no visitor.
	for _, gdpr := range []string{"1", "true"} {
		g := "&gdpr=" + gdpr
		add(true, "gdpr="+gdpr+", consent as ranges", g+"&gdpr_consent="+grantedRanges.String())
		add(false, "gdpr="+gdpr+", purpose 1 missing", g+"&gdpr_consent="+noPurpose.String())
		add(false, "gdpr="+gdpr+", vendor missing (bitfield)", g+"&gdpr_consent="+noVendor.String())
		add(false, "gdpr="+gdpr+", vendor missing (ranges)", g+"&gdpr_consent="+noVendorRanges.String())
		for _, bad := range []string{"", "garbage", "1", granted.String()[:40], "BOEFEAyOEFEAyAHABDENAI4AAAB9vABAASA"} {
			add(false, "gdpr="+gdpr+", consent "+bad, g+"&gdpr_consent="+q(bad))
		}
		add(false, "gdpr="+gdpr+", two different consents", g+consent+"&gdpr_consent="+noVendor.String())
		add(true, "gdpr="+gdpr+", one consent twice", g+consent+consent)
	}
	add(true, "no gdpr, a garbage consent", "&gdpr_consent=garbage")

	// us_privacy: Y third opts out; a string that is not a version 1
	// one cannot be read.
	for _, v := range []string{"1YNN", "1NNN", "1---", "1YNY", ""} {
		add(true, "us_privacy="+v, "&us_privacy="+q(v))
	}
	for _, v := range []string{"1YYN", "1NYY", "1-Y-", "1YY", "1YNNN", "2YNN", "1yyn", "1YXN", "YYYY", "true", "null", "1YNN "} {
		add(false, "us_privacy="+v, "&us_privacy="+q(v))
	}
	add(false, "us_privacy twice, differing", "&us_privacy=1YNN&us_privacy=1YYN")
	add(true, "us_privacy twice alike", "&us_privacy=1YNN&us_privacy=1YNN")

	// gpp: any string; gpp_sid: any section in force (-1 is none).
	add(true, "gpp empty", "&gpp=")
	for _, v := range []string{"DBABMA~CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA", "x", "0", "null"} {
		add(false, "gpp="+v, "&gpp="+q(v))
	}
	for _, v := range []string{"", "-1"} {
		add(true, "gpp_sid="+v, "&gpp_sid="+q(v))
	}
	for _, v := range []string{"2", "2,6", "-1,7", "x", "[2]", "2,", "true"} {
		add(false, "gpp_sid="+v, "&gpp_sid="+q(v))
	}

	// The headers.
	add(true, "DNT: 0", "", "DNT", "0")
	for _, v := range []string{"1", "1xyz", "yes", "true", "2", "on"} {
		add(false, "DNT: "+v, "", "DNT", v)
	}
	add(true, "Sec-GPC: 0", "", "Sec-GPC", "0")
	for _, v := range []string{"1", "true", "yes", "2"} {
		add(false, "Sec-GPC: "+v, "", "Sec-GPC", v)
	}

	// A signal sent twice counts at the stricter.
	add(false, "coppa 0 then 1", "&coppa=0&coppa=1")
	add(false, "coppa 1 then 0", "&coppa=1&coppa=0")
	add(false, "gdpr 0 then 1", "&gdpr=0&gdpr=1")
	add(false, "gpp_sid -1 then 2", "&gpp_sid=-1&gpp_sid=2")

	// The visitor's cookie, not a uid: ruled out alike.
	cases = append(cases,
		decideCase{name: "cookie, coppa=true", query: "&coppa=true", cookie: true},
		decideCase{name: "cookie, gdpr=yes", query: "&gdpr=yes", cookie: true},
		decideCase{name: "cookie, Sec-GPC", header: []string{"Sec-GPC", "1"}, cookie: true},
		decideCase{name: "cookie, coppa=0", query: "&coppa=0", cookie: true, kept: true})
	return cases
}

// Every privacy signal of /api/decide in every form: a request whose
// signal rules the visitor out, or cannot be read, is still decided, but
// contextually: no visitor in the decision (the capped line item, which
// could not be counted, is passed over for the uncapped one), no
// frequency key counted in the store, no cookie set, no user in its
// impression and click tokens, uid:- in its decision line. A request whose
// signals allow it is counted as its visitor.
func TestDecidePrivacySignals(t *testing.T) {
	f, n, rec := startCapped(t, nodeOpts{vendor: ourVendor})
	signer, err := track.NewSigner(f.keys[0].ID, f.keys...)
	if err != nil {
		t.Fatal(err)
	}
	wantUID := map[string]string{} // by decision id: the decision line's uid
	for _, tc := range decideCases() {
		query := "placement=top&uid=u-7" + tc.query
		header := tc.header
		if tc.cookie {
			query = "placement=top" + tc.query
			header = append(slices.Clone(header), "Cookie", "tsubame_uid="+cookieID)
		}
		resp, ds := decide(t, n, query, header...)
		keys := rec.taken()
		if len(ds) != 1 {
			t.Errorf("%s: %d decisions, want one (%s)", tc.name, len(ds), query)
			continue
		}
		d, visitor := ds[0], tc.visitor()
		wantLine, wantKeys := "li-top-capped", []string{freqKey("li-top-capped", visitor)}
		if visitor == "" {
			wantLine, wantKeys = "li-top", nil
		}
		if d.LineItem != wantLine || !slices.Equal(keys, wantKeys) || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s: line item %q, frequency keys %q, Set-Cookie %q; want %q, %q and none (%s)", tc.name,
				d.LineItem, keys, resp.Header.Get("Set-Cookie"), wantLine, wantKeys, query)
		}
		imp, err := signer.VerifyKind(strings.TrimPrefix(d.ImpressionURL, n.url+"/t/i/"), track.KindImp, time.Now())
		if err != nil {
			t.Fatalf("%s: impression URL %q: %v", tc.name, d.ImpressionURL, err)
		}
		click, err := signer.VerifyKind(strings.TrimPrefix(d.ClickURL, n.url+"/t/c/"), track.KindClick, time.Now())
		if err != nil {
			t.Fatalf("%s: click URL %q: %v", tc.name, d.ClickURL, err)
		}
		if imp.User != visitor || click.User != visitor {
			t.Errorf("%s: the impression token's user %q, the click's %q; want %q", tc.name, imp.User, click.User, visitor)
		}
		wantUID[d.Decision] = visitor
	}
	lines := events(n.lines(t), "decision")
	if len(lines) != len(wantUID) {
		t.Fatalf("%d decision lines for %d decisions", len(lines), len(wantUID))
	}
	for _, l := range lines {
		want, ok := wantUID[l["decision"]]
		if want == "" {
			want = "-"
		}
		if !ok || l["uid"] != want {
			t.Errorf("decision %s: uid %q in its line, want %q", l["decision"], l["uid"], want)
		}
	}
}

// Without a TCF vendor id configured, GDPR applying keeps no visitor,
// whatever the consent: nobody's consent can be ours.
func TestDecideGDPRWithoutVendorID(t *testing.T) {
	_, n, rec := startCapped(t, nodeOpts{})
	granted := privacytest.Consent{Purposes: []int{1}, Vendors: []int{1, 2, 3, ourVendor}}.String()
	for _, q := range []string{"&gdpr=1&gdpr_consent=" + granted, "&gdpr=true&gdpr_consent=" + granted} {
		_, ds := decide(t, n, "placement=top&uid=u-7"+q)
		if keys := rec.taken(); len(ds) != 1 || ds[0].LineItem != "li-top" || len(keys) != 0 {
			t.Errorf("%s: %+v, frequency keys %q; want li-top, none", q, ds, keys)
		}
	}
	// Where GDPR does not apply, the visitor is kept.
	_, ds := decide(t, n, "placement=top&uid=u-7&gdpr=0")
	if keys := rec.taken(); len(ds) != 1 || ds[0].LineItem != "li-top-capped" || len(keys) != 1 {
		t.Errorf("gdpr=0: %+v, frequency keys %q; want li-top-capped, one", ds, keys)
	}
}

// The attack pass's requests through a source: decide endpoint
// (/api/ad.json), which identifies its visitor as /api/decide does: each
// is answered with the contextual line item, and its decision line in the
// access log has no visitor.
func TestDecideEndpointPrivacy(t *testing.T) {
	_, n, rec := startCapped(t, nodeOpts{vendor: ourVendor})
	noVendor := privacytest.Consent{Purposes: []int{1}, Vendors: []int{ourVendor + 1}}.String()
	for _, r := range []struct {
		query  string
		header []string
	}{
		{"&coppa=true", nil},
		{"&us_privacy=1Y", nil},
		{"&gdpr=yes", nil},
		{"&gdpr=1&gdpr_consent=not-a-tc-string", nil},
		{"&gdpr=1&gdpr_consent=" + noVendor, nil},
		{"", []string{"DNT", "yes"}},
		{"", []string{"Sec-GPC", "1"}},
	} {
		resp, body := get(t, n.url+"/api/ad.json?id=top&uid=u-7"+r.query, r.header...)
		var out struct {
			Decisions []decisionJSON `json:"decisions"`
		}
		if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != 200 || len(out.Decisions) != 1 {
			t.Fatalf("%s %v: %d %s", r.query, r.header, resp.StatusCode, body)
		}
		if keys := rec.taken(); out.Decisions[0].LineItem != "li-top" || len(keys) != 0 {
			t.Errorf("%s %v: line item %q, frequency keys %q; want li-top, none", r.query, r.header, out.Decisions[0].LineItem, keys)
		}
	}
	for _, l := range events(n.lines(t), "decision") {
		if l["uid"] != "-" {
			t.Errorf("a decision line with uid %q: %v", l["uid"], l)
		}
	}
}
