package budget

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
)

// watch counts a day of rounds every second into p from day's start: in
// each quarter, perRound(q) requests a round.
func watch(p *profile, day int64, from, to int, perRound func(q int) int64) {
	for s := from; s < to; s++ {
		now := day*dayNs + int64(s)*int64(time.Second)
		p.count(now, perRound(int(int64(s)*int64(time.Second)/quarter)))
	}
}

// A profile learns a day once it watched every quarter of it, folds each
// day into a smoothed one, and weighs quarters by their share of the mean.
func TestProfileLearnsTheDay(t *testing.T) {
	p := &profile{every: int64(time.Second)}
	const day0 = 20_000
	evening := func(q int) int64 {
		if q >= 48 {
			return 3
		}
		return 1
	}
	// Half a day watched, then the next day: nothing learned (a quarter
	// never seen).
	watch(p, day0, 43200, 86400, evening)
	watch(p, day0+1, 0, 10, evening)
	if p.weights() != nil {
		t.Fatal("weights after half a day watched")
	}
	// A whole day, then the first round of the next folds it.
	watch(p, day0+1, 10, 86400, evening)
	watch(p, day0+2, 0, 1, evening)
	w := p.weights()
	if w == nil {
		t.Fatal("no weights after a whole day watched")
	}
	if w[0] != 500 || w[47] != 500 || w[48] != 1500 || w[95] != 1500 {
		t.Fatalf("weights %v: want 500 before noon (UTC) and 1500 after", w)
	}
	// A day of the opposite shape moves the smoothed day by trafficAlpha.
	watch(p, day0+2, 1, 86400, func(q int) int64 { return 4 - evening(q) })
	watch(p, day0+3, 0, 1, evening)
	w = p.weights()
	// morning: 900*(0.7*1+0.3*3)=1440, evening 900*(0.7*3+0.3*1)=2160 per quarter;
	// mean 1800: 800 and 1200 thousandths.
	if near := func(v, want uint32) bool { return v+1 >= want && v <= want+1 }; !near(w[0], 800) || !near(w[95], 1200) {
		t.Fatalf("weights %v after an opposite day: want 800 and 1200", w)
	}
	// A quarter watched for less than half of its rounds (a restart)
	// keeps its smoothed value; one watched for more is scaled to the
	// whole quarter.
	watch(p, day0+3, 1, 86400, func(q int) int64 {
		if q == 0 {
			return 100
		}
		return evening(q)
	})
	// Quarter 1 watched for 600 of its 900 seconds, at 6 a second: 5,400
	// in the quarter.
	p.mu.Lock()
	p.today[1], p.seenT[1] = 3600, 600*int64(time.Second)
	p.mu.Unlock()
	watch(p, day0+4, 0, 1, evening)
	p.mu.Lock()
	q0, q1 := p.shape[0], p.shape[1]
	p.mu.Unlock()
	if want := float32(1440*0.7 + (899*100+1)*0.3); q0 < want-1 || q0 > want+1 {
		t.Errorf("quarter 0: %v, want about %v", q0, want)
	}
	if want := float32(1440*0.7 + 5400*0.3); q1 < want-1 || q1 > want+1 {
		t.Errorf("quarter 1, watched for two thirds: %v, want %v", q1, want)
	}
}

// What a ledger learned survives a restart through WriteTraffic and
// ReadTraffic, and a file that is not one is refused whole.
func TestTrafficFile(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	g, err := NewLedger(st, st, LedgerOptions{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p := g.traffic.of("li/x/imp")
	watch(p, 20_000, 0, 86400, func(q int) int64 { return int64(q%4 + 1) })
	watch(p, 20_001, 0, 1, func(int) int64 { return 1 })
	var buf bytes.Buffer
	if err := g.WriteTraffic(&buf); err != nil {
		t.Fatal(err)
	}
	h, err := NewLedger(st, st, LedgerOptions{Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ReadTraffic(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	want, got := p.weights(), h.traffic.of("li/x/imp").weights()
	if want == nil || got == nil || *want != *got {
		t.Fatalf("weights read back %v, want %v", got, want)
	}
	for _, bad := range []string{`{"version":2}`, `{"version":1,"keys":{"k":{"shape":[-1]}}}`, `not json`} {
		if err := h.ReadTraffic(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: read", bad)
		}
	}
}

// A long period is weighed by whole days at once, as by its quarters.
func TestWeighLongPeriods(t *testing.T) {
	var w [quarters]uint32
	for q := range w {
		w[q] = uint32(10 + q*7%50)
	}
	p := pacer{mode: "even", loc: time.UTC}
	from := int64(1_700_000_123_456_789)
	for _, span := range []int64{dayNs / 3, 2*dayNs + 5, 3*dayNs + 12345, 400*dayNs + 999} {
		var slow uint64
		for t0 := from; t0 < from+span; {
			q := floorDiv(t0, quarter)
			end := min((q+1)*quarter, from+span)
			slow += uint64(w[q-floorDiv(q, quarters)*quarters]) * uint64(end-t0) / uint64(time.Millisecond)
			t0 = end
		}
		if got := p.weigh(&w, from, from+span); got != slow {
			t.Errorf("%d ns: weighed %d, quarter by quarter %d", span, got, slow)
		}
	}
}

// With more accounts to warm than its bound, Warm takes the line items
// that had traffic first (as learned, or read from the traffic file).
func TestWarmTakesTrafficFirst(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	set := &tsubame.CampaignSet{
		Currency:    "USD",
		Advertisers: []*tsubame.Advertiser{{ID: "acme", Name: "Acme"}},
		Campaigns:   []*tsubame.Campaign{{ID: "camp", Advertiser: "acme", Timezone: "UTC", Pacing: tsubame.Pacing{Mode: tsubame.PacingASAP}}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "acme", Format: "banner", W: 300, H: 250,
			Image: "https://cdn.acme.example/b.png", Click: "https://acme.example/", Status: "approved"}},
	}
	for _, id := range []string{"li-a", "li-b", "li-c"} {
		set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: id, Campaign: "camp", Priority: 1, Weight: 1, CPM: 1_000_000,
			Creatives: []string{"cr"}, Limits: tsubame.Limits{Impressions: tsubame.ImpressionLimits{Total: 6400}}})
	}
	g, err := NewLedger(st, st, LedgerOptions{Holder: "n", Warm: 1})
	if err != nil {
		t.Fatal(err)
	}
	watch(g.traffic.of("li/li-c/imp"), 20_000, 0, 86400, func(int) int64 { return 1 })
	watch(g.traffic.of("li/li-c/imp"), 20_001, 0, 1, func(int) int64 { return 1 })
	ix, err := decision.Compile(set, decision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := g.Warm(t.Context(), ix, nil); n != 1 {
		t.Fatalf("%d warmed, want 1 (the bound)", n)
	}
	g.mu.Lock()
	_, c := g.accounts["li/li-c/imp"]
	_, a := g.accounts["li/li-a/imp"]
	g.mu.Unlock()
	if !c || a {
		t.Fatalf("warmed li-c %v, li-a %v: want li-c, the one with traffic", c, a)
	}
}
