package tsubame_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
)

var freqT0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func TestValidateFrequencyUpdate(t *testing.T) {
	id := strings.Repeat("x", tsubame.MaxObjectIDLength)
	hour := []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}}
	ok := func(f func(u *tsubame.FrequencyUpdate)) *tsubame.FrequencyUpdate {
		u := &tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-1", LineItem: "li-1", Caps: hour, Bid: "b-1",
			Now: freqT0, Until: freqT0.Add(time.Minute)}
		f(u)
		return u
	}
	for _, tc := range []struct {
		name string
		u    *tsubame.FrequencyUpdate
		code string
	}{
		{"hold", ok(func(*tsubame.FrequencyUpdate) {}), ""},
		{"longest ids", ok(func(u *tsubame.FrequencyUpdate) { u.Visitor, u.LineItem, u.Bid = id, id, id }), ""},
		{"take without bid", ok(func(u *tsubame.FrequencyUpdate) { u.Op, u.Bid = tsubame.FrequencyTake, "" }), ""},
		{"widest caps", ok(func(u *tsubame.FrequencyUpdate) {
			u.Caps = []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Microsecond)}, {Impressions: 1 << 40, Per: tsubame.Duration(tsubame.MaxFrequencyWindow)}}
		}), ""},
		{"nil", nil, tsubame.EINVALID},
		{"no op", ok(func(u *tsubame.FrequencyUpdate) { u.Op = 0 }), tsubame.EINVALID},
		{"op past cancel", ok(func(u *tsubame.FrequencyUpdate) { u.Op = tsubame.FrequencyCancel + 1 }), tsubame.EINVALID},
		{"cancel without a bid", ok(func(u *tsubame.FrequencyUpdate) { u.Op, u.Bid = tsubame.FrequencyCancel, "" }), tsubame.EINVALID},
		{"no visitor", ok(func(u *tsubame.FrequencyUpdate) { u.Visitor = "" }), tsubame.EINVALID},
		{"long visitor", ok(func(u *tsubame.FrequencyUpdate) { u.Visitor = id + "x" }), tsubame.EINVALID},
		{"no line item", ok(func(u *tsubame.FrequencyUpdate) { u.LineItem = "" }), tsubame.EINVALID},
		{"line item not an id", ok(func(u *tsubame.FrequencyUpdate) { u.LineItem = "li 1" }), tsubame.EINVALID},
		{"hold without bid", ok(func(u *tsubame.FrequencyUpdate) { u.Bid = "" }), tsubame.EINVALID},
		{"count without bid", ok(func(u *tsubame.FrequencyUpdate) { u.Op, u.Bid = tsubame.FrequencyCount, "" }), tsubame.EINVALID},
		{"bid not an id", ok(func(u *tsubame.FrequencyUpdate) { u.Bid = "b/1" }), tsubame.EINVALID},
		{"no time", ok(func(u *tsubame.FrequencyUpdate) { u.Now = time.Time{} }), tsubame.EINVALID},
		{"hold ending now", ok(func(u *tsubame.FrequencyUpdate) { u.Until = u.Now }), tsubame.EINVALID},
		{"hold too long", ok(func(u *tsubame.FrequencyUpdate) { u.Until = u.Now.Add(tsubame.MaxFrequencyHold + time.Second) }), tsubame.EINVALID},
		{"no caps", ok(func(u *tsubame.FrequencyUpdate) { u.Caps = nil }), tsubame.EINVALID},
		{"too many caps", ok(func(u *tsubame.FrequencyUpdate) { u.Caps = slices.Repeat(hour, tsubame.MaxFrequencyCaps+1) }), tsubame.EINVALID},
		{"zero impressions", ok(func(u *tsubame.FrequencyUpdate) { u.Caps = []tsubame.FrequencyCap{{Per: tsubame.Duration(time.Hour)}} }), tsubame.EINVALID},
		{"negative impressions", ok(func(u *tsubame.FrequencyUpdate) {
			u.Caps = []tsubame.FrequencyCap{{Impressions: -1, Per: tsubame.Duration(time.Hour)}}
		}), tsubame.EINVALID},
		{"no window", ok(func(u *tsubame.FrequencyUpdate) { u.Caps = []tsubame.FrequencyCap{{Impressions: 1}} }), tsubame.EINVALID},
		{"nanosecond window", ok(func(u *tsubame.FrequencyUpdate) {
			u.Caps = []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Nanosecond)}}
		}), tsubame.EINVALID},
		{"window too long", ok(func(u *tsubame.FrequencyUpdate) {
			u.Caps = []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(tsubame.MaxFrequencyWindow + time.Second)}}
		}), tsubame.EINVALID},
	} {
		if got := tsubame.ErrorCode(tsubame.ValidateFrequencyUpdate(tc.u)); got != tc.code {
			t.Errorf("%s: code %q, want %q", tc.name, got, tc.code)
		}
	}
}

// ApplyFrequency's windows are (now-per, now] and beyond: a time exactly
// one window old no longer counts, a later one does; impressions at or
// before now less the longest window are dropped, the rest kept in order.
func TestApplyFrequencyTakeWindows(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	caps := []tsubame.FrequencyCap{{Impressions: 2, Per: tsubame.Duration(time.Second)}, {Impressions: 3, Per: tsubame.Duration(time.Hour)}}
	var es []tsubame.FrequencyEntry
	steps := []struct {
		now  int64
		want bool
		kept []int64
	}{
		{10 * s, true, []int64{10 * s}},
		{10 * s, true, []int64{10 * s, 10 * s}},
		{10 * s, false, []int64{10 * s, 10 * s}},           // 2 per second
		{11*s - 1, false, []int64{10 * s, 10 * s}},         // still within the second
		{11 * s, true, []int64{10 * s, 10 * s, 11 * s}},    // the second has slid past 10 s
		{12 * s, false, []int64{10 * s, 10 * s, 11 * s}},   // 3 per hour
		{5 * s, false, []int64{10 * s, 10 * s, 11 * s}},    // a clock behind counts the later times
		{3610 * s, true, []int64{11 * s, 3610 * s}},        // 10 s is one hour old: dropped
		{3611 * s, true, []int64{3610 * s, 3611 * s}},      // so is 11 s
		{3610*s + s/2, false, []int64{3610 * s, 3611 * s}}, // 2 within the second before 3610.5 s and after
	}
	for i, st := range steps {
		var ok bool
		es, ok = tsubame.ApplyFrequency(es, &tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Caps: caps, Now: time.UnixMicro(st.now)})
		var times []int64
		for _, e := range es {
			times = append(times, e.At)
		}
		if ok != st.want || !slices.Equal(times, st.kept) {
			t.Fatalf("step %d at %dµs: %v with %v kept, want %v with %v", i, st.now, ok, times, st.want, st.kept)
		}
	}
	if got := tsubame.FrequencyMicros(tsubame.Duration(1500 * time.Nanosecond)); got != 2 {
		t.Fatalf("1.5µs is %dµs, want 2 (rounded up)", got)
	}
}

// A hold counts against every cap while it is open; a count ends it and
// counts once per bid, past the cap; a release ends it; a hold ends by
// itself at Until.
func TestApplyFrequencyHolds(t *testing.T) {
	caps := []tsubame.FrequencyCap{{Impressions: 2, Per: tsubame.Duration(time.Hour)}}
	var es []tsubame.FrequencyEntry
	do := func(op tsubame.FrequencyOp, bid string, at time.Duration) bool {
		t.Helper()
		u := &tsubame.FrequencyUpdate{Op: op, Visitor: "u", LineItem: "li", Caps: caps, Bid: bid, Now: freqT0.Add(at),
			Until: freqT0.Add(at + time.Minute)}
		if err := tsubame.ValidateFrequencyUpdate(u); err != nil && op != tsubame.FrequencyTake {
			t.Fatal(err)
		}
		var ok bool
		es, ok = tsubame.ApplyFrequency(es, u)
		return ok
	}
	for i, st := range []struct {
		op   tsubame.FrequencyOp
		bid  string
		at   time.Duration
		want bool
	}{
		{tsubame.FrequencyHold, "b1", 0, true},
		{tsubame.FrequencyHold, "b1", 0, true}, // held already: no second hold
		{tsubame.FrequencyHold, "b2", 0, true},
		{tsubame.FrequencyHold, "b3", 0, false},             // 2 held
		{tsubame.FrequencyTake, "", 0, false},               // holds count against a take too
		{tsubame.FrequencyRelease, "b2", time.Second, true}, // b2 lost
		{tsubame.FrequencyRelease, "b2", time.Second, false},
		{tsubame.FrequencyCount, "b1", time.Second, true},  // b1 won: held to counted, still 1
		{tsubame.FrequencyCount, "b1", time.Second, false}, // a repeat counts once
		{tsubame.FrequencyHold, "b1", time.Second, true},   // counted: a late hold changes nothing
		{tsubame.FrequencyHold, "b4", 2 * time.Second, true},
		{tsubame.FrequencyHold, "b5", 2 * time.Second, false}, // b1 counted, b4 held
		// b4's hold ends at 2s+1m by itself: one more fits.
		{tsubame.FrequencyHold, "b5", 2*time.Second + time.Minute, true},
		{tsubame.FrequencyHold, "b6", 2*time.Second + time.Minute, false},
		// A win past the cap is counted all the same (it was shown).
		{tsubame.FrequencyCount, "b4", 3 * time.Minute, true},
		{tsubame.FrequencyCount, "b5", 3 * time.Minute, true},
		{tsubame.FrequencyTake, "", 3 * time.Minute, false},
	} {
		if got := do(st.op, st.bid, st.at); got != st.want {
			t.Fatalf("step %d: %s %s at +%v = %v, want %v (entries %v)", i, st.op, st.bid, st.at, got, st.want, es)
		}
	}
	if holds := slices.IndexFunc(es, func(e tsubame.FrequencyEntry) bool { return e.Hold }); holds >= 0 {
		t.Fatalf("a hold kept after its bid was counted: %v", es)
	}
	if len(es) != 3 {
		t.Fatalf("entries %v, want the 3 impressions of b1, b4, b5", es)
	}
}

// A record checks any line item in memory, and Apply keeps it what the
// store holds.
func TestFrequencyRecord(t *testing.T) {
	caps := []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
	var rec tsubame.FrequencyRecord
	if !rec.Allows("li-1", caps, freqT0) {
		t.Fatal("an empty record refuses")
	}
	rec.Apply(&tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, LineItem: "li-1", Caps: caps, Bid: "b", Now: freqT0, Until: freqT0.Add(time.Second)})
	if rec.Allows("li-1", caps, freqT0) || !rec.Allows("li-2", caps, freqT0) || !rec.Allows("li-1", caps, freqT0.Add(time.Second)) {
		t.Fatalf("record %v: a hold of li-1 until +1s", rec)
	}
	l := rec.AddLine("li-2")
	l.Entries = append(l.Entries, tsubame.FrequencyEntry{At: freqT0.UnixMicro()})
	if rec.Allows("li-2", caps, freqT0.Add(time.Hour-time.Microsecond)) || !rec.Allows("li-2", caps, freqT0.Add(time.Hour)) {
		t.Fatal("an impression of li-2 counts for an hour")
	}
	rec.Read = true
	rec.Reset()
	if rec.Read || len(rec.Lines) != 0 || cap(rec.Lines) < 2 {
		t.Fatalf("after Reset: %+v", rec)
	}
	if l := rec.AddLine("li-3"); len(l.Entries) != 0 || cap(l.Entries) == 0 {
		t.Fatal("AddLine after Reset does not reuse the line's array")
	}
}

func TestFrequencyEntriesRoundTrip(t *testing.T) {
	es := []tsubame.FrequencyEntry{{At: 1_795_000_000_000_001}, {At: 1_795_000_000_000_002, ID: "01M8ABC"},
		{At: 1_795_000_060_000_000, Hold: true, ID: "b:1@x.y_z-9"}}
	b := tsubame.AppendFrequencyEntries(nil, es)
	if string(b) != "i1795000000000001 i1795000000000002/01M8ABC h1795000060000000/b:1@x.y_z-9" {
		t.Fatalf("stored form %q", b)
	}
	got, err := tsubame.ParseFrequencyEntries(nil, string(b))
	if err != nil || !slices.Equal(got, es) {
		t.Fatalf("parsed %v, %v; want %v", got, err, es)
	}
	for _, bad := range []string{"x1", "i", "iabc", "h12x/b"} {
		if _, err := tsubame.ParseFrequencyEntries(nil, bad); tsubame.ErrorCode(err) != tsubame.EINTERNAL {
			t.Errorf("%q parsed: %v", bad, err)
		}
	}
}
