package report

import (
	"fmt"
	"strings"
	"testing"

	"tsubame/internal/accesslog"
)

// dimOf names every dimension a line carries by its name, and the node,
// which is the roller's, none.
func TestDimOfEveryDimension(t *testing.T) {
	for d := range numDims {
		got, ok := dimOf([]byte(dimNames[d]))
		if d == DimNode {
			if ok {
				t.Errorf("the node is read from the line as %v", got)
			}
			continue
		}
		if !ok || got != d {
			t.Errorf("%s: %v %v", dimNames[d], got, ok)
		}
	}
}

// classifyByGet is classify as it read a line before its one pass: each
// field by Line.Get, the dimensions in a pass of their own. The oracle of
// TestClassifyAgreesWithGet.
func classifyByGet(line []byte, l *accesslog.Line, dims *Dims, c *Counts) (bool, error) {
	*c = Counts{}
	if !accesslog.IsEventLine(line) {
		return rejected(line, l, dims, c)
	}
	if err := l.Parse(line); err != nil {
		return false, err
	}
	kind, _ := accesslog.ParseEventKind(l.String("event"))
	valid, late := l.Bool("valid"), l.Bool("late")
	price := l.Int("price")
	switch kind {
	case accesslog.EventDecision:
		c[Decisions] = 1
	case accesslog.EventRequest:
		c[Requests] = l.Int("slots")
	case accesslog.EventImp, accesslog.EventBill:
		switch {
		case valid && late:
			c[Overage], c[OverageSpend] = 1, price
		case valid:
			c[Impressions], c[Spend] = 1, price
			if kind == accesslog.EventBill {
				c[Bills] = 1
			} else if p, _ := l.Get("partner"); len(p) > 0 && string(p) != "-" {
				c[Revenue] = price
			}
		case kind == accesslog.EventImp:
			c[InvalidImpressions] = 1
		default:
			c[InvalidBills] = 1
		}
	case accesslog.EventClick, accesslog.EventBid, accesslog.EventWin, accesslog.EventLoss, accesslog.EventBidImp:
		pair := map[accesslog.EventKind][2]Counter{
			accesslog.EventClick: {Clicks, InvalidClicks}, accesslog.EventBid: {Bids, InvalidBids},
			accesslog.EventWin: {Wins, InvalidWins}, accesslog.EventLoss: {Losses, InvalidLosses},
			accesslog.EventBidImp: {BidImps, InvalidImpressions},
		}[kind]
		if valid {
			c[pair[0]] = 1
		} else {
			c[pair[1]] = 1
		}
	case accesslog.EventAuction:
		if !valid {
			return false, nil
		}
		c[Auctions] = 1
	case accesslog.EventBidReceived:
		if !valid {
			return false, nil
		}
		switch out, _ := l.Get("outcome"); string(out) {
		case "throttled", "not_called":
		case "bid":
			c[PartnerRequests], c[PartnerBids] = 1, 1
		case "timeout":
			c[PartnerRequests], c[PartnerTimeouts] = 1, 1
		default:
			c[PartnerRequests] = 1
		}
		if l.Bool("won") {
			c[PartnerWins] = 1
		}
		if c.IsZero() {
			return false, nil
		}
	default:
		return false, nil
	}
	var seen [numDims]bool
	for i := range l.Len() {
		label, v := l.Field(i)
		d, ok := dimOf(label)
		if !ok || seen[d] {
			continue
		}
		seen[d] = true
		dims[d] = string(v)
	}
	for d := range numDims {
		if !seen[d] && d != DimNode {
			dims[d] = ""
		}
	}
	return true, nil
}

// classify reads every kind of event line, with the fields it counts
// present, absent, empty or named twice, in both formats, as the oracle
// does.
func TestClassifyAgreesWithGet(t *testing.T) {
	kinds := []string{"decision", "request", "imp", "bill", "click", "bid", "win", "loss", "bid_imp", "auction", "bid_received", "nonsense"}
	type field struct{ label, value string }
	var lines int
	for _, kind := range kinds {
		for _, valid := range []string{"true", "false", ""} {
			for _, late := range []string{"true", ""} {
				for _, partner := range []string{"", "-", "ssp-1"} {
					for _, outcome := range []string{"", "bid", "timeout", "throttled", "not_called", "error"} {
						for _, twice := range []bool{false, true} {
							fs := []field{{"event", kind}, {"event_id", "e:1"}, {"line_item", "li-1"}, {"campaign", "c-1"},
								{"placement", "p-1"}, {"price", "1500000"}, {"slots", "3"}, {"currency", "USD"}, {"site", "news.example"}}
							if valid != "" {
								fs = append(fs, field{"valid", valid})
							}
							if late != "" {
								fs = append(fs, field{"late", late})
							}
							if partner != "" {
								fs = append(fs, field{"partner", partner})
							}
							if outcome != "" {
								fs = append(fs, field{"outcome", outcome}, field{"won", map[bool]string{true: "true", false: "false"}[outcome == "bid"]})
							}
							if twice { // the first of each counts
								fs = append(fs, field{"valid", "false"}, field{"valid", "true"}, field{"price", "7"}, field{"event", "click"},
									field{"line_item", "li-2"}, field{"partner", "ssp-2"}, field{"won", "true"}, field{"slots", "9"})
							}
							var ltsv, js strings.Builder
							ltsv.WriteString("time:2026-11-30T21:57:12.728684Z")
							js.WriteString(`{"time":"2026-11-30T21:57:12.728684Z"`)
							for _, f := range fs {
								fmt.Fprintf(&ltsv, "\t%s:%s", f.label, f.value)
								fmt.Fprintf(&js, ",%q:%q", f.label, f.value)
							}
							js.WriteString("}")
							for _, line := range []string{ltsv.String() + "\n", js.String() + "\n"} {
								var (
									l1, l2 accesslog.Line
									d1, d2 Dims
									c1, c2 Counts
								)
								ok1, err1 := classify([]byte(line), &l1, &d1, &c1)
								ok2, err2 := classifyByGet([]byte(line), &l2, &d2, &c2)
								if ok1 != ok2 || (err1 == nil) != (err2 == nil) || ok1 && (c1 != c2 || d1 != d2) {
									t.Errorf("%s\n classify: %v %v %v %v\n by Get:   %v %v %v %v", line, ok1, err1, c1, d1, ok2, err2, c2, d2)
								}
								lines++
							}
						}
					}
				}
			}
		}
	}
	if lines < 2000 {
		t.Fatalf("only %d lines", lines)
	}
}
