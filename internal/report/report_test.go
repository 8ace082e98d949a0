package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"tsubame"
	"tsubame/internal/accesslog"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// trafficKinds is how many lines traffic's round of kinds takes: one of
// them is a decision.
const trafficKinds = 19

// event is one line of generated traffic and what the reports must count
// for it, written out by hand (not by classify).
type event struct {
	rec  accesslog.Record
	li   string
	cur  string
	want Counts
}

// traffic makes n lines over three line items, one every 7 seconds from
// start: each kind of event, valid and not, late, in two currencies, a
// request's own line, refused tracking requests, and an ad request's
// request line (no line item: its slots are counted). An auction's loss
// notice carries a clearing price above the bid's (why it lost): never
// spend.
func traffic(n int, start time.Time) []event {
	out := make([]event, 0, n)
	for i := range n {
		li := fmt.Sprintf("li-%d", i%3)
		ev := event{li: li, cur: "USD"}
		e := &accesslog.Event{ID: accesslog.String(fmt.Sprintf("e-%d", i)), Decision: accesslog.String(fmt.Sprintf("d-%d", i)),
			LineItem: accesslog.String(li), Campaign: accesslog.String("c-1"), Creative: accesslog.String("cr-" + li),
			Placement: accesslog.String("p-1"), Currency: accesslog.String("USD"), Valid: true}
		switch i % trafficKinds {
		case 0:
			e.Kind, e.Price = accesslog.EventDecision, 2_500_000
			ev.want[Decisions] = 1
		case 1:
			e.Kind, e.Price = accesslog.EventImp, 2_500_000
			ev.want[Impressions], ev.want[Spend] = 1, 2_500_000
		case 2:
			e.Kind, e.Price, e.Valid = accesslog.EventImp, 2_500_000, false
			e.AddText(accesslog.MustKey("reason"), accesslog.String("repeat"))
			ev.want[InvalidImpressions] = 1
		case 3:
			e.Kind, e.Price = accesslog.EventImp, 2_500_001
			e.AddBool(accesslog.MustKey("late"), true)
			ev.want[Overage], ev.want[OverageSpend] = 1, 2_500_001
		case 4:
			e.Kind = accesslog.EventClick
			ev.want[Clicks] = 1
		case 5:
			e.Kind, e.Valid = accesslog.EventClick, false
			ev.want[InvalidClicks] = 1
		case 6:
			e.Kind, e.Price, e.Currency = accesslog.EventBid, 1_234_567, accesslog.String("EUR")
			ev.cur, ev.want[Bids] = "EUR", 1
		case 7:
			e.Kind, e.Price, e.Currency = accesslog.EventBill, 1_234_567, accesslog.String("EUR")
			ev.cur, ev.want[Bills], ev.want[Impressions], ev.want[Spend] = "EUR", 1, 1, 1_234_567
		case 8:
			e.Kind, e.Price, e.Currency, e.Valid = accesslog.EventBill, 1_234_567, accesslog.String("EUR"), false
			ev.cur, ev.want[InvalidBills] = "EUR", 1
		case 9:
			e.Kind, e.Price, e.Currency = accesslog.EventWin, 1_000_000, accesslog.String("EUR")
			ev.cur, ev.want[Wins] = "EUR", 1
		case 10:
			e = nil // a request's own line: counts nothing
			ev.li, ev.cur = "", ""
			ev.rec = accesslog.Record{Method: []byte("GET"), Path: []byte("/api/decide"), Endpoint: "decide", Status: 200}
		case 11:
			e = nil // a tampered impression URL: refused, counted without dimensions
			ev.li, ev.cur = "", ""
			ev.rec = accesslog.Record{Method: []byte("GET"), Path: []byte("/imp?t=forged"), Endpoint: "track_imp", Status: 400}
			ev.want[Rejected] = 1
		case 12:
			e.Kind, e.Price, e.Currency = accesslog.EventLoss, 1_000_000, accesslog.String("EUR")
			e.AddInt(accesslog.MustKey("clearing"), 1_750_000)
			ev.cur, ev.want[Losses] = "EUR", 1
		case 13:
			e.Kind, e.Price, e.Currency, e.Valid = accesslog.EventLoss, 1_000_000, accesslog.String("EUR"), false
			e.AddText(accesslog.MustKey("reason"), accesslog.String("repeat"))
			ev.cur, ev.want[InvalidLosses] = "EUR", 1
		case 14:
			e.Kind, e.Price, e.Currency, e.Valid = accesslog.EventWin, 1_000_000, accesslog.String("EUR"), false
			e.AddText(accesslog.MustKey("reason"), accesslog.String("repeat"))
			ev.cur, ev.want[InvalidWins] = "EUR", 1
		case 15:
			e.Kind, e.Price = accesslog.EventBidImp, 4_500_000
			ev.want[BidImps] = 1
		case 16:
			e.Kind, e.Price, e.Valid = accesslog.EventBidImp, 4_500_000, false
			e.AddText(accesslog.MustKey("reason"), accesslog.String("crawler"))
			ev.want[InvalidImpressions] = 1
		case 17:
			e = nil // a tampered markup impression URL
			ev.li, ev.cur = "", ""
			ev.rec = accesslog.Record{Method: []byte("GET"), Path: []byte("/t/bi/forged"), Endpoint: "rtb_bid_imp", Status: 400}
			ev.want[Rejected] = 1
		case 18:
			e.Kind, e.Decision, e.LineItem, e.Campaign, e.Creative = accesslog.EventRequest, accesslog.Text{}, accesslog.Text{}, accesslog.Text{}, accesslog.Text{}
			e.AddOrigin("", "news.example.com", "JP", "mobile")
			e.AddInt(accesslog.MustKey("slots"), 3)
			e.AddInt(accesslog.MustKey("filled"), 1)
			ev.li, ev.want[Requests] = "", 3
		}
		if e != nil && e.Kind != accesslog.EventRequest {
			e.AddOrigin("adv-1", "news.example.com", "JP", "mobile")
		}
		ev.rec.Time = start.Add(time.Duration(i) * 7 * time.Second)
		ev.rec.Remote = netip.MustParseAddr("192.0.2.1")
		ev.rec.RequestID = []byte(fmt.Sprintf("r-%d", i))
		ev.rec.Event = e
		out = append(out, ev)
	}
	return out
}

// want sums what evs must count, by line item and currency.
func want(evs []event) map[[2]string]Counts {
	out := map[[2]string]Counts{}
	for _, ev := range evs {
		if ev.want.IsZero() {
			continue
		}
		k := [2]string{ev.li, ev.cur}
		c := out[k]
		c.Add(&ev.want)
		out[k] = c
	}
	return out
}

// writeLog appends evs to the access log in dir with the buffered writer
// (which keeps each record's time), 150 at a time, each run closing its
// file as a server's stop does: a closed file each.
func writeLog(t testing.TB, dir string, format accesslog.Format, gz bool, evs []event) {
	t.Helper()
	writeLogFiles(t, dir, format, gz, evs, 150)
}

// writeLogFiles is writeLog with perFile lines to a file.
func writeLogFiles(t testing.TB, dir string, format accesslog.Format, gz bool, evs []event, perFile int) {
	t.Helper()
	for len(evs) > 0 {
		n := min(len(evs), perFile)
		fs, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir, Gzip: gz, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		l := accesslog.New(fs, accesslog.Options{Format: format, Logger: quiet})
		for i := range evs[:n] {
			if err := l.Append(&evs[i].rec, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		evs = evs[n:]
	}
}

func openRoller(t *testing.T, dir string, edit func(*Options)) *Roller {
	t.Helper()
	// The logs are of t0's day: the compaction's clock is a day later, so
	// that their minute rows are kept whatever today's date.
	opt := Options{Dir: dir, Name: "access.log", Path: filepath.Join(t.TempDir(), FileName), Logger: quiet, Interval: 5 * time.Millisecond,
		CommitEvery: 10 * time.Millisecond, Now: func() time.Time { return t0.Add(24 * time.Hour) }}
	if edit != nil {
		edit(&opt)
	}
	r, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// byLineItem queries rows by line item (and currency).
func byLineItem(t *testing.T, r *Roller, q Query) map[[2]string]Counts {
	t.Helper()
	q.By = []string{"line_item"}
	res, err := r.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]Counts{}
	for _, row := range res.Rows {
		k := [2]string{row.Dims[DimLineItem], row.Dims[DimCurrency]}
		if _, dup := out[k]; dup {
			t.Fatalf("row %v twice", k)
		}
		out[k] = row.Counts
	}
	return out
}

func equalCounts(t *testing.T, what string, got, want map[[2]string]Counts) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s %v:\n got %v\nwant %v", what, k, got[k], w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected row %v: %v", what, k, g)
		}
	}
}

// Every kind of line is counted as docs/reports.md says, in both formats,
// from closed, compressed and active files; the recount agrees.
func TestRollupCountsEveryLine(t *testing.T) {
	for _, format := range []accesslog.Format{accesslog.LTSV, accesslog.JSON} {
		for _, gz := range []bool{false, true} {
			t.Run(fmt.Sprintf("format=%d,gzip=%v", format, gz), func(t *testing.T) {
				dir := t.TempDir()
				evs := traffic(1200, t0)
				writeLog(t, dir, format, gz, evs)
				if names, _ := accesslog.ClosedFiles(dir, "access.log", false); len(names) < 3 {
					t.Fatalf("only %d closed files: the test must read several", len(names))
				}
				r := openRoller(t, dir, nil)
				if err := r.CatchUp(context.Background()); err != nil {
					t.Fatal(err)
				}
				if st := r.Stats(); st.Lines != int64(len(evs)) || st.Errors != 0 {
					t.Fatalf("read %+v, want %d lines and no error", st, len(evs))
				}
				equalCounts(t, "by line item", byLineItem(t, r, Query{}), want(evs))
				v, err := r.Verify(Query{})
				if err != nil {
					t.Fatal(err)
				}
				if !v.OK() || v.Lines != int64(len(evs)) || v.Narrowed != "" {
					t.Fatalf("verify: %+v", v)
				}
				// Another pass finds nothing new and changes nothing.
				if n, err := r.Pass(); n != 0 || err != nil {
					t.Fatalf("a second pass read %d lines (%v)", n, err)
				}
			})
		}
	}
}

// Stopping at any point and starting again neither loses nor repeats a
// line: the position is committed with the counts it belongs to.
func TestRollupResumes(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), FileName)
	evs := traffic(1500, t0)
	writeLog(t, dir, accesslog.LTSV, true, evs[:700])
	r := openRoller(t, dir, func(o *Options) { o.Path = db })
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	writeLog(t, dir, accesslog.LTSV, true, evs[700:]) // the next run of the server
	r = openRoller(t, dir, func(o *Options) { o.Path = db })
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "after a restart", byLineItem(t, r, Query{}), want(evs))
	if v, err := r.Verify(Query{}); err != nil || !v.OK() {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// While the mapped writer appends from several goroutines and rotates,
// compresses and removes files, the roller reads along; retention keeps
// every file until it is rolled up, so the totals are exact.
func TestRollupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	r := openRoller(t, dir, nil)
	fo := accesslog.FileOptions{Dir: dir, MaxSize: 32 << 10, Gzip: true, KeepFiles: 1, Hold: r.Hold, Logger: quiet}
	l, _, err := accesslog.OpenMapped(fo, accesslog.Options{Format: accesslog.JSON, Logger: quiet})
	if err != nil {
		t.Skipf("no mapped access log on this platform: %v", err)
	}
	r.Start()
	evs := traffic(4000, t0)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(evs); i += 4 {
				rec := evs[i].rec
				rec.Time = time.Time{} // now: the mapped writer stamps its own clock
				if err := l.Append(&rec, uint64(w)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for r.Stats().Lines < int64(len(evs)) {
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				fi, _ := e.Info()
				t.Logf("file %s %d", e.Name(), fi.Size())
			}
			for k, f := range r.fileStates() {
				t.Logf("state %s %+v", k, *f)
			}
			t.Fatalf("rolled up %+v of %d lines", r.Stats(), len(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Lines != int64(len(evs)) {
		t.Fatalf("read %d lines, want %d", st.Lines, len(evs))
	}
	equalCounts(t, "while writing", byLineItem(t, r, Query{}), want(evs))
}

// A closed file is held until it is rolled up to its end.
func TestHold(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, accesslog.LTSV, false, traffic(600, t0))
	names, _ := accesslog.ClosedFiles(dir, "access.log", false)
	r := openRoller(t, dir, nil)
	for _, n := range names {
		if !r.Hold(n) {
			t.Fatalf("%s released before it was read", n)
		}
	}
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if r.Hold(n) {
			t.Fatalf("%s held after it was read", n)
		}
	}
}

// Rows older than the minutes window become quarter-hours: totals stay,
// bounds inside a quarter are refused, and a minute report shows quarters.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	// 72 hours before the roller's clock (t0 and a day), not the
	// machine's: a start that moved with the machine's clock passed the
	// compaction bound one day and failed from then on.
	start := t0.Add(24*time.Hour - 72*time.Hour)
	evs := traffic(900, start)
	writeLog(t, dir, accesslog.LTSV, false, evs)
	r := openRoller(t, dir, func(o *Options) { o.Minutes = time.Hour })
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "compacted", byLineItem(t, r, Query{}), want(evs))
	res, err := r.Query(Query{By: []string{ByMinute}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Compacted.IsZero() || len(res.Rows) == 0 {
		t.Fatalf("nothing compacted: %+v", res.Compacted)
	}
	for _, row := range res.Rows {
		if row.Time.Unix()%900 != 0 {
			t.Fatalf("a compacted row at %v, not a quarter-hour", row.Time)
		}
	}
	if _, err := r.Query(Query{From: start.Add(5 * time.Minute)}); err == nil || !strings.Contains(err.Error(), "quarter-hour") {
		t.Fatalf("a bound inside a compacted quarter: %v", err)
	}
	if v, err := r.Verify(Query{}); err != nil || !v.OK() {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// A changed count is found by Verify, with the row and both values.
func TestVerifyFindsADifference(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, accesslog.LTSV, false, traffic(600, t0))
	r := openRoller(t, dir, nil)
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	var key []byte
	var c Counts
	err := r.be.(boltBackend).db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMinutes)
		cu := b.Cursor()
		for k, v := cu.First(); k != nil; k, v = cu.Next() {
			if err := parseCounts(v, &c); err != nil {
				return err
			}
			if c[Impressions] > 0 {
				key = append([]byte(nil), k...)
				c[Impressions]++
				return b.Put(key, appendCounts(nil, &c))
			}
		}
		return fmt.Errorf("no row with impressions")
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.Verify(Query{})
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || len(v.Mismatches) != 1 || v.Mismatches[0].Counter != Impressions ||
		v.Mismatches[0].Stored != v.Mismatches[0].Recounted+1 {
		t.Fatalf("verify after a change: %+v", v)
	}
	var text strings.Builder
	if err := v.Report().WriteText(&text); err != nil {
		t.Fatal(err)
	}
	m := v.Mismatches[0]
	want := fmt.Sprintf("differs: %s advertiser=adv-1 campaign=c-1 line_item=%s", m.Time.Format("2006-01-02T15:04Z07:00"), m.Dims[DimLineItem])
	if !strings.Contains(text.String(), want) || !strings.Contains(text.String(), fmt.Sprintf("impressions: rollups %d, files %d", m.Stored, m.Recounted)) ||
		strings.Contains(text.String(), "equal") {
		t.Errorf("the text of a difference:\n%s\nwant a line with %q", text.String(), want)
	}
}

// Hours and days are the query zone's, also for zones 45 minutes off UTC
// and across a date line; from is inclusive, to exclusive.
func TestQueryZonesAndBounds(t *testing.T) {
	r := openRoller(t, t.TempDir(), nil)
	put := func(at time.Time, li string) {
		d := Dims{DimLineItem: li, DimCurrency: "USD"}
		c := Counts{Impressions: 1, Spend: 1000}
		rows := map[string]*Counts{string(rowKey(nil, at.Unix(), &d)): &c}
		if err := r.be.(boltBackend).db.Update(func(tx *bolt.Tx) error { return merge(tx, rows) }); err != nil {
			t.Fatal(err)
		}
	}
	a := time.Date(2026, 11, 27, 14, 50, 0, 0, time.UTC) // Tokyo 23:50, Kathmandu 20:35
	b := time.Date(2026, 11, 27, 15, 10, 0, 0, time.UTC) // Tokyo 00:10 the next day, Kathmandu 20:55
	put(a, "li-1")
	put(b, "li-1")
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	for _, tc := range []struct {
		loc  string
		by   string
		want []string
	}{
		{"UTC", ByDay, []string{"2026-11-27"}},
		{"Asia/Tokyo", ByDay, []string{"2026-11-27", "2026-11-28"}},
		{"UTC", ByHour, []string{"2026-11-27T14:00:00Z", "2026-11-27T15:00:00Z"}},
		{"Asia/Kathmandu", ByHour, []string{"2026-11-27T20:00:00+05:45"}},
	} {
		q := Query{By: []string{tc.by}, Location: zone(tc.loc)}
		res, err := r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, row := range res.Rows {
			if tc.by == ByDay {
				got = append(got, row.Time.Format(time.DateOnly))
			} else {
				got = append(got, row.Time.Format(time.RFC3339))
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s by %s: %v, want %v", tc.loc, tc.by, got, tc.want)
		}
	}
	for _, tc := range []struct {
		from, to time.Time
		want     int64
	}{{a, b, 1}, {a, b.Add(time.Minute), 2}, {a.Add(time.Minute), b, 0}, {b, time.Time{}, 1}, {time.Time{}, a, 0}} {
		res, err := r.Query(Query{From: tc.from, To: tc.to})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, row := range res.Rows {
			n += row.Counts[Impressions]
		}
		if n != tc.want {
			t.Errorf("[%v, %v): %d impressions, want %d", tc.from, tc.to, n, tc.want)
		}
	}
	if _, err := r.Query(Query{From: a.Add(time.Second)}); err == nil {
		t.Error("a bound that is not a whole minute was taken")
	}
	if _, err := r.Query(Query{From: b, To: a}); err == nil {
		t.Error("an empty period was taken")
	}
}

func TestAmountAndCTR(t *testing.T) {
	for v, want := range map[int64]string{0: "0.00", 2_500: "0.0000025", 2_500_000: "0.0025", 1_000_000_000: "1.00",
		1_500_000_000: "1.50", 1_234_567_891: "1.234567891", -2_500_000: "-0.0025"} {
		if got := Amount(v); got != want {
			t.Errorf("Amount(%d) = %s, want %s", v, got, want)
		}
	}
	for _, tc := range []struct {
		c, i int64
		want string
	}{{0, 0, "0"}, {1, 3, "0.333333"}, {2, 3, "0.666667"}, {1, 1, "1.000000"}, {1, 2_000_001, "0.000000"},
		{1, 1_999_999, "0.000001"}, {999_999_5, 10_000_000, "1.000000"}} {
		if got := CTR(tc.c, tc.i); got != tc.want {
			t.Errorf("CTR(%d, %d) = %s, want %s", tc.c, tc.i, got, tc.want)
		}
	}
}

func TestParseBy(t *testing.T) {
	if by, err := ParseBy("day, line_item,site"); err != nil || strings.Join(by, ",") != "day,line_item,site" {
		t.Fatalf("%v %v", by, err)
	}
	for _, bad := range []string{"nope", "day,hour", "site,site", "line_item,"} {
		if _, err := ParseBy(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

// halfCommitted writes 900 lines, 450 in closed files and 450 in an active
// one left open (l), and opens a roller on reports.db at db that has read
// them all and committed the closed files only (commit_every is an hour).
func halfCommitted(t *testing.T) (dir, db string, evs []event, l *accesslog.Logger, r *Roller) {
	t.Helper()
	dir = t.TempDir()
	db = filepath.Join(t.TempDir(), FileName)
	evs = traffic(900, t0)
	writeLog(t, dir, accesslog.LTSV, false, evs[:450])
	// The active file: written, not closed (a running server's).
	fs, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l = accesslog.New(fs, accesslog.Options{Sync: true, Logger: quiet}) // each line in the file when Append returns
	for i := range evs[450:] {
		if err := l.Append(&evs[450+i].rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	r = openRoller(t, dir, func(o *Options) { o.Path, o.CommitEvery = db, time.Hour })
	if _, err := r.Pass(); err != nil {
		t.Fatal(err)
	}
	if n := pendingLines(r); n != 450 {
		t.Fatalf("%d lines counted and not committed, want the active file's 450", n)
	}
	checkClosedFilesOnly(t, r)
	return dir, db, evs, l, r
}

// pendingLines is how many lines r counted and has not committed.
func pendingLines(r *Roller) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.uncommitted()
}

// checkClosedFilesOnly checks that the decisions committed in r's
// database are halfCommitted's closed files' (each committed once read
// whole), none of the active file's.
func checkClosedFilesOnly(t *testing.T, r *Roller) {
	t.Helper()
	res, err := r.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, row := range res.Rows {
		committed += row.Counts[Decisions]
	}
	if want := int64((450 + trafficKinds - 1) / trafficKinds); committed != want {
		t.Fatalf("%d decisions committed, want the closed files' %d", committed, want)
	}
}

// checkCaughtUp opens the next roller on db, reads the files to their end
// and checks that it counts each of evs once.
func checkCaughtUp(t *testing.T, dir, db string, evs []event, after string) {
	t.Helper()
	r := openRoller(t, dir, func(o *Options) { o.Path = db })
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, after, byLineItem(t, r, Query{}), want(evs))
	if v, err := r.Verify(Query{}); err != nil || !v.OK() {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// What was counted and not yet committed (commit_every) is not in the
// reports, and a crash before the commit loses nothing: the next start
// reads those lines again from the committed position.
func TestUncommittedLinesAreReadAgain(t *testing.T) {
	dir, db, evs, l, r := halfCommitted(t)
	// A crash: the roller goes without committing what it holds.
	r.mu.Lock()
	r.pending = map[string]*batch{}
	r.mu.Unlock()
	r.Close()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkCaughtUp(t, dir, db, evs, "after a crash with counts uncommitted")
}

// Leave (a restart's predecessor) commits nothing it counted since its
// last commit; the next roller counts those lines again, and the reports
// come out whole and counted once.
func TestLeaveLeavesTheCountToTheNext(t *testing.T) {
	dir, db, evs, l, r := halfCommitted(t)
	if left, err := r.Leave(); err != nil || left != 450 {
		t.Fatalf("left %d lines (%v), want the active file's 450", left, err)
	}
	if err := r.Close(); err != nil { // a no-op once left
		t.Fatal(err)
	}
	// The predecessor's log closes after its roller left (closeAll); its
	// retention still asks the roller that left, which holds the file.
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	names, err := accesslog.ClosedFiles(dir, "access.log", false)
	if err != nil || len(names) == 0 {
		t.Fatalf("closed files: %v %v", names, err)
	}
	// Of the files, the ones read whole were committed as done; the one
	// that was active, counted but not committed, is held.
	var held []string
	for _, name := range names {
		if r.Hold(name) {
			held = append(held, name)
		}
	}
	if len(held) != 1 || len(names) < 2 {
		t.Errorf("the roller that left holds %v of %v, want only the file that was active", held, names)
	}
	next := openRoller(t, dir, func(o *Options) { o.Path = db })
	checkClosedFilesOnly(t, next) // nothing more committed by the roller that left
	next.Close()
	checkCaughtUp(t, dir, db, evs, "after a roller left")
}

// A gzipped file cut short is not taken as read whole: the pass fails
// with a reason, the file is held, and nothing past its whole lines is
// committed.
func TestTruncatedGzipIsNotDone(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, accesslog.LTSV, true, traffic(150, t0))
	names, _ := accesslog.ClosedFiles(dir, "access.log", false)
	if len(names) != 1 || !strings.HasSuffix(names[0], ".gz") {
		t.Fatalf("files %v", names)
	}
	path := filepath.Join(dir, names[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	r := openRoller(t, dir, nil)
	if err := r.CatchUp(context.Background()); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a truncated gzip file: %v", err)
	}
	if !r.Hold(names[0]) {
		t.Fatal("a truncated file is let go")
	}
	for _, f := range r.fileStates() {
		if f.Done {
			t.Fatalf("a truncated file is marked done: %+v", *f)
		}
	}
}

// A file read whole and gone (retention) for a while leaves a tombstone:
// put back, it is not counted again, by this roller nor the next one, and
// Hold lets it go without asking the store.
func TestTombstones(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), FileName)
	evs := traffic(300, t0)
	writeLog(t, dir, accesslog.LTSV, false, evs)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func(o *Options) { o.Path, o.Now = db, func() time.Time { return time.Unix(0, now.Load()) } }
	r := openRoller(t, dir, clock)
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	names, _ := accesslog.ClosedFiles(dir, "access.log", false)
	saved := map[string][]byte{}
	for _, n := range names {
		saved[n], _ = os.ReadFile(filepath.Join(dir, n))
		os.Remove(filepath.Join(dir, n)) // retention
	}
	if _, err := r.Pass(); err != nil { // noted gone
		t.Fatal(err)
	}
	now.Add(int64(forgetAfter + time.Minute))
	if _, err := r.Pass(); err != nil { // tombstones
		t.Fatal(err)
	}
	if len(r.fileStates()) != 0 {
		t.Fatalf("states kept: %v", r.fileStates())
	}
	for n, b := range saved { // put back
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check := func(rr *Roller) {
		t.Helper()
		if err := rr.CatchUp(context.Background()); err != nil {
			t.Fatal(err)
		}
		equalCounts(t, "with the files put back", byLineItem(t, rr, Query{}), want(evs))
		for n := range saved {
			if rr.Hold(n) {
				t.Errorf("%s held, though read whole before", n)
			}
		}
	}
	check(r)
	r.Close()
	check(openRoller(t, dir, clock)) // the tombstones are read back
}

// A file changed after it was counted (a word edited, the size kept; then
// cut short) is named with what the rollups read and what it holds now.
func TestVerifyNamesAChangedFile(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, accesslog.LTSV, false, traffic(100, t0))
	r := openRoller(t, dir, nil)
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	names, err := accesslog.ClosedFiles(dir, "access.log", true)
	if err != nil || len(names) == 0 {
		t.Fatalf("closed files: %v %v", names, err)
	}
	path := filepath.Join(dir, names[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte("event:imp"), []byte("event:xyz"), 1)
	if bytes.Equal(edited, b) {
		t.Fatal("no impression line in the first file")
	}
	if err := os.WriteFile(path, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.Verify(Query{})
	if err == nil || !strings.Contains(err.Error(), names[0]+" changed after it was counted: the rollups read ") ||
		strings.Contains(err.Error(), "shorter") {
		t.Fatalf("verify of an edited file: %v", err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.Verify(Query{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the file is now %d bytes, shorter than that", len(b)/2)) {
		t.Fatalf("verify of a file cut short: %v", err)
	}
}

// A request line counts the slots its ad request asked as requests,
// filled or not, by its placement, site, country and device (and the
// currency of the server that decided): no line item, no advertiser.
func TestRequestLineCountsSlots(t *testing.T) {
	for _, format := range []accesslog.Format{accesslog.LTSV, accesslog.JSON} {
		e := &accesslog.Event{Kind: accesslog.EventRequest, ID: accesslog.String("r:01M8KGFHCHPFHHN549VG4SZVSR"),
			Placement: accesslog.String("top"), Currency: accesslog.String("JPY"), Valid: true}
		e.AddOrigin("", "news.example.com", "JP", "mobile")
		e.AddInt(accesslog.MustKey("slots"), 3)
		e.AddInt(accesslog.MustKey("filled"), 1)
		dir := t.TempDir()
		writeLog(t, dir, format, false, []event{{rec: accesslog.Record{Time: t0, Remote: netip.MustParseAddr("192.0.2.1"),
			RequestID: []byte("r-1"), Event: e}}})
		names, _ := accesslog.ClosedFiles(dir, "access.log", false)
		if len(names) != 1 {
			t.Fatalf("files %v", names)
		}
		data, err := os.ReadFile(filepath.Join(dir, names[0]))
		if err != nil {
			t.Fatal(err)
		}
		var (
			l    accesslog.Line
			dims Dims
			c    Counts
		)
		ok, err := classify(bytes.TrimSuffix(data, []byte("\n")), &l, &dims, &c)
		if !ok || err != nil {
			t.Fatalf("format %d: %v %v: %s", format, ok, err, data)
		}
		if want := (Counts{Requests: 3}); c != want {
			t.Errorf("format %d: counts %v, want %v", format, c, want)
		}
		if want := (Dims{DimPlacement: "top", DimSite: "news.example.com", DimCountry: "JP", DimDevice: "mobile", DimCurrency: "JPY"}); dims != want {
			t.Errorf("format %d: dims %q, want %q", format, dims, want)
		}
		if !l.Time.Equal(t0) {
			t.Errorf("format %d: time %v", format, l.Time)
		}
	}
}

// A query by minute or by hour is bounded: longer spans are refused with
// the reason, the limit's own span and a day-by-day query are taken.
func TestQuerySpanLimits(t *testing.T) {
	r := openRoller(t, t.TempDir(), nil)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		by     string
		to     time.Time
		reason string
	}{
		{ByMinute, from.Add(MaxMinuteSpan), ""},
		{ByMinute, from.Add(MaxMinuteSpan + time.Minute), "a report by minute covers at most 7 days"},
		{ByHour, from.Add(MaxHourSpan), ""},
		{ByHour, from.Add(MaxHourSpan + time.Hour), "a report by hour covers at most 92 days"},
		{ByHour, time.Time{}, "a report by hour covers at most 92 days"}, // to now: far more
		{ByDay, from.AddDate(5, 0, 0), ""},
		{"line_item", from.AddDate(5, 0, 0), ""},
	} {
		_, err := r.Query(Query{From: from, To: tc.to, By: []string{tc.by}})
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("by %s to %v: %v", tc.by, tc.to, err)
		case tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason) || tsubame.ErrorCode(err) != tsubame.EINVALID):
			t.Errorf("by %s to %v: %v, want %q", tc.by, tc.to, err, tc.reason)
		}
	}
	if _, err := r.Query(Query{By: []string{ByMinute}}); err != nil {
		t.Errorf("all the data by minute: %v", err)
	}
}
