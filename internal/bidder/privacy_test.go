package bidder_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/privacy/privacytest"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// recorder is the store's frequency counter, recording the keys a bid asks
// it to count.
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

// newCappedFixture is the test campaigns with li-coffee-web capped (1,000
// an hour per visitor, counted through rec in the store) and, a priority
// below it, li-coffee-context: the same ad on the same site, uncapped. A
// request with a visitor gets the capped line item; one without (a
// privacy signal ruled it out) cannot be counted, so it gets the
// contextual one.
func newCappedFixture(t testing.TB) (*fixture, *recorder) {
	t.Helper()
	return newCappedFixtureFor(t, ourVendor)
}

// newCappedFixtureFor is newCappedFixture for the operator whose IAB TCF
// vendor id is vendor (0: none).
func newCappedFixtureFor(t testing.TB, vendor int) (*fixture, *recorder) {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	var web *tsubame.LineItem
	for _, li := range set.LineItems {
		if li.ID == "li-coffee-web" {
			web = li
		}
	}
	web.Frequency = []tsubame.FrequencyCap{{Impressions: 1000, Per: tsubame.Duration(time.Hour)}}
	ctx := *web
	ctx.ID, ctx.Priority, ctx.Frequency = "li-coffee-context", web.Priority+1, nil
	set.LineItems = append(set.LineItems, &ctx)
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{FrequencyCounter: st}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD", Counters: budget.New(rec, budget.Options{})})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, err := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	rates, err := tsubame.NewRates("USD", nil)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st, TCFVendorID: vendor}, []bidder.Exchange{ssp()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, bidder: bd, signer: sg}, rec
}

// The visitor ids of privacyRequest.
const (
	buyerUID = "visitor-7"
	deviceID = "ifa-visitor-8"
)

// privacyRequest is a bid request for li-coffee-web's site and size from
// visitor buyerUID (user.buyeruid, unless noBuyer) on a device whose
// advertising id is deviceID, with regs, device and user members added
// (JSON members, "" for none).
func privacyRequest(regs, device, user string, noBuyer bool) []byte {
	users := []string{}
	if !noBuyer {
		users = append(users, `"buyeruid":"`+buyerUID+`"`)
	}
	if user != "" {
		users = append(users, user)
	}
	devices := []string{`"ua":"Mozilla/5.0"`, `"ifa":"` + deviceID + `"`}
	if device != "" {
		devices = append(devices, device)
	}
	return []byte(`{"id":"auction-1","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],` +
		`"site":{"domain":"www.foobar.com"},"device":{` + strings.Join(devices, ",") + `},` +
		`"user":{` + strings.Join(users, ",") + `},"regs":{` + regs + `}}`)
}

// ourVendor is the operator's IAB TCF vendor id in these tests.
const ourVendor = 755

// tcfConsent is a TCF v2 consent string whose core segment grants purpose
// 1 (storing and reading on a device) or not, and vendor consent to
// ourVendor among others.
func tcfConsent(purpose1 bool) string {
	c := privacytest.Consent{Purposes: []int{2, 3, 4}, Vendors: []int{12, ourVendor, 900}}
	if purpose1 {
		c.Purposes = append(c.Purposes, 1)
	}
	return c.String()
}

// privacyCase is a bid request and the visitor it may be counted as: ""
// when a privacy signal, or one that cannot be read, rules the visitor out.
type privacyCase struct {
	name               string
	regs, device, user string
	noBuyer            bool
	visitor            string
}

// privacyCases are the privacy signals in every form exchanges send them
// (integers, booleans, strings, null, and what no specification allows),
// in each place OpenRTB 2.6 and the 2.5 extensions put them.
func privacyCases() []privacyCase {
	granted, refused := `"`+tcfConsent(true)+`"`, `"`+tcfConsent(false)+`"`
	var cases []privacyCase
	add := func(name, regs, device, user string, visitor string) {
		cases = append(cases, privacyCase{name: name, regs: regs, device: device, user: user, visitor: visitor})
	}
	add("no signal", "", "", "", buyerUID)

	// Flags: 0 and 1 as the specification writes them, and as exchanges
	// do; anything else is unreadable, read as the strictest.
	flagOff := []string{`0`, `false`, `"0"`, `"false"`, `null`, `0.0`}
	flagOn := []string{`1`, `true`, `"1"`, `"true"`, `1.0`, `"1.0"`}
	flagBad := []string{`2`, `-1`, `"yes"`, `"TRUE"`, `""`, `" 1"`, `{}`, `{"value":1}`, `[]`, `[1]`, `0.5`, `1e400`}
	for _, f := range []struct{ field, place string }{
		{"coppa", "regs"}, {"dnt", "device"}, {"lmt", "device"}, {"gdpr", "regs"}, {"gdpr", "regs.ext"},
	} {
		member := func(v string) (regs, device string) {
			switch f.place {
			case "regs":
				return `"` + f.field + `":` + v, ""
			case "regs.ext":
				return `"ext":{"` + f.field + `":` + v + `}`, ""
			}
			return "", `"` + f.field + `":` + v
		}
		for _, v := range flagOff {
			r, d := member(v)
			add(f.place+"."+f.field+"="+v, r, d, "", buyerUID)
		}
		for _, v := range slices.Concat(flagOn, flagBad) {
			r, d := member(v)
			add(f.place+"."+f.field+"="+v, r, d, "", "")
		}
		if f.field != "gdpr" {
			continue
		}
		// GDPR in force with a consent to store: the visitor is kept;
		// a gdpr that cannot be read is not in force or not.
		for _, v := range flagOn {
			r, _ := member(v)
			add(f.place+".gdpr="+v+" with consent", r, "", `"consent":`+granted, buyerUID)
			add(f.place+".gdpr="+v+" with consent in user.ext", r, "", `"ext":{"consent":`+granted+`}`, buyerUID)
		}
		for _, v := range flagBad {
			r, _ := member(v)
			add(f.place+".gdpr="+v+" with consent", r, "", `"consent":`+granted, "")
		}
	}
	// The advertising id, without a buyer id: limited by lmt and dnt.
	for _, tc := range []struct{ device, visitor string }{
		{``, deviceID}, {`"lmt":0`, deviceID}, {`"lmt":1`, ""}, {`"lmt":true`, ""}, {`"lmt":"x"`, ""}, {`"dnt":true`, ""},
	} {
		cases = append(cases, privacyCase{name: "ifa " + tc.device, device: tc.device, noBuyer: true, visitor: tc.visitor})
	}

	// us_privacy (IAB CCPA string, version 1): Y as its third character
	// opts out of sale; a string that is not one is unreadable.
	usKeep := []string{`"1YNN"`, `"1NNN"`, `"1---"`, `"1YNY"`, `null`, `""`}
	usDrop := []string{`"1YYN"`, `"1NYY"`, `"1-Y-"`, `"1YY"`, `"1YNNN"`, `"2YNN"`, `"1yyn"`, `"1YXN"`, `"YYYY"`,
		`1`, `0`, `true`, `false`, `{}`, `{"us_privacy":"1YNN"}`, `["1YNN"]`}
	// gpp: any string; gpp_sid: any section in force (-1 is none).
	gppKeep := []string{`null`, `""`}
	gppDrop := []string{`"DBABMA~CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA"`, `"x"`, `1`, `0`, `true`, `false`, `{}`, `[]`}
	sidKeep := []string{`null`, `[]`, `[-1]`}
	sidDrop := []string{`[7]`, `[2,6]`, `["7"]`, `[-1,2]`, `7`, `"7"`, `true`, `false`, `{}`, `["x"]`, `[[7]]`, `[7.5]`, `[null]`}
	for _, f := range []struct {
		field      string
		keep, drop []string
	}{{"us_privacy", usKeep, usDrop}, {"gpp", gppKeep, gppDrop}, {"gpp_sid", sidKeep, sidDrop}} {
		for _, ext := range []bool{false, true} {
			for _, v := range slices.Concat(f.keep, f.drop) {
				m, place := `"`+f.field+`":`+v, "regs."
				if ext {
					m, place = `"ext":{`+m+`}`, "regs.ext."
				}
				visitor := ""
				if slices.Contains(f.keep, v) {
					visitor = buyerUID
				}
				add(place+f.field+"="+v, m, "", "", visitor)
			}
		}
	}

	// Consent where GDPR is in force: only a TCF v2 string granting
	// purpose 1 keeps the visitor; where it is not, consent is not read.
	for _, gdpr := range []string{`"gdpr":1`, `"ext":{"gdpr":1}`} {
		for _, v := range []string{refused, `null`, `""`, `"garbage"`, `1`, `true`, `{}`, `[]`, `["` + tcfConsent(true) + `"]`} {
			add(gdpr+" consent="+v, gdpr, "", `"consent":`+v, "")
			add(gdpr+" ext.consent="+v, gdpr, "", `"ext":{"consent":`+v+`}`, "")
		}
	}
	// Purpose 1 granted, but not to our vendor id: in either encoding.
	for _, c := range []privacytest.Consent{
		{Purposes: []int{1, 2}, Vendors: []int{12, ourVendor - 1, ourVendor + 1}},
		{Purposes: []int{1, 2}, Vendors: []int{12, ourVendor - 1, ourVendor + 1}, Ranges: true},
		{Purposes: []int{1, 2}, Vendors: []int{12}},
	} {
		add("gdpr=1 consent not to our vendor, ranges "+strconv.FormatBool(c.Ranges), `"gdpr":1`, "", `"consent":"`+c.String()+`"`, "")
	}
	rangeGrant := privacytest.Consent{Purposes: []int{1}, Vendors: []int{700, 701, ourVendor, ourVendor + 1}, Ranges: true}
	add("gdpr=1 consent to our vendor as ranges", `"gdpr":1`, "", `"consent":"`+rangeGrant.String()+`"`, buyerUID)
	for _, v := range []string{refused, `"garbage"`, `{}`, `7`} {
		add("gdpr=0 consent="+v, `"gdpr":0`, "", `"consent":`+v, buyerUID)
		add("no gdpr ext.consent="+v, "", "", `"ext":{"consent":`+v+`}`, buyerUID)
	}

	// Two places that disagree: the stricter reading.
	add("gdpr 0, ext 1", `"gdpr":0,"ext":{"gdpr":1}`, "", "", "")
	add("gdpr 1, ext 0", `"gdpr":1,"ext":{"gdpr":0}`, "", "", "")
	add("us_privacy no, ext opted out", `"us_privacy":"1YNN","ext":{"us_privacy":"1YYN"}`, "", "", "")
	add("us_privacy opted out, ext no", `"us_privacy":"1YYN","ext":{"us_privacy":"1YNN"}`, "", "", "")
	add("us_privacy twice alike", `"us_privacy":"1YNN","ext":{"us_privacy":"1YNN"}`, "", "", buyerUID)
	add("consent granted, ext refused", `"gdpr":1`, "", `"consent":`+granted+`,"ext":{"consent":`+refused+`}`, "")
	add("consent refused, ext granted", `"gdpr":1`, "", `"consent":`+refused+`,"ext":{"consent":`+granted+`}`, "")
	add("consent twice alike", `"gdpr":1`, "", `"consent":`+granted+`,"ext":{"consent":`+granted+`}`, buyerUID)

	// An extension that is not an object may hide any of its signals.
	add("regs.ext a string", `"ext":"gdpr"`, "", "", "")
	add("regs.ext an array", `"ext":[{"gdpr":0}]`, "", "", "")
	add("regs.ext null", `"ext":null`, "", "", buyerUID)
	add("regs.ext empty", `"ext":{}`, "", "", buyerUID)
	add("user.ext a string under gdpr", `"gdpr":1`, "", `"consent":`+granted+`,"ext":"x"`, "")
	add("user.ext a string, no gdpr", "", "", `"ext":"x"`, buyerUID)

	// The attack pass's requests.
	add("issue: gdpr and us_privacy in regs.ext", `"ext":{"gdpr":1,"us_privacy":"1YNN"}`, "", "", "")
	add("issue: coppa true", `"coppa":true`, "", "", "")
	add("issue: gdpr true", `"gdpr":true`, "", "", "")
	add("issue: dnt true", "", `"dnt":true`, "", "")
	return cases
}

// Every privacy signal, in every form and place: a request whose signal
// rules the visitor out, or cannot be read, is still bid on, but
// contextually: no visitor in the decision (the capped line item, which
// could not be counted, is passed over for the uncapped one), no
// frequency key counted in the store, no uid in the bid's event line or
// its notice and click tokens. A request whose signals allow it is counted
// as its visitor.
func TestPrivacySignals(t *testing.T) {
	f, rec := newCappedFixture(t)
	for _, tc := range privacyCases() {
		body := privacyRequest(tc.regs, tc.device, tc.user, tc.noBuyer)
		n := len(f.events)
		o := f.bid(t, "ssp", body)
		if o.Status != 200 || len(f.events) != n+1 {
			t.Errorf("%s: %d %q and %d event lines; want a bid and its line (%s)", tc.name, o.Status, o.Reason, len(f.events)-n, body)
			rec.taken()
			continue
		}
		e := f.events[n]
		keys := rec.taken()
		// The visitor's record read, then the bid's hold of its cap.
		wantLine, wantKeys := "li-coffee-web", []string{freqKey("*", tc.visitor), freqKey("li-coffee-web", tc.visitor)}
		if tc.visitor == "" {
			wantLine, wantKeys = "li-coffee-context", nil
		}
		if e.UID.String() != tc.visitor || e.LineItem.String() != wantLine || !slices.Equal(keys, wantKeys) {
			t.Errorf("%s: uid %q, line item %q, frequency keys %q; want %q, %q, %q", tc.name,
				e.UID.String(), e.LineItem.String(), keys, tc.visitor, wantLine, wantKeys)
		}
		b := decodeResponse(t, o).SeatBid[0].Bid[0]
		tk := verifyNotice(t, f, b.BURL, bidder.PathBill, track.KindBill, b.ID)
		click, _, _ := strings.Cut(strings.TrimPrefix(b.AdM, `<a href="`+noticeBase+track.PathClick), `"`)
		ck, err := f.signer.VerifyKind(click, track.KindClick, time.Now())
		if err != nil || tk.User != tc.visitor || ck.User != tc.visitor {
			t.Errorf("%s: billing token's user %q, click token's %q (%v); want %q", tc.name, tk.User, ck.User, err, tc.visitor)
		}
	}
}

// Without a TCF vendor id configured, GDPR applying keeps no visitor,
// whatever the consent: nobody's consent can be ours. Where it does not
// apply, the visitor is kept.
func TestPrivacyGDPRWithoutVendorID(t *testing.T) {
	f, rec := newCappedFixtureFor(t, 0)
	for _, tc := range []struct {
		regs, user, visitor string
	}{
		{`"gdpr":1`, `"consent":"` + tcfConsent(true) + `"`, ""},
		{`"ext":{"gdpr":1}`, `"ext":{"consent":"` + tcfConsent(true) + `"}`, ""},
		{`"gdpr":0`, `"consent":"` + tcfConsent(true) + `"`, buyerUID},
		{``, ``, buyerUID},
	} {
		n := len(f.events)
		o := f.bid(t, "ssp", privacyRequest(tc.regs, "", tc.user, false))
		keys := rec.taken()
		if o.Status != 200 || len(f.events) != n+1 {
			t.Fatalf("%s: %d %q, want a bid", tc.regs, o.Status, o.Reason)
		}
		if got := f.events[n].UID.String(); got != tc.visitor || (tc.visitor == "") != (len(keys) == 0) {
			t.Errorf("%s: uid %q, frequency keys %q; want the visitor %q", tc.regs, got, keys, tc.visitor)
		}
	}
}

// POST /rtb/<exchange> with the attack pass's requests: each is bid on,
// and its bid's line in the access log has no visitor; the request
// without a signal has it.
func TestPrivacyOverHTTP(t *testing.T) {
	f, rec := newCappedFixture(t)
	dir := t.TempDir()
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	srv, err := server.New(server.Options{Routes: f.bidder.Routes(log, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		_ = log.Close(ctx)
	}
	t.Cleanup(stop)
	base := "http://" + ln.Addr().String()

	requests := []struct {
		name         string
		regs, device string
		visitor      string
	}{
		{"no signal", "", "", buyerUID},
		{"gdpr and us_privacy in regs.ext", `"ext":{"gdpr":1,"us_privacy":"1YNN"}`, "", ""},
		{"coppa true", `"coppa":true`, "", ""},
		{"gdpr true", `"gdpr":true`, "", ""},
		{"dnt true", "", `"dnt":true`, ""},
		{"us_privacy a number", `"us_privacy":1`, "", ""},
		{"gpp an object", `"gpp":{"s":"x"}`, "", ""},
	}
	for i, r := range requests {
		body := bytes.Replace(privacyRequest(r.regs, r.device, "", false), []byte(`"auction-1"`), []byte(`"auction-`+strconv.Itoa(i)+`"`), 1)
		resp, answer := post(t, base+"/rtb/ssp", body)
		keys := rec.taken()
		if resp.StatusCode != 200 || len(answer) == 0 {
			t.Fatalf("%s: %d %s, want a bid", r.name, resp.StatusCode, answer)
		}
		var want []string
		if r.visitor != "" {
			want = []string{freqKey("*", r.visitor), freqKey("li-coffee-web", r.visitor)}
		}
		if !slices.Equal(keys, want) {
			t.Errorf("%s: frequency keys %q, want %q", r.name, keys, want)
		}
	}
	stop()
	files, err := filepath.Glob(filepath.Join(dir, "access*.log"))
	if err != nil || len(files) != 1 {
		t.Fatalf("log files %v %v", files, err)
	}
	file, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	// The bids' lines, by auction (the log does not keep the order of
	// requests).
	lines := map[string]string{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if !slices.Contains(fields, "event:bid") {
			continue
		}
		for _, kv := range fields {
			if a, ok := strings.CutPrefix(kv, "auction:"); ok {
				lines[a] = sc.Text()
			}
		}
	}
	if len(lines) != len(requests) {
		t.Fatalf("%d bid lines for %d requests: %q", len(lines), len(requests), lines)
	}
	for i, r := range requests {
		line := lines["auction-"+strconv.Itoa(i)]
		want := "uid:-"
		if r.visitor != "" {
			want = "uid:" + r.visitor
		}
		if !slices.Contains(strings.Split(line, "\t"), want) || r.visitor == "" && strings.Contains(line, buyerUID) {
			t.Errorf("%s: the bid's line has not %s: %s", r.name, want, line)
		}
	}
}
