package decision

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"tsubame"
)

// Why is what the decision made of a line item for a request: the first
// rule that excluded it, or that it was eligible, won or lost the draw.
// Decide's own rules return it (match, fits), so that Explain tells what
// Decide does, not what a second reading of the rules would say.
type Why uint8

// The reasons, in the order the rules are read: those that leave a line
// item out of the index (LeftOut), then match's, fits', Counters' and the
// draw's.
const (
	WhyEligible           Why = iota // passes every rule
	WhyArchived                      // the line item is archived
	WhyPaused                        // the line item is paused
	WhyCampaignPaused                // its campaign is paused
	WhyCampaignArchived              // its campaign is archived
	WhyAdvertiserArchived            // its campaign's advertiser is archived
	WhyNoApprovedCreative            // none of its creatives is approved
	WhyEmptyFlight                   // its window and its campaign's do not meet
	WhyNoTime                        // its hours and weekdays leave no time to serve
	WhyNotStarted                    // its flight has not started
	WhyEnded                         // its flight has ended
	WhyDeal                          // it bids on deals, and none it names is offered (above its CPM's floor)
	WhyFloor                         // its CPM is under the floor, or the auction is private
	WhyBlockedAdvertiser             // the request blocks its advertiser's domain
	WhyHour                          // its hours exclude the request's hour
	WhyWeekday                       // its weekdays exclude the request's day
	WhyPlacement                     // placement targeting
	WhySite                          // site targeting
	WhyApp                           // app targeting
	WhyCountry                       // country targeting
	WhyRegion                        // region targeting
	WhyDevice                        // device targeting
	WhyOS                            // OS targeting
	WhyBrowser                       // browser targeting
	WhyKeyValues                     // key-value targeting
	WhySameAdvertiser                // an earlier slot went to its advertiser
	WhyNoCreativeFits                // no creative of the slot's format, size, security and categories
	WhyRefused                       // Counters refused it: frequency cap, budget, impression limit or pacing
	WhyLostDraw                      // eligible, but the weighted draw chose another of its priority
	WhyLowerPriority                 // eligible, but a higher priority filled the slots
	WhyNotIndexed                    // the index does not hold its latest version
	WhyWon                           // it serves
	numWhys
)

// dimWhy is the reason of each targeting dimension.
var dimWhy = [numDims]Why{dimPlacement: WhyPlacement, dimSite: WhySite, dimApp: WhyApp, dimCountry: WhyCountry,
	dimRegion: WhyRegion, dimDevice: WhyDevice, dimOS: WhyOS, dimBrowser: WhyBrowser}

var whyNames = [numWhys]struct{ code, text string }{
	WhyEligible:           {"eligible", "passes every rule"},
	WhyArchived:           {"archived", "the line item is archived"},
	WhyPaused:             {"paused", "the line item is paused"},
	WhyCampaignPaused:     {"campaign_paused", "its campaign is paused"},
	WhyCampaignArchived:   {"campaign_archived", "its campaign is archived"},
	WhyAdvertiserArchived: {"advertiser_archived", "its campaign's advertiser is archived"},
	WhyNoApprovedCreative: {"no_approved_creative", "none of its creatives is approved"},
	WhyEmptyFlight:        {"empty_flight", "its start and end, within its campaign's, leave no time"},
	WhyNoTime:             {"no_hour", "its hours and weekdays exclude every hour"},
	WhyNotStarted:         {"not_started", "its flight (or its campaign's) has not started"},
	WhyEnded:              {"ended", "its flight (or its campaign's) has ended"},
	WhyDeal:               {"deal", "it bids on deals and none of them is offered"},
	WhyFloor:              {"floor", "its CPM is under the floor, or the auction is private"},
	WhyBlockedAdvertiser:  {"blocked_advertiser", "the request blocks its advertiser's domain"},
	WhyHour:               {"hour", "hour targeting excludes the request's hour"},
	WhyWeekday:            {"weekday", "weekday targeting excludes the request's day"},
	WhyPlacement:          {"placement", "placement targeting excludes the request's placement"},
	WhySite:               {"site", "site targeting excludes the request's site"},
	WhyApp:                {"app", "app targeting excludes the request's app"},
	WhyCountry:            {"country", "country targeting excludes the request's country"},
	WhyRegion:             {"region", "region targeting excludes the request's region"},
	WhyDevice:             {"device", "device targeting excludes the request's device"},
	WhyOS:                 {"os", "OS targeting excludes the request's OS"},
	WhyBrowser:            {"browser", "browser targeting excludes the request's browser"},
	WhyKeyValues:          {"key_values", "key-value targeting excludes the request's key-values"},
	WhySameAdvertiser:     {"same_advertiser", "an earlier slot of the answer went to its advertiser"},
	WhyNoCreativeFits:     {"no_creative_fits", "no creative of the requested format and size (or security, categories)"},
	WhyRefused:            {"capped", "a frequency cap, budget, impression limit or pacing held it back"},
	WhyLostDraw:           {"lost_draw", "eligible, but the weighted draw chose another line item of its priority"},
	WhyLowerPriority:      {"lower_priority", "eligible, but line items of a higher priority filled the slots"},
	WhyNotIndexed:         {"not_indexed", "the decision index does not hold its latest version: a change not taken yet, or a set it cannot compile (the process log says why)"},
	WhyWon:                {"won", "it serves"},
}

// String is the reason's code, such as "country".
func (w Why) String() string {
	if w < numWhys {
		return whyNames[w].code
	}
	return "unknown"
}

// Text is the reason in a sentence.
func (w Why) Text() string {
	if w < numWhys {
		return whyNames[w].text
	}
	return "unknown"
}

// Set finds a campaign set's campaigns and creatives by id, and its
// archived advertisers, for the reasons of many line items (LeftOut).
type Set struct {
	camps     map[string]*tsubame.Campaign
	creatives map[string]*tsubame.Creative
	archived  map[string]bool // archived advertisers
}

// NewSet indexes set (nil: an empty one), which it keeps and does not modify.
func NewSet(set *tsubame.CampaignSet) *Set {
	if set == nil {
		set = &tsubame.CampaignSet{}
	}
	s := &Set{camps: make(map[string]*tsubame.Campaign, len(set.Campaigns)), creatives: make(map[string]*tsubame.Creative, len(set.Creatives))}
	for _, c := range set.Campaigns {
		s.camps[c.ID] = c
	}
	for _, c := range set.Creatives {
		s.creatives[c.ID] = c
	}
	s.archived = archivedAdvertisers(set)
	return s
}

// LeftOut returns why line item li cannot serve from an index compiled
// from the set at now (archived, it or its campaign paused, its campaign
// or advertiser archived, no approved creative, an empty or ended
// flight, no hour or day), or WhyEligible: the rules Compile reads, in the
// helpers it shares. A line item whose campaign the set does not hold is
// one the index has not taken (WhyNotIndexed).
func (s *Set) LeftOut(li *tsubame.LineItem, now time.Time) Why {
	switch {
	case li.Archived():
		return WhyArchived
	case li.Paused():
		return WhyPaused
	}
	camp := s.camps[li.Campaign]
	if camp == nil {
		return WhyNotIndexed
	}
	start, end := flight(camp.Start, li.Start, camp.End, li.End)
	if why := standing(li, camp, s.archived[camp.Advertiser], start, end, now.UnixNano()); why != WhyEligible {
		return why
	}
	n := 0
	for _, id := range li.Creatives {
		if c := s.creatives[id]; c != nil && approved(c) {
			n++
		}
	}
	if n == 0 {
		return WhyNoApprovedCreative
	}
	if hours, days := timeMasks(&li.Targeting); hours == 0 || days == 0 {
		return WhyNoTime
	}
	return WhyEligible
}

// maxArchivedNamed bounds the archived creatives Detail names.
const maxArchivedNamed = 5

// Detail is the sentence that tells why line item li does not serve for
// reason w: w's Text, except that no_approved_creative says which of its
// creatives are archived when some are (an archived creative keeps its
// review, so its approval alone does not tell why it does not serve).
func (s *Set) Detail(li *tsubame.LineItem, w Why) string {
	if w != WhyNoApprovedCreative {
		return w.Text()
	}
	var archived []string
	for _, id := range li.Creatives {
		if c := s.creatives[id]; c != nil && c.Archived {
			archived = append(archived, id)
		}
	}
	if len(archived) == 0 {
		return w.Text()
	}
	named := strings.Join(archived[:min(len(archived), maxArchivedNamed)], ", ")
	if n := len(archived) - maxArchivedNamed; n > 0 {
		named += fmt.Sprintf(" and %d more", n)
	}
	if len(archived) == len(li.Creatives) {
		return "its creatives are archived (" + named + "): restore one to serve"
	}
	return "none of its creatives is approved and not archived (archived: " + named + ")"
}

// Traced is what Explain found of one line item.
type Traced struct {
	ID, Name, Campaign string
	Priority           int
	Why                Why
	// Slot is the slot of the answer it won (WhyWon), else -1.
	Slot int
	// InIndex reports whether the index holds it (else LeftOut's reason
	// is its Why).
	InIndex bool
}

// Explanation is Explain's answer.
type Explanation struct {
	// Decisions are what Decide would answer, given the same random
	// source in the same state.
	Decisions []Decision
	// Lines are the candidates: every line item of the set whose
	// placement targeting names the request's placement or no placement,
	// winners first, then by priority and id.
	Lines []Traced
	// Eligible are, per slot filled, the line items that were eligible
	// when the draw chose its winner (the winner among them).
	Eligible [][]string
}

// tracer is what decide tells of the line items it weighs.
type tracer struct {
	why      map[int32]Why
	slot     map[int32]int
	eligible [][]string
	last     int // the last priority weighed
	ix       *Index
}

// set records why line item i was set aside, unless it was already.
func (t *tracer) set(i int32, why Why, slot int) {
	if _, ok := t.why[i]; !ok {
		t.why[i] = why
		if slot >= 0 {
			t.slot[i] = slot
		}
	}
}

// won records that line item i won slot among cands.
func (t *tracer) won(i int32, cands []int32, slot int) {
	ids := make([]string, 0, len(cands))
	for _, c := range cands {
		ids = append(ids, t.ix.lines[c].ID)
	}
	slices.Sort(ids)
	t.eligible = append(t.eligible, ids)
	t.why[i] = WhyWon
	t.slot[i] = slot
}

// Explain decides req as Decide does, with the same rules in the same code,
// and tells what became of every candidate line item of set (the set the
// index was compiled or patched from): the first rule that excluded it, or
// that it won. Given rnd in the same state as Decide's, its decisions are
// Decide's. It calls Counters as Decide does: a caller that wants it to take
// nothing sets req.Check (or req.Test). It allocates, and is meant for
// troubleshooting, not for the request path.
func (ix *Index) Explain(set *tsubame.CampaignSet, req *Request, rnd *rand.Rand) *Explanation {
	s := ix.pool.Get().(*scratch)
	defer ix.pool.Put(s)
	tr := &tracer{why: map[int32]Why{}, slot: map[int32]int{}, ix: ix}
	out, _ := ix.decide(req, make([]Decision, 0, MaxCount), rnd, s, tr)
	now := req.Time
	if now.IsZero() {
		now = time.Now()
	}
	ex := &Explanation{Decisions: out, Eligible: tr.eligible}
	if set == nil {
		set = &tsubame.CampaignSet{}
	}
	var sl *Set // made for the first line item the index left out
	for _, li := range set.LineItems {
		if ps := li.Targeting.Placements; len(ps) > 0 && !slices.Contains(ps, req.Placement) {
			continue
		}
		t := Traced{ID: li.ID, Name: li.Name, Campaign: li.Campaign, Priority: li.Priority, Slot: -1}
		o, ok := ix.lineOrd(li.ID)
		switch {
		case !ok:
			if sl == nil {
				sl = NewSet(set)
			}
			t.Why = sl.LeftOut(li, now)
			if t.Why == WhyEligible {
				// A change the index has not caught up with yet.
				t.Why = WhyNotIndexed
			}
		default:
			t.InIndex = true
			why, traced := tr.why[o]
			if !traced {
				// decide never reached it: its targeting rules it out
				// (the index files it under a value the request does not
				// have), or a higher priority filled the slots first (then
				// whether it had fitted the first slot).
				l := &ix.lines[o]
				if why = ix.match(l, req, now, s); why == WhyEligible {
					why = ix.fits(l, req, nil, s)
				}
				if why == WhyEligible && l.Priority > tr.last {
					why = WhyLowerPriority
				}
			}
			t.Why = why
			if sl, won := tr.slot[o]; won {
				t.Slot = sl
			}
		}
		ex.Lines = append(ex.Lines, t)
	}
	slices.SortFunc(ex.Lines, func(a, b Traced) int {
		aw, bw := a.Why != WhyWon, b.Why != WhyWon
		if aw != bw {
			if aw {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	return ex
}

// Status returns why line item li cannot serve now whatever the request,
// from the state ix decides with (set: the set ix was compiled or patched
// from): LeftOut's reasons for a line item ix left out (WhyNotIndexed when
// it would hold it but does not yet), WhyNotStarted or WhyEnded for one
// whose flight has not started or has ended. None: it may serve, as far
// as its targeting, Counters (budgets, limits, caps, pacing) and requests
// allow.
func (ix *Index) Status(set *Set, li *tsubame.LineItem, now time.Time) []Why {
	o, ok := ix.lineOrd(li.ID)
	if !ok {
		why := set.LeftOut(li, now)
		if why == WhyEligible {
			why = WhyNotIndexed
		}
		return []Why{why}
	}
	if l := &ix.lines[o]; now.UnixNano() < l.start {
		return []Why{WhyNotStarted}
	} else if now.UnixNano() >= l.end {
		return []Why{WhyEnded}
	}
	return nil
}

// GeoTargeted reports whether li's targeting names countries or regions
// (to include or exclude): what a request's country and region, which
// only a geo database gives, decide.
func GeoTargeted(li *tsubame.LineItem) bool {
	t := &li.Targeting
	if len(t.Countries) > 0 || len(t.Regions) > 0 {
		return true
	}
	return t.Exclude != nil && (len(t.Exclude.Countries) > 0 || len(t.Exclude.Regions) > 0)
}
