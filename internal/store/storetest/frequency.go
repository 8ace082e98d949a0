package storetest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"tsubame"
)

// RunFrequency runs the FrequencyCounter part of the suite. open returns
// three handles on the same, empty data, as three nodes sharing the store
// would hold them (three connections to one Redis; a store of one process
// may return itself three times), and arranges for them to be closed when
// the test ends. Time moves by the Now each call passes, never by sleeping.
func RunFrequency(t *testing.T, open func(t *testing.T) (a, b, c tsubame.FrequencyCounter)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, fcs []tsubame.FrequencyCounter)
	}{
		{"CapOfThree", testFrequencyCap},
		{"TwoCapsTogether", testFrequencyTwoCaps},
		{"WindowSlides", testFrequencySlides},
		{"LaterTimesCount", testFrequencyLater},
		{"VisitorsAndLineItemsIndependent", testFrequencyIndependent},
		{"ReadReturnsEveryLineItem", testFrequencyRead},
		{"UpdateReadsInTheSameCall", testFrequencyUpdateReads},
		{"HoldCountRelease", testFrequencyHolds},
		{"HoldEndsByItself", testFrequencyHoldEnds},
		{"CancelEndsATake", testFrequencyCancel},
		{"RejectsInvalid", testFrequencyInvalid},
		{"CancelledNeverTrue", testFrequencyCancelled},
		{"ExactlyTheCapUnderRace", testFrequencyRace},
		{"HoldsExactlyTheCapUnderRace", testFrequencyHoldRace},
		{"KeepsItsOwnVisitorAndLineItem", testFrequencyOwnStrings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := open(t)
			tc.test(t, []tsubame.FrequencyCounter{a, b, c})
		})
	}
}

// The counter keeps its own copies of the ids it is given: a caller's
// strings may be views of a buffer it reuses for its next request (the
// bidder's decoded bid request), whose bytes change once the call is
// over. A visitor and a line item counted through such views are read
// back under their own ids, and the ids the buffer holds next have no
// record.
func testFrequencyOwnStrings(t *testing.T, fcs []tsubame.FrequencyCounter) {
	buf := []byte("u-own-1|li-own-1")
	visitor, line := unsafe.String(&buf[0], 7), unsafe.String(&buf[8], 8)
	cs := caps(2, time.Hour)
	if !take(t, fcs[0], visitor, line, cs, frequencyStart) {
		t.Fatal("the first impression was not taken")
	}
	copy(buf, "u-own-2|li-own-2") // the caller's next request
	for i, fc := range fcs {
		var rec tsubame.FrequencyRecord
		if err := fc.Read(ctx(t), "u-own-1", &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.Lines) != 1 || rec.Lines[0].LineItem != "li-own-1" || len(rec.Lines[0].Entries) != 1 {
			t.Fatalf("handle %d: u-own-1 reads %+v, want one impression of li-own-1", i, rec.Lines)
		}
		if err := fc.Read(ctx(t), "u-own-2", &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.Lines) != 0 {
			t.Fatalf("handle %d: u-own-2, never counted, reads %+v", i, rec.Lines)
		}
	}
	// The cap still counts the first impression: one more, then no more.
	if got := takes(t, fcs, "u-own-1", "li-own-1", cs, frequencyStart, frequencyStart); got != "10" {
		t.Fatalf("after the first impression: %s, want 10", got)
	}
	// A hold made with a view of its bid id ends by the id it was made
	// with, whatever the buffer holds by then.
	hb := []byte("bid-own-1")
	bid := unsafe.String(&hb[0], len(hb))
	if !update(t, fcs[0], tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-own-3", LineItem: "li-own-3", Bid: bid,
		Until: frequencyStart.Add(time.Minute), Caps: caps(1, time.Hour), Now: frequencyStart}) {
		t.Fatal("the hold was not made")
	}
	copy(hb, "bid-own-2")
	if !update(t, fcs[1], tsubame.FrequencyUpdate{Op: tsubame.FrequencyRelease, Visitor: "u-own-3", LineItem: "li-own-3", Bid: "bid-own-1",
		Caps: caps(1, time.Hour), Now: frequencyStart}) {
		t.Fatal("bid-own-1's hold was not found to release")
	}
	if !take(t, fcs[2], "u-own-3", "li-own-3", caps(1, time.Hour), frequencyStart) {
		t.Fatal("the cap of 1 is still held after its hold's release")
	}
}

// frequencyStart is the first now of the tests: any fixed time will do, as
// the windows are measured by the now of each call.
var frequencyStart = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// caps makes the caps of a line item: n impressions per window, each.
func caps(n int64, per time.Duration, more ...tsubame.FrequencyCap) []tsubame.FrequencyCap {
	return append([]tsubame.FrequencyCap{{Impressions: n, Per: tsubame.Duration(per)}}, more...)
}

func update(t *testing.T, fc tsubame.FrequencyCounter, u tsubame.FrequencyUpdate) bool {
	t.Helper()
	ok, err := fc.Update(ctx(t), &u, nil)
	if err != nil {
		t.Fatalf("Update(%+v): %v", u, err)
	}
	return ok
}

func take(t *testing.T, fc tsubame.FrequencyCounter, visitor, line string, cs []tsubame.FrequencyCap, now time.Time) bool {
	t.Helper()
	return update(t, fc, tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: visitor, LineItem: line, Caps: cs, Now: now})
}

// takes runs the takes in order, handle i%3 for the i-th, and returns
// their answers as a string of 1 (taken) and 0.
func takes(t *testing.T, fcs []tsubame.FrequencyCounter, visitor, line string, cs []tsubame.FrequencyCap, at ...time.Time) string {
	t.Helper()
	var b strings.Builder
	for i, now := range at {
		if take(t, fcs[i%len(fcs)], visitor, line, cs, now) {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

func read(t *testing.T, fc tsubame.FrequencyCounter, visitor string) *tsubame.FrequencyRecord {
	t.Helper()
	rec := &tsubame.FrequencyRecord{Failed: true, Lines: []tsubame.FrequencyLine{{LineItem: "stale"}}}
	if err := fc.Read(ctx(t), visitor, rec); err != nil {
		t.Fatalf("Read(%q): %v", visitor, err)
	}
	if !rec.Read || rec.Failed {
		t.Fatalf("Read(%q) left Read %v, Failed %v", visitor, rec.Read, rec.Failed)
	}
	return rec
}

// Ten takes at one instant, through three handles: exactly the first three
// are taken (two at the same instant both count).
func testFrequencyCap(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	if got := takes(t, fcs, "u-1", "li-1", cs, slices.Repeat([]time.Time{frequencyStart}, 10)...); got != "1110000000" {
		t.Fatalf("10 takes at one instant with a cap of 3 per hour: %s, want 1110000000", got)
	}
	// A minute later the hour still holds three.
	if take(t, fcs[2], "u-1", "li-1", cs, frequencyStart.Add(time.Minute)) {
		t.Fatal("a 4th impression taken within the hour")
	}
}

// Two caps hold together: 2 per second and 3 per hour.
func testFrequencyTwoCaps(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Second, tsubame.FrequencyCap{Impressions: 3, Per: tsubame.Duration(time.Hour)})
	t0 := frequencyStart
	for _, st := range []struct {
		at   []time.Time
		want string
		why  string
	}{
		{[]time.Time{t0, t0, t0}, "110", "2 per second"},
		{[]time.Time{t0.Add(999 * time.Millisecond)}, "0", "the second is not over"},
		{[]time.Time{t0.Add(time.Second), t0.Add(time.Second)}, "10", "the 3rd of the hour"},
		{[]time.Time{t0.Add(10 * time.Second), t0.Add(30 * time.Minute), t0.Add(time.Hour - time.Microsecond)}, "000", "3 per hour"},
		// At t0+1h the two of t0 leave the hour; the one of t0+1s stays.
		{[]time.Time{t0.Add(time.Hour), t0.Add(time.Hour), t0.Add(time.Hour)}, "110", "2 per second, 3 per hour"},
		{[]time.Time{t0.Add(time.Hour + time.Second)}, "1", "t0+1s left the hour"},
		{[]time.Time{t0.Add(time.Hour + 2*time.Second)}, "0", "3 per hour"},
	} {
		if got := takes(t, fcs, "u-1", "li-2", cs, st.at...); got != st.want {
			t.Fatalf("at %v: %s, want %s (%s)", st.at, got, st.want, st.why)
		}
	}
}

// The window slides: an impression leaves it exactly one window after it
// was taken, and fixed hourly buckets would let 3 at 0:59 and 3 at 1:00
// through where a sliding hour lets 3.
func testFrequencySlides(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	t0 := frequencyStart
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, st := range []struct {
		at   []time.Time
		want string
	}{
		{[]time.Time{at(59 * time.Minute), at(59 * time.Minute), at(59*time.Minute + 30*time.Second)}, "111"},
		{[]time.Time{at(time.Hour), at(time.Hour), at(time.Hour + time.Minute), at(time.Hour + 58*time.Minute)}, "0000"},
		{[]time.Time{at(time.Hour + 59*time.Minute - time.Microsecond)}, "0"},
		// The two of 0:59 leave at 1:59: two more, not three.
		{[]time.Time{at(time.Hour + 59*time.Minute), at(time.Hour + 59*time.Minute), at(time.Hour + 59*time.Minute)}, "110"},
		{[]time.Time{at(time.Hour + 59*time.Minute + 30*time.Second)}, "1"},
		// Long after, the line item starts afresh.
		{[]time.Time{at(48 * time.Hour), at(48 * time.Hour), at(48 * time.Hour), at(48 * time.Hour)}, "1110"},
	} {
		if got := takes(t, fcs, "u-1", "li-3", cs, st.at...); got != st.want {
			t.Fatalf("at %v: %s, want %s", st.at, got, st.want)
		}
	}
}

// An impression recorded at a later time than a call's now counts against
// it: a node whose clock is behind cannot pass a cap another has filled.
func testFrequencyLater(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Minute)
	t0 := frequencyStart
	if got := takes(t, fcs, "u-1", "li-4", cs, t0.Add(10*time.Millisecond), t0.Add(20*time.Millisecond), t0); got != "110" {
		t.Fatalf("a take behind two later impressions: %s, want 110", got)
	}
}

// Every visitor and line item counts apart, whatever their bytes.
func testFrequencyIndependent(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(1, time.Hour)
	long := strings.Repeat("v", tsubame.MaxObjectIDLength)
	pairs := [][2]string{{"u-1", "li-1"}, {"u-2", "li-1"}, {"u-1", "li-2"}, {"u-1x", "li-1"}, {"u-1", "li-1x"},
		{"U-1", "LI-1"}, {"a", "b"}, {"{tag}", "b"}, {"u 1/\n", "li-1"}, {"li-1/u-1", "li-1"}, {long, strings.Repeat("l", tsubame.MaxObjectIDLength)}}
	for i, p := range pairs {
		if !take(t, fcs[i%3], p[0], p[1], cs, frequencyStart) {
			t.Fatalf("%q refused: it shares a count with another pair", p)
		}
	}
	for i, p := range pairs {
		if take(t, fcs[(i+1)%3], p[0], p[1], cs, frequencyStart.Add(time.Minute)) {
			t.Fatalf("%q taken twice within its cap of 1 per hour", p)
		}
	}
}

// One Read returns every line item counted for a visitor, through any
// handle, and only theirs; a visitor never counted reads as no lines.
func testFrequencyRead(t *testing.T, fcs []tsubame.FrequencyCounter) {
	hour := caps(5, time.Hour)
	t0 := frequencyStart
	for i := range 10 {
		line := "li-" + strconv.Itoa(i)
		for j := range i % 3 {
			if !take(t, fcs[j%3], "u-read", line, hour, t0.Add(time.Duration(j)*time.Second)) {
				t.Fatalf("%s: take %d refused", line, j)
			}
		}
	}
	if !update(t, fcs[1], tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-read", LineItem: "li-0", Caps: hour,
		Bid: "bid-0", Now: t0, Until: t0.Add(time.Minute)}) {
		t.Fatal("hold refused")
	}
	take(t, fcs[0], "u-other", "li-1", hour, t0)
	rec := read(t, fcs[2], "u-read")
	got := map[string]string{}
	for _, l := range rec.Lines {
		if _, dup := got[l.LineItem]; dup {
			t.Fatalf("line item %s twice in %+v", l.LineItem, rec)
		}
		got[l.LineItem] = string(tsubame.AppendFrequencyEntries(nil, l.Entries))
	}
	want := map[string]string{"li-0": fmt.Sprintf("h%d/bid-0", t0.Add(time.Minute).UnixMicro())}
	for i := range 10 {
		var es []tsubame.FrequencyEntry
		for j := range i % 3 {
			es = append(es, tsubame.FrequencyEntry{At: t0.Add(time.Duration(j) * time.Second).UnixMicro()})
		}
		if len(es) > 0 {
			want["li-"+strconv.Itoa(i)] = string(tsubame.AppendFrequencyEntries(nil, es))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Read: %v\nwant %v", got, want)
	}
	if !rec.Allows("li-1", hour, t0) || rec.Allows("li-2", caps(2, time.Hour), t0) || rec.Allows("li-0", caps(1, time.Hour), t0) {
		t.Fatalf("the record read checks wrongly: %+v", rec)
	}
	if rec := read(t, fcs[0], "u-never"); len(rec.Lines) != 0 {
		t.Fatalf("a visitor never counted reads %+v", rec)
	}
}

// An Update given a record fills it with the visitor's record after the
// update, in the same call, taken or not.
func testFrequencyUpdateReads(t *testing.T, fcs []tsubame.FrequencyCounter) {
	one := caps(1, time.Hour)
	t0 := frequencyStart
	take(t, fcs[0], "u-ur", "li-a", one, t0)
	for i, want := range []bool{true, false} {
		rec := &tsubame.FrequencyRecord{Lines: []tsubame.FrequencyLine{{LineItem: "stale"}}}
		u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "u-ur", LineItem: "li-b", Caps: one, Bid: "d-" + strconv.Itoa(i), Now: t0}
		ok, err := fcs[i+1].Update(ctx(t), &u, rec)
		if err != nil || ok != want {
			t.Fatalf("take %d: %v, %v; want %v", i, ok, err, want)
		}
		if !rec.Read || len(rec.Lines) != 2 || rec.Allows("li-a", one, t0) || rec.Allows("li-b", one, t0) ||
			len(rec.Entries("li-b")) != 1 || rec.Entries("li-b")[0] != (tsubame.FrequencyEntry{At: t0.UnixMicro(), ID: "d-0"}) {
			t.Fatalf("take %d filled %+v; want li-a's and li-b's impression of d-0", i, rec)
		}
	}
}

// Holds count against the cap until counted, released or ended; a count
// is once per bid, past the cap too; every step through another handle.
func testFrequencyHolds(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Hour)
	t0 := frequencyStart
	for i, st := range []struct {
		op   tsubame.FrequencyOp
		bid  string
		at   time.Duration
		want bool
	}{
		{tsubame.FrequencyHold, "b1", 0, true},
		{tsubame.FrequencyHold, "b1", 0, true},
		{tsubame.FrequencyHold, "b2", 0, true},
		{tsubame.FrequencyHold, "b3", 0, false},
		{tsubame.FrequencyTake, "d1", 0, false},
		{tsubame.FrequencyRelease, "b2", time.Second, true},
		{tsubame.FrequencyRelease, "b2", time.Second, false},
		{tsubame.FrequencyCount, "b1", time.Second, true},
		{tsubame.FrequencyCount, "b1", time.Second, false},
		{tsubame.FrequencyHold, "b3", 2 * time.Second, true},
		{tsubame.FrequencyHold, "b4", 2 * time.Second, false},
		{tsubame.FrequencyCount, "b3", 3 * time.Second, true},
		{tsubame.FrequencyCount, "b9", 3 * time.Second, true}, // a win never held (its hold ended): counted, past the cap
		{tsubame.FrequencyRelease, "b9", 3 * time.Second, false},
		{tsubame.FrequencyTake, "d2", 4 * time.Second, false},
	} {
		u := tsubame.FrequencyUpdate{Op: st.op, Visitor: "u-h", LineItem: "li-h", Caps: cs, Bid: st.bid, Now: t0.Add(st.at),
			Until: t0.Add(st.at + time.Minute)}
		if got := update(t, fcs[i%3], u); got != st.want {
			t.Fatalf("step %d: %s of %s at +%v = %v, want %v", i, st.op, st.bid, st.at, got, st.want)
		}
	}
	es := read(t, fcs[0], "u-h").Entries("li-h")
	var ids []string
	for _, e := range es {
		if e.Hold {
			t.Fatalf("a hold left: %v", es)
		}
		ids = append(ids, e.ID)
	}
	if !slices.Equal(ids, []string{"b1", "b3", "b9"}) {
		t.Fatalf("impressions of %v, want b1, b3 and b9", ids)
	}
}

// A cancel ends the impression of its take, and only that one: not an
// impression of another decision, of another line item or visitor, nor a
// hold of the same id; a cancel of a take never made, or cancelled before,
// changes nothing. Each step goes through another handle.
func testFrequencyCancel(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Hour)
	t0 := frequencyStart
	for i, st := range []struct {
		op        tsubame.FrequencyOp
		line, bid string
		at        time.Duration
		want      bool
	}{
		{tsubame.FrequencyTake, "li-x", "d1", 0, true},
		{tsubame.FrequencyTake, "li-x", "d2", time.Second, true},
		{tsubame.FrequencyTake, "li-y", "d2", time.Second, true},
		{tsubame.FrequencyTake, "li-x", "d3", 2 * time.Second, false},
		{tsubame.FrequencyCancel, "li-x", "d2", time.Second, true}, // at its take's time
		{tsubame.FrequencyCancel, "li-x", "d2", 3 * time.Second, false},
		{tsubame.FrequencyCancel, "li-x", "d9", 3 * time.Second, false},
		{tsubame.FrequencyTake, "li-x", "d3", 4 * time.Second, true},
		{tsubame.FrequencyTake, "li-x", "d4", 4 * time.Second, false},
		{tsubame.FrequencyHold, "li-z", "d5", 5 * time.Second, true},
		{tsubame.FrequencyCancel, "li-z", "d5", 5 * time.Second, false}, // a hold is released, not cancelled
		{tsubame.FrequencyTake, "li-z", "d6", 6 * time.Second, true},
		{tsubame.FrequencyCancel, "li-z", "d6", 6 * time.Second, true},
		{tsubame.FrequencyRelease, "li-z", "d5", 7 * time.Second, true},
	} {
		u := tsubame.FrequencyUpdate{Op: st.op, Visitor: "u-x", LineItem: st.line, Caps: cs, Bid: st.bid, Now: t0.Add(st.at),
			Until: t0.Add(st.at + time.Minute)}
		if got := update(t, fcs[i%3], u); got != st.want {
			t.Fatalf("step %d: %s of %s's %s at +%v = %v, want %v", i, st.op, st.line, st.bid, st.at, got, st.want)
		}
	}
	rec := read(t, fcs[0], "u-x")
	ids := func(line string) (ids []string) {
		for _, e := range rec.Entries(line) {
			ids = append(ids, e.ID)
		}
		return ids
	}
	if x, y := ids("li-x"), ids("li-y"); !slices.Equal(x, []string{"d1", "d3"}) || !slices.Equal(y, []string{"d2"}) {
		t.Fatalf("li-x's impressions %v, li-y's %v; want d1 and d3, d2", x, y)
	}
	if z := rec.Entries("li-z"); len(z) != 0 || len(rec.Lines) != 2 {
		t.Fatalf("li-z's entries %v (of %d lines) after its take was cancelled and its hold released; want none", z, len(rec.Lines))
	}
	// Another visitor's impression of the same id is untouched by a cancel
	// of u-x's.
	if !update(t, fcs[1], tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "u-x2", LineItem: "li-x", Caps: cs, Bid: "d1", Now: t0}) {
		t.Fatal("another visitor's take refused")
	}
	if !update(t, fcs[2], tsubame.FrequencyUpdate{Op: tsubame.FrequencyCancel, Visitor: "u-x", LineItem: "li-x", Caps: cs, Bid: "d1", Now: t0}) {
		t.Fatal("u-x's take of d1 not cancelled")
	}
	if e := read(t, fcs[0], "u-x2").Entries("li-x"); len(e) != 1 || e[0].ID != "d1" {
		t.Fatalf("u-x2's impressions %v, want its d1", e)
	}
	if e := read(t, fcs[0], "u-x").Entries("li-x"); len(e) != 1 || e[0].ID != "d3" {
		t.Fatalf("u-x's impressions %v, want d3 alone", e)
	}
}

// A hold nobody ends stops counting at its Until.
func testFrequencyHoldEnds(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(1, time.Hour)
	t0 := frequencyStart
	hold := func(fc tsubame.FrequencyCounter, bid string, at time.Time) bool {
		return update(t, fc, tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-e", LineItem: "li-e", Caps: cs, Bid: bid,
			Now: at, Until: at.Add(10 * time.Second)})
	}
	if !hold(fcs[0], "b1", t0) || hold(fcs[1], "b2", t0.Add(10*time.Second-time.Microsecond)) || !hold(fcs[2], "b2", t0.Add(10*time.Second)) {
		t.Fatal("a hold of 10 s: not held, or not ended at its end")
	}
	if !take(t, fcs[0], "u-e", "li-e", cs, t0.Add(20*time.Second)) {
		t.Fatal("a take after both holds ended refused")
	}
}

func testFrequencyInvalid(t *testing.T, fcs []tsubame.FrequencyCounter) {
	hour := caps(1, time.Hour)
	valid := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "u", LineItem: "li", Caps: hour, Now: frequencyStart}
	for _, change := range []func(u *tsubame.FrequencyUpdate){
		func(u *tsubame.FrequencyUpdate) { u.Visitor = "" },
		func(u *tsubame.FrequencyUpdate) { u.Visitor = strings.Repeat("v", tsubame.MaxObjectIDLength+1) },
		func(u *tsubame.FrequencyUpdate) { u.LineItem = "li/1" },
		func(u *tsubame.FrequencyUpdate) { u.Caps = nil },
		func(u *tsubame.FrequencyUpdate) { u.Caps = slices.Repeat(hour, tsubame.MaxFrequencyCaps+1) },
		func(u *tsubame.FrequencyUpdate) { u.Caps = caps(0, time.Hour) },
		func(u *tsubame.FrequencyUpdate) { u.Caps = caps(1, time.Duration(0)) },
		func(u *tsubame.FrequencyUpdate) { u.Caps = caps(1, tsubame.MaxFrequencyWindow+time.Second) },
		func(u *tsubame.FrequencyUpdate) { u.Op = tsubame.FrequencyHold }, // no bid, no end
		func(u *tsubame.FrequencyUpdate) { u.Op, u.Bid = tsubame.FrequencyCount, "b 1" },
		func(u *tsubame.FrequencyUpdate) { u.Op = tsubame.FrequencyCancel }, // no bid
		func(u *tsubame.FrequencyUpdate) { u.Op = tsubame.FrequencyCancel + 1 },
	} {
		u := valid
		change(&u)
		rec := &tsubame.FrequencyRecord{}
		ok, err := fcs[0].Update(ctx(t), &u, rec)
		if ok || tsubame.ErrorCode(err) != tsubame.EINVALID || rec.Read {
			t.Fatalf("Update(%+v) = %v, %v (record read %v); want false and an EINVALID error", u, ok, err, rec.Read)
		}
	}
	for _, v := range []string{"", strings.Repeat("v", tsubame.MaxObjectIDLength+1)} {
		if err := fcs[1].Read(ctx(t), v, &tsubame.FrequencyRecord{}); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Fatalf("Read of a %d-byte visitor: %v; want an EINVALID error", len(v), err)
		}
	}
	// Refused calls recorded nothing.
	if !take(t, fcs[1], "u", "li", hour, frequencyStart) {
		t.Fatal("a refused call was recorded")
	}
}

func testFrequencyCancelled(t *testing.T, fcs []tsubame.FrequencyCounter) {
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	cs := caps(1, time.Hour)
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "cancelled", LineItem: "li", Caps: cs, Now: frequencyStart}
	if ok, err := fcs[0].Update(c, &u, nil); ok || err == nil {
		t.Fatalf("Update with a cancelled context = %v, %v; want false and an error", ok, err)
	}
	if err := fcs[0].Read(c, "cancelled", &tsubame.FrequencyRecord{}); err == nil {
		t.Fatal("Read with a cancelled context answered")
	}
	// Whether it was recorded is not said; the store still answers.
	if !take(t, fcs[1], "after-cancel", "li", cs, frequencyStart) {
		t.Fatal("first impression of a visitor refused")
	}
}

// raceVisitors has 8 goroutines on each of the three handles make 10
// calls for each of 40 visitors, all from one start and in the same order,
// so that every visitor is asked about by 24 callers at about the same
// moment (at three instants a millisecond apart); call makes one and
// reports whether it passed. It returns what passed per visitor.
func raceVisitors(t *testing.T, fcs []tsubame.FrequencyCounter, call func(fc tsubame.FrequencyCounter, g, v, try int, now time.Time) (bool, error)) []int {
	const visitors, perHandle, tries = 40, 8, 10
	var passed [visitors]atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 * perHandle {
		fc := fcs[g%3]
		now := frequencyStart.Add(time.Duration(g%3) * time.Millisecond)
		wg.Go(func() {
			<-start
			for v := range visitors {
				for try := range tries {
					ok, err := call(fc, g, v, try, now)
					if err != nil {
						t.Errorf("goroutine %d, visitor %d: %v", g, v, err)
						return
					}
					if ok {
						passed[v].Add(1)
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	out := make([]int, visitors)
	for v := range passed {
		out[v] = int(passed[v].Load())
	}
	return out
}

func wantEach(t *testing.T, what string, got []int, want int) {
	t.Helper()
	var wrong []string
	for v, n := range got {
		if n != want {
			wrong = append(wrong, fmt.Sprintf("visitor %d: %d", v, n))
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%s, want exactly %d each: %s", what, want, strings.Join(wrong[:min(10, len(wrong))], "; "))
	}
}

// A cap of 3 per hour lets exactly 3 takes through for every visitor under
// 240 racing calls each, never 4.
func testFrequencyRace(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	got := raceVisitors(t, fcs, func(fc tsubame.FrequencyCounter, _, v, _ int, now time.Time) (bool, error) {
		u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "u-" + strconv.Itoa(v), LineItem: "li-race", Caps: cs, Now: now}
		return fc.Update(ctx(t), &u, nil)
	})
	if !t.Failed() {
		wantEach(t, "takes with a cap of 3", got, 3)
	}
}

// Holds of distinct bids and takes race for one cap of 3: exactly 3 pass
// per visitor; then counting every bid held counts exactly those.
func testFrequencyHoldRace(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	var mu sync.Mutex
	held := map[int][]string{}
	got := raceVisitors(t, fcs, func(fc tsubame.FrequencyCounter, g, v, try int, now time.Time) (bool, error) {
		u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-" + strconv.Itoa(v), LineItem: "li-hrace", Caps: cs,
			Bid: fmt.Sprintf("b-%d-%d", g, try), Now: now, Until: now.Add(time.Minute)}
		if try%4 == 3 {
			u.Op, u.Until = tsubame.FrequencyTake, time.Time{}
		}
		ok, err := fc.Update(ctx(t), &u, nil)
		if ok && u.Op == tsubame.FrequencyHold {
			mu.Lock()
			held[v] = append(held[v], u.Bid)
			mu.Unlock()
		}
		return ok, err
	})
	if t.Failed() {
		return
	}
	wantEach(t, "holds and takes with a cap of 3", got, 3)
	for v, bids := range held {
		for i, bid := range bids {
			u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyCount, Visitor: "u-" + strconv.Itoa(v), LineItem: "li-hrace", Caps: cs,
				Bid: bid, Now: frequencyStart.Add(time.Second)}
			if !update(t, fcs[i%3], u) {
				t.Fatalf("visitor %d: the count of held bid %s answered a repeat", v, bid)
			}
		}
		rec := read(t, fcs[v%3], "u-"+strconv.Itoa(v))
		for _, e := range rec.Entries("li-hrace") {
			if e.Hold {
				t.Fatalf("visitor %d: a hold left after every held bid was counted: %v", v, rec.Entries("li-hrace"))
			}
		}
		if n := len(rec.Entries("li-hrace")); n != 3 {
			t.Fatalf("visitor %d: %d impressions, want 3", v, n)
		}
	}
}

// BenchTake measures a take through fc.Update from parallelism goroutines
// per CPU (b.SetParallelism) with a cap of 3 per hour: "taken" for
// visitors never seen (a write each), "refused" for visitors already at
// their cap; and "read", a visitor's record of three line items. The
// visitors are built per call in "taken", which costs the benchmark one
// allocation of its own per op.
func BenchTake(b *testing.B, fc tsubame.FrequencyCounter, parallelism int) {
	bctx := context.Background()
	cs := caps(3, time.Hour)
	b.Run("taken", func(b *testing.B) {
		benchFresh(b, parallelism, "bench-%d-%d-", func(visitor string) (bool, error) {
			u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: visitor, LineItem: "li", Caps: cs, Now: time.Now()}
			return fc.Update(bctx, &u, nil)
		})
	})
	visitors := make([]string, 1024)
	now := time.Now()
	var wg sync.WaitGroup // concurrent, so that a store that batches writes fills them fast
	for i := range visitors {
		visitors[i] = fmt.Sprintf("bench-full-%d-%d", now.UnixNano(), i)
		wg.Go(func() {
			for k := range 3 {
				for range 3 {
					u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: visitors[i], LineItem: "li-" + strconv.Itoa(k), Caps: cs, Now: now}
					if _, err := fc.Update(bctx, &u, nil); err != nil {
						b.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	b.Run("refused", func(b *testing.B) {
		var goroutine atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(goroutine.Add(1)) * 97
			u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, LineItem: "li-0", Caps: cs}
			for ; pb.Next(); i++ {
				u.Visitor, u.Now = visitors[i%len(visitors)], time.Now()
				if ok, err := fc.Update(bctx, &u, nil); err != nil || ok {
					b.Errorf("take for %s = %v, %v; want false", u.Visitor, ok, err)
					return
				}
			}
		})
	})
	b.Run("read", func(b *testing.B) {
		var goroutine atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(goroutine.Add(1)) * 97
			var rec tsubame.FrequencyRecord
			for ; pb.Next(); i++ {
				rec.Reset()
				if err := fc.Read(bctx, visitors[i%len(visitors)], &rec); err != nil || len(rec.Lines) != 3 {
					b.Errorf("read of %s = %+v, %v; want 3 line items", visitors[i%len(visitors)], rec, err)
					return
				}
			}
		})
	})
}
