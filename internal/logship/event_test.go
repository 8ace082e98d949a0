//go:build linux

package logship

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"tsubame/internal/accesslog"
)

// appendEvents appends n requests numbered from base, each followed by its
// decision and impression lines, as the server logs a decided request: the
// placement is num%7, the event id names the kind and num, and the visitor
// id is hostile.
func (f *fixture) appendEvents(base, n int) {
	for i := range n {
		num := base + i
		r := accesslog.Record{Time: time.Now(), Remote: netip.MustParseAddr("192.0.2.1"),
			Method: []byte("GET"), Path: []byte("/api/decide"), Endpoint: "decide", ID: []byte(fmt.Sprint(num % 7)),
			Status: 200, RequestID: []byte(fmt.Sprintf("req-%d", num))}
		if err := f.log.Append(&r, uint64(num)); err != nil {
			f.t.Fatal(err)
		}
		for _, k := range []accesslog.EventKind{accesslog.EventDecision, accesslog.EventImp} {
			r.Event = &accesslog.Event{Kind: k, ID: accesslog.String(fmt.Sprintf("%s-%d", k, num)),
				Decision: accesslog.String(fmt.Sprintf("d-%d", num)), LineItem: accesslog.String("li-1"),
				Placement: accesslog.String(fmt.Sprint(num % 7)), UID: accesslog.String("u\t\n\",\"id\":\"x"),
				Price: 1_500_000, Currency: accesslog.String("USD"), Valid: true}
			if err := f.log.Append(&r, uint64(num)); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// Event lines are shipped as request lines are: each under one stable id
// (the same when a shipper that died resends it), keyed by its placement,
// in both formats.
func TestShipsEventLinesWithStableIDs(t *testing.T) {
	for _, format := range []accesslog.Format{accesslog.LTSV, accesslog.JSON} {
		topic := fmt.Sprintf("ship-events-%d", format)
		b := startBroker(t, topic, 3)
		f := &fixture{t: t, dir: t.TempDir(), topic: topic, broker: b, format: format,
			fo: accesslog.FileOptions{MaxSize: 16 << 10, Gzip: true}}
		f.open()
		f.appendEvents(0, 300)
		waitShipped(t, f.ship, 900)
		waitSaved(t, f.ship.opt.StateFile, 900)
		f.appendEvents(300, 200) // some sent, some acknowledged, none saved
		// Die without committing or saving, as in TestResumesAfterUncleanStop.
		close(f.ship.stop)
		f.ship.cancel()
		f.ship.wg.Wait()
		f.ship.client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := f.log.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		f.open()
		f.appendEvents(500, 100)
		waitShipped(t, f.ship, 300)
		for deadline := time.Now().Add(2 * time.Minute); f.ship.Stats().Lag != 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		f.close()
		if f.fs.Rotations() < 2 {
			t.Fatalf("%d rotations: the lines did not cross files", f.fs.Rotations())
		}
		byID, total := consumed(t, b, topic, 1800) // checks each record's key against its line
		checkSame(t, fileLines(t, f.dir), byID)
		events := map[string]int{}
		for _, v := range byID {
			line := append([]byte(v), '\n')
			if !strings.Contains(v, "event") {
				continue
			}
			for _, k := range []string{"decision", "imp"} {
				for _, sep := range []string{"\tevent:" + k + "\t", `"event":"` + k + `"`} {
					if strings.Contains(v, sep) {
						events[k]++
					}
				}
			}
			if p := string(accesslog.LinePlacement(line)); len(p) != 1 || p[0] < '0' || p[0] > '6' {
				t.Fatalf("event line keyed %q: %q", p, v)
			}
		}
		if events["decision"] != 600 || events["imp"] != 600 {
			t.Fatalf("format %d: %v event lines shipped, want 600 of each", format, events)
		}
		t.Logf("format %d: %d records for 1800 lines (%d resent under their ids)", format, total, total-1800)
	}
}
