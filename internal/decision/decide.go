package decision

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"tsubame"
)

// Bounds on what one request carries into the matching core; values past
// them are ignored (a request with more is not one a page sends).
const (
	MaxCount     = 16 // decisions in one answer
	MaxKeyValues = 64 // key-value pairs read from a request
	MaxDeals     = 64 // deal ids read from a request
	// MaxBlocks sizes the scratch of a request's blocked categories,
	// advertisers and apps; every value a request blocks is read, however
	// many (a block left unread would be broken), and only those the index
	// knows are kept.
	MaxBlocks  = 256
	MaxOffers  = 4   // offers read from a request
	maxSiteIDs = 128 // suffixes of a domain (at most 127 labels)
	// maxTerms bounds the terms of a request: a value per dimension (a
	// site's per suffix), its key-values and its deals.
	maxTerms = numDims + maxSiteIDs + MaxKeyValues + MaxDeals
)

// KeyValue is one kv.KEY=VALUE pair of a request.
type KeyValue struct {
	Key, Value string
}

// Request is what a decision is made for: attributes already parsed by the
// caller (geo from the client address, device, OS and browser from the
// User-Agent). Strings are compared as they are: Site is a lower-case host
// name without port. Decide reads it and keeps nothing of it.
type Request struct {
	// User is the visitor (uid or cookie), for Counters' frequency caps;
	// empty when unknown or when a privacy signal rules per-visitor caps out.
	User      string
	Placement string
	Site      string // a domain: a target example.com matches news.example.com
	App       string
	Country   string // ISO 3166-1 alpha-2 ("JP")
	Region    string // ISO 3166-2 ("JP-13")
	Device    string // one of tsubame.Devices
	OS        string
	Browser   string
	KeyValues []KeyValue
	// Time is when the ad is shown (time.Now when zero): flights, and hours
	// and weekdays in each campaign's time zone.
	Time time.Time
	// Deals are the deal ids on offer: a line item with deals bids only
	// when one of its deals is offered.
	Deals []string
	// Count is the number of slots wanted (1 when 0; at most MaxCount).
	Count int
	// Format ("banner", "video"), W and H, when given, narrow the creatives
	// to that format and size.
	Format string
	W, H   int
	// Offers, when given, are the ways the slot may be filled (an
	// auction's impression offering a banner and a video): a creative fits
	// when it fits one of them (the first MaxOffers), and Format, W, H,
	// Sizes, MIMEs, MinDuration and MaxDuration are not read.
	Offers []Offer
	// Secure asks for creatives whose every URL is https (OpenRTB's
	// imp.secure=1): see the package doc.
	Secure bool
	// ByValue chooses, within a priority, the line item of the highest
	// CPM (an auction's bid: the most it is worth), drawing by weight only
	// among equal CPMs; without it weights draw among them all.
	ByValue bool
	// Shading, when its Factor is set, lowers what a line item without
	// deals bids in a first-price auction: see Price.
	Shading Shading
	// Reserve names the decision of each slot, in order (Reserve[k] the
	// k-th decision of the answer): the bid's or decision's id its
	// tracking URLs carry.
	Reserve []string
	// ReserveUntil, when set, makes Counters that reserve a line item's
	// price hold it until then, or until its outcome (tsubame.Outcome):
	// a loss gives it back, a bill spends it. WinBy, when set and
	// earlier, is when a bid that did not win is given back (an exchange
	// that sends win notices has sent its win by then). Unset, what a
	// decision takes is spent at once.
	ReserveUntil, WinBy time.Time
	// HoldShare, when over 0 and under HoldShares, is the part of its
	// price (in HoldShares) a reserving decision holds; HoldByWinRate: a
	// bid whose exchange sends no win notice, held by the bound of its
	// line item's measured win rate rather than whole (a thousand such
	// bids at a 1 % win rate win ten impressions, not a thousand). The
	// holds of one line item and end are kept together, so that a bill
	// spends its whole price from what all of them hold; what they do not
	// cover is spent past them. 0: whole.
	HoldShare int64
	// KeepWon spends a won bid that no bill came for by the end of its
	// reservation (and the grace), rather than giving its money back: its
	// exchange bills later than that, and the bill, when it comes, is
	// then not spent again. For exchanges measured billing late
	// (bidder.Exchange.KeepWonNow).
	KeepWon bool
	// Waited is set by Counters once the request has waited for a
	// budget's top-up: a request waits at most once, however many line
	// items and accounts it tries.
	Waited bool
	// Test asks for decisions that spend nothing (OpenRTB's test=1):
	// Counters let a line item serve if it could, and take nothing.
	Test bool
	// Check asks Counters only whether a line item could serve (its caps
	// for the visitor, read once into Frequency, and its leases), taking
	// nothing: a decision that must still win an auction against outside
	// bids takes what it costs once it has won (Index.Take), and one that
	// loses has held nothing meanwhile.
	Check bool
	// Frequency, when set, is where Counters keep what they read of the
	// visitor's frequency caps for this request: the store is read once,
	// whatever the number of capped line items, impressions and formats
	// the request weighs, and the caps are checked in memory. A caller
	// deciding several times for one request passes the same record, and
	// Resets it for the next request. Nil: each capped line item drawn
	// asks the store on its own.
	Frequency *tsubame.FrequencyRecord
	// CapsOnWin has Counters only check a capped line item's caps, not
	// count the impression: the caller holds the cap for its bid once the
	// bid is sure to be made, and counts it when the bid wins (an
	// auction's bid, whose impression is not the decision's to count).
	CapsOnWin bool
	// Context is the request's: its deadline is the request's budget (a
	// bid's tmax less the way back, a decision's timeout), and it bounds
	// every store call Counters make for it. Nil: Counters bound each
	// call with a timeout of their own.
	Context context.Context

	// Narrowing an auction's impression (OpenRTB). Sizes, when given, are
	// the sizes a creative may have (any of them; W and H are then not
	// read). MIMEs, when given, are the types a video's media may have
	// (one of them), and MinDuration and MaxDuration (0: none) bound its
	// duration. BlockedCategories are IAB categories no creative may have
	// (a top-level one, IAB7, blocks its subcategories); BlockedDomains
	// are advertiser domains none of whose advertisers may serve;
	// BlockedApps are app store ids no creative may promote.
	Sizes                    []Size
	MIMEs                    []string
	MinDuration, MaxDuration int
	BlockedCategories        []string
	BlockedDomains           []string
	BlockedApps              []string
	// Floors of an auction, in the account currency: MinCPM is the least
	// CPM of a line item without deals (an open auction's bid),
	// DealMins[k] the least CPM of a line item bidding on Deals[k] (0 or
	// absent: none). PrivateAuction rules line items without deals out.
	MinCPM         tsubame.Money
	DealMins       []tsubame.Money
	PrivateAuction bool
}

// Size is a creative size in pixels.
type Size struct{ W, H int }

// Shading is how a first-price bid is lowered below the line item's CPM,
// in the account currency: to Factor of it, but at least Step over the
// floor (MinCPM), and never above the CPM.
type Shading struct {
	// Factor is the share of the CPM bid, in parts per million
	// (850000: 85 %); 0 is no shading, and at most 1,000,000.
	Factor int64
	// Step is how much over the floor a shaded bid stays.
	Step tsubame.Money
}

// MaxShadingFactor is a Shading.Factor that bids the whole CPM.
const MaxShadingFactor = 1_000_000

// Price is what l's bid on the request is, in the account currency: its
// CPM, or in a shaded auction (Shading.Factor set) and for a line item
// without deals (a deal's price is negotiated), max(MinCPM + Step,
// CPM × Factor), at most the CPM. It is what serving l on the request
// costs: what Counters should reserve, and what the bidder bids.
func (r *Request) Price(l *Line) tsubame.Money {
	f := r.Shading.Factor
	if f <= 0 || f >= MaxShadingFactor || len(l.Deals) > 0 {
		return l.CPM
	}
	// CPM × f / 10^6, rounded down, without overflow (MaxCPM × 10^6
	// would fit, but a CPM is not checked here).
	cpm := int64(l.CPM)
	shaded := cpm/MaxShadingFactor*f + cpm%MaxShadingFactor*f/MaxShadingFactor
	return min(l.CPM, max(r.MinCPM+r.Shading.Step, tsubame.Money(shaded)))
}

// Offer is one way of filling a slot: a format and what narrows it, read
// as Request's fields of the same names are.
type Offer struct {
	Format                   string
	W, H                     int
	Sizes                    []Size
	MIMEs                    []string
	MinDuration, MaxDuration int
}

// Decision is one filled slot.
type Decision struct {
	Line     *Line
	Creative *tsubame.Creative // the Index's own copy: do not modify
	cr       int32
}

// Counters is the port through which Decide asks whether a line item may
// serve one more impression now: budgets, impression limits, frequency
// caps and pacing are kept behind it. Decide asks only about the line item
// it has drawn for a slot (slot k of the answer, from 0), after targeting:
// when Allow returns true that line item is in the answer, so an
// implementation may take the impression then (a reservation under
// req.Reserve[slot] that the impression settles or its expiry releases);
// when it returns false Decide draws again among the others.
// Implementations must be safe for concurrent use, must not keep req nor
// the strings of req.Reserve past the call (a bidder's are views of its
// request's memory: one to keep, or to send later, is copied), and should
// not allocate: Allow runs in the matching core.
type Counters interface {
	Allow(l *Line, req *Request, slot int, now time.Time) bool
}

// Take takes what serving d costs, for slot slot of req's answer, once
// the decision has won (req.Check cleared): Counters' Allow, asked again,
// now taking the impression and its price. False when it can no longer be
// taken (the last of a budget went to another request meanwhile, or the
// visitor's cap was reached): the slot goes to the auction's next best.
func (ix *Index) Take(req *Request, d *Decision, slot int) bool {
	now := req.Time
	if now.IsZero() {
		now = time.Now()
	}
	return ix.counters.Allow(d.Line, req, slot, now)
}

// NoCounters lets every line item serve.
type NoCounters struct{}

// Allow returns true.
func (NoCounters) Allow(*Line, *Request, int, time.Time) bool { return true }

// scratch is the per-call working space, pooled by the Index.
type scratch struct {
	cands []int32
	hits  []int32  // the line items the index reaches (Index.reach)
	terms []groups // the posting lists of the request's terms
	gpos  []int    // per term, its group reached (Index.reach)
	excl  []int32  // the line items the request excludes (Index.reach)
	keys  []string // the keys of the request's key-values the index knows
	multi bool     // the request has two values of one key, or two deals
	sites []uint32
	kvs   []uint32
	deals []uint32
	dmins []tsubame.Money // dmins[k]: the least CPM bidding on deals[k]
	bcats []uint32        // the request's blocked categories, interned, sorted
	badvs []int32         // advertisers the request's blocked domains rule out
	bapps []uint32        // the request's blocked apps, interned
	zone  []int16         // per zone: hour<<3 | weekday, or -1 not yet computed
	offs  []Offer         // the request's offers, or the one its fields make
	ids   [numDims]uint32
	now   int64 // the request's time in Unix nanoseconds
}

func (ix *Index) newScratch() *scratch {
	return &scratch{
		cands: make([]int32, 0, min(ix.live, 1024)),
		hits:  make([]int32, 0, min(ix.live, 1024)),
		terms: make([]groups, 0, maxTerms),
		gpos:  make([]int, 0, maxTerms),
		excl:  make([]int32, 0, 64),
		keys:  make([]string, 0, MaxKeyValues),
		sites: make([]uint32, 0, maxSiteIDs),
		kvs:   make([]uint32, 0, MaxKeyValues),
		deals: make([]uint32, 0, MaxDeals),
		dmins: make([]tsubame.Money, 0, MaxDeals),
		bcats: make([]uint32, 0, MaxBlocks),
		badvs: make([]int32, 0, MaxBlocks),
		bapps: make([]uint32, 0, MaxBlocks),
		zone:  make([]int16, len(ix.zones)),
		offs:  make([]Offer, 0, MaxOffers),
	}
}

// Decide appends to out up to req.Count decisions and returns it: line
// items of the highest priority that has any qualifying first, chosen at
// random in proportion to their weights (with req.ByValue, among those of
// the highest CPM), then lower priorities while slots remain. With Count > 1 no two decisions share an advertiser or an IAB
// category. rnd is the random source (the goroutine-safe global one when
// nil; a *rand.Rand must not be shared between goroutines).
//
// Decide reads no store and, given an out with room for Count decisions,
// allocates nothing.
func (ix *Index) Decide(req *Request, out []Decision, rnd *rand.Rand) []Decision {
	out, _ = ix.DecideWhy(req, out, rnd)
	return out
}

// DecideWhy is Decide, and tells why it filled no slot (Filled when it
// filled one), for the no-fill counts by cause. Like Decide, it writes
// nothing into req (but what Counters does), so that one request may be
// decided from several goroutines at once (TestConcurrentDecide).
func (ix *Index) DecideWhy(req *Request, out []Decision, rnd *rand.Rand) ([]Decision, NoFill) {
	s := ix.pool.Get().(*scratch)
	defer ix.pool.Put(s)
	return ix.decide(req, out, rnd, s, nil)
}

// decide is DecideWhy with its scratch, and, when tr is not nil, what it
// makes of each line item it weighs told to tr (Explain): the one rule
// engine of both. Without a tracer it allocates nothing.
func (ix *Index) decide(req *Request, out []Decision, rnd *rand.Rand, s *scratch, tr *tracer) ([]Decision, NoFill) {
	count := req.Count
	if count <= 0 {
		count = 1
	}
	count = min(count, MaxCount)
	now := req.Time
	if now.IsZero() {
		now = time.Now()
	}
	ix.resolve(req, s)
	s.now = now.UnixNano()
	first := len(out)
	// What the request got furthest to, for NoFill.
	var matched, refused bool

	for p := tsubame.MinPriority; p <= tsubame.MaxPriority && len(out)-first < count; p++ {
		if tr != nil {
			tr.last = p
		}
		s.cands = s.cands[:0]
		ix.reach(p, s)
		for _, i := range s.hits {
			l := &ix.lines[i]
			why := ix.match(l, req, now, s)
			if why == WhyEligible {
				matched = true
				why = ix.fits(l, req, out[first:], s)
			}
			if why == WhyEligible {
				s.cands = append(s.cands, i)
			} else if tr != nil {
				tr.set(i, why, -1)
			}
		}
		for len(s.cands) > 0 && len(out)-first < count {
			k := ix.draw(req, s.cands, rnd)
			chosen := s.cands[k]
			l := &ix.lines[chosen]
			if !ix.counters.Allow(l, req, len(out)-first, now) {
				refused = true
				if tr != nil {
					tr.set(chosen, WhyRefused, -1)
				}
				s.cands[k] = s.cands[len(s.cands)-1]
				s.cands = s.cands[:len(s.cands)-1]
				continue
			}
			if tr != nil {
				tr.won(chosen, s.cands, len(out)-first)
			}
			cr := ix.pickCreative(l, req, out[first:], s, rnd)
			out = append(out, Decision{Line: l, Creative: ix.creatives[cr].c, cr: cr})
			if len(out)-first == count {
				break
			}
			// Keep the candidates that still fit beside what was chosen.
			n := 0
			for _, i := range s.cands {
				if i == chosen {
					continue
				}
				if why := ix.fits(&ix.lines[i], req, out[first:], s); why == WhyEligible {
					s.cands[n] = i
					n++
				} else if tr != nil {
					tr.set(i, why, -1)
				}
			}
			s.cands = s.cands[:n]
		}
		if tr != nil {
			for _, i := range s.cands { // eligible, but the slots went to others
				tr.set(i, WhyLostDraw, -1)
			}
		}
	}
	switch {
	case len(out) > first:
		return out, Filled
	case refused:
		return out, NoFillCapped
	case matched:
		return out, NoFillCreative
	case s.ids[dimPlacement] == 0:
		return out, NoFillPlacement
	}
	return out, NoFillTargeting
}

// NoFill is why Decide filled no slot of a request: the furthest the
// request got, in the order the rules are read.
type NoFill uint8

// The causes of a request left unfilled.
const (
	Filled NoFill = iota // a slot or more filled
	// NoFillPlacement: no line item names the request's placement, and
	// none that names no placement admits the request.
	NoFillPlacement
	// NoFillTargeting: line items name the placement, but none's flight,
	// hours and targeting admit the request.
	NoFillTargeting
	// NoFillCreative: line items admit the request, but none has a
	// creative of its format and size.
	NoFillCreative
	// NoFillCapped: eligible line items, all held back by Counters (a
	// frequency cap, a budget, an impression limit or pacing).
	NoFillCapped
	// NumNoFills counts the causes.
	NumNoFills
)

var noFillNames = [NumNoFills]string{Filled: "filled", NoFillPlacement: "placement_unknown", NoFillTargeting: "targeting",
	NoFillCreative: "no_creative_fits", NoFillCapped: "capped"}

// String is the cause's label: placement_unknown, targeting,
// no_creative_fits, capped (filled for Filled).
func (n NoFill) String() string {
	if n < NumNoFills {
		return noFillNames[n]
	}
	return "unknown"
}

// draw picks one of cands (not empty) and returns its index: at random in
// proportion to the weights, among those of the highest CPM with
// req.ByValue.
func (ix *Index) draw(req *Request, cands []int32, rnd *rand.Rand) int {
	var top tsubame.Money
	if req.ByValue {
		for _, i := range cands {
			top = max(top, ix.lines[i].CPM)
		}
	}
	var total uint64
	for _, i := range cands {
		if l := &ix.lines[i]; !req.ByValue || l.CPM == top {
			total += uint64(l.Weight)
		}
	}
	r := uint64N(rnd, total)
	k := 0
	for ; k < len(cands)-1; k++ {
		l := &ix.lines[cands[k]]
		if req.ByValue && l.CPM != top {
			continue
		}
		w := uint64(l.Weight)
		if r < w {
			break
		}
		r -= w
	}
	return k
}

func uint64N(rnd *rand.Rand, n uint64) uint64 {
	if rnd == nil {
		return rand.Uint64N(n)
	}
	return rnd.Uint64N(n)
}

// resolve turns the request's strings into ids and gathers the posting
// lists of its terms.
func (ix *Index) resolve(req *Request, s *scratch) {
	vals := [numDims]string{
		dimPlacement: req.Placement, dimApp: req.App, dimCountry: req.Country,
		dimRegion: req.Region, dimDevice: req.Device, dimOS: req.OS, dimBrowser: req.Browser,
	}
	for d, v := range vals {
		s.ids[d] = ix.dicts[d].id(v) // 0 when no line item names it
	}
	s.sites = s.sites[:0]
	for d := req.Site; d != "" && len(s.sites) < maxSiteIDs; {
		if id := ix.dicts[dimSite].id(d); id != 0 {
			s.sites = append(s.sites, id)
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			break
		}
		d = d[i+1:]
	}
	s.kvs, s.keys = s.kvs[:0], s.keys[:0]
	for _, kv := range req.KeyValues[:min(len(req.KeyValues), MaxKeyValues)] {
		if id := ix.kvs.id(kvKey{kv.Key, kv.Value}); id != 0 && !slices.Contains(s.kvs, id) {
			s.kvs = append(s.kvs, id)
			s.keys = append(s.keys, kv.Key)
		}
	}
	s.deals, s.dmins = s.deals[:0], s.dmins[:0]
	for k, d := range req.Deals[:min(len(req.Deals), MaxDeals)] {
		if id := ix.deals.id(d); id != 0 {
			var m tsubame.Money
			if k < len(req.DealMins) {
				m = req.DealMins[k]
			}
			s.deals, s.dmins = append(s.deals, id), append(s.dmins, m)
		}
	}
	s.bcats = s.bcats[:0]
	for _, c := range req.BlockedCategories {
		if id := ix.cats.id(c); id != 0 {
			s.bcats = append(s.bcats, id)
		}
	}
	slices.Sort(s.bcats)
	s.badvs = s.badvs[:0]
	for _, d := range req.BlockedDomains {
		as, _ := ix.advDomains.get(d)
		s.badvs = append(s.badvs, as...)
	}
	slices.Sort(s.badvs)
	s.badvs = slices.Compact(s.badvs)
	s.bapps = s.bapps[:0]
	for _, a := range req.BlockedApps {
		if id := ix.apps.id(a); id != 0 {
			s.bapps = append(s.bapps, id)
		}
	}
	slices.Sort(s.bapps)
	for i := range s.zone {
		s.zone[i] = -1
	}
	s.offs = s.offs[:0]
	if len(req.Offers) > 0 {
		s.offs = append(s.offs, req.Offers[:min(len(req.Offers), MaxOffers)]...)
	} else {
		s.offs = append(s.offs, Offer{Format: req.Format, W: req.W, H: req.H, Sizes: req.Sizes, MIMEs: req.MIMEs,
			MinDuration: req.MinDuration, MaxDuration: req.MaxDuration})
	}

	s.terms, s.gpos = s.terms[:0], s.gpos[:0]
	for d := range numDims {
		if d == dimSite {
			for _, id := range s.sites {
				ix.addTerm(s, d, id)
			}
			continue
		}
		ix.addTerm(s, d, s.ids[d])
	}
	for _, id := range s.kvs {
		ix.addTerm(s, attrKV, id)
	}
	deals := 0
	for k, id := range s.deals {
		if !slices.Contains(s.deals[:k], id) { // one term per deal however often it is offered
			ix.addTerm(s, attrDeal, id)
			deals++
		}
	}
	s.multi = deals > 1
	for k := 1; k < len(s.keys) && !s.multi; k++ {
		s.multi = slices.Contains(s.keys[:k], s.keys[k])
	}
}

// match reports why l's flight, time or targeting does not admit the
// request (the first rule that fails, in the order below), or WhyEligible.
func (ix *Index) match(l *Line, req *Request, now time.Time, s *scratch) Why {
	if s.now < l.start {
		return WhyNotStarted
	}
	if s.now >= l.end {
		return WhyEnded
	}
	if len(l.deals) > 0 {
		ok := false
		for k, id := range s.deals {
			if l.CPM >= s.dmins[k] && has(l.deals, id) {
				ok = true
				break
			}
		}
		if !ok {
			return WhyDeal
		}
	} else if req.PrivateAuction || l.CPM < req.MinCPM {
		return WhyFloor
	}
	if len(s.badvs) > 0 {
		if _, blocked := slices.BinarySearch(s.badvs, l.adv); blocked {
			return WhyBlockedAdvertiser
		}
	}
	if l.timed {
		z := s.zone[l.zone]
		if z < 0 {
			t := now.In(ix.zones[l.zone])
			z = int16(t.Hour())<<3 | int16(t.Weekday())
			s.zone[l.zone] = z
		}
		if l.hours&(1<<(z>>3)) == 0 {
			return WhyHour
		}
		if l.days&(1<<(z&7)) == 0 {
			return WhyWeekday
		}
	}
	for m := l.dims; m != 0; m &= m - 1 {
		d := bits.TrailingZeros16(m)
		inc, exc := l.incl(d), l.excl(d)
		if d == dimSite {
			if len(inc) > 0 && !anyIn(s.sites, inc) || len(exc) > 0 && anyIn(s.sites, exc) {
				return dimWhy[d]
			}
			continue
		}
		id := s.ids[d]
		if len(inc) > 0 && !has(inc, id) || len(exc) > 0 && has(exc, id) {
			return dimWhy[d]
		}
	}
	for _, vals := range l.kvIncl {
		if !anyIn(s.kvs, vals) {
			return WhyKeyValues
		}
	}
	if len(l.kvExcl) > 0 && anyIn(s.kvs, l.kvExcl) {
		return WhyKeyValues
	}
	return WhyEligible
}

// fits reports why l may not join the decisions already chosen (the same
// advertiser as one, or no creative of the slot's format and size whose
// categories none of them has), or WhyEligible.
func (ix *Index) fits(l *Line, req *Request, chosen []Decision, s *scratch) Why {
	for _, d := range chosen {
		if d.Line.adv == l.adv {
			return WhySameAdvertiser
		}
	}
	for _, c := range l.creatives {
		if ix.creativeFits(c, req, chosen, s) {
			return WhyEligible
		}
	}
	return WhyNoCreativeFits
}

func (ix *Index) creativeFits(c int32, req *Request, chosen []Decision, s *scratch) bool {
	cr := &ix.creatives[c]
	if req.Secure && !cr.secure {
		return false
	}
	offered := false
	for k := range s.offs {
		if offered = cr.fits(&s.offs[k]); offered {
			break
		}
	}
	if !offered {
		return false
	}
	if len(s.bcats) > 0 && sharesAny(s.bcats, cr.blocks) {
		return false
	}
	if cr.app != 0 && len(s.bapps) > 0 {
		if _, blocked := slices.BinarySearch(s.bapps, cr.app); blocked {
			return false
		}
	}
	for _, d := range chosen {
		if sharesAny(ix.creatives[d.cr].cats, cr.cats) {
			return false
		}
	}
	return true
}

// fits reports whether cr is of o's format, size, type and duration.
func (cr *creative) fits(o *Offer) bool {
	if o.Format != "" && cr.format != o.Format {
		return false
	}
	if len(o.Sizes) > 0 {
		if !hasSize(o.Sizes, cr.c.W, cr.c.H) {
			return false
		}
	} else if o.W > 0 && cr.c.W != o.W || o.H > 0 && cr.c.H != o.H {
		return false
	}
	return !(len(o.MIMEs) > 0 && !anyString(o.MIMEs, cr.c.MIMEs) ||
		o.MinDuration > 0 && cr.c.Duration < o.MinDuration || o.MaxDuration > 0 && cr.c.Duration > o.MaxDuration)
}

func hasSize(sizes []Size, w, h int) bool {
	for _, sz := range sizes {
		if sz.W == w && sz.H == h {
			return true
		}
	}
	return false
}

// anyString reports whether a and b share a value.
func anyString(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// pickCreative chooses at random among l's creatives that fit; fits(l)
// has said there is one.
func (ix *Index) pickCreative(l *Line, req *Request, chosen []Decision, s *scratch, rnd *rand.Rand) int32 {
	n := 0
	for _, c := range l.creatives {
		if ix.creativeFits(c, req, chosen, s) {
			n++
		}
	}
	k := int(uint64N(rnd, uint64(n)))
	for _, c := range l.creatives {
		if ix.creativeFits(c, req, chosen, s) {
			if k == 0 {
				return c
			}
			k--
		}
	}
	return l.creatives[0] // not reached
}

// has reports whether the sorted list holds id.
func has(list []uint32, id uint32) bool {
	if len(list) <= 8 {
		for _, v := range list {
			if v == id {
				return true
			}
		}
		return false
	}
	_, ok := slices.BinarySearch(list, id)
	return ok
}

// anyIn reports whether the sorted list holds any of ids.
func anyIn(ids, list []uint32) bool {
	for _, id := range ids {
		if has(list, id) {
			return true
		}
	}
	return false
}

// sharesAny reports whether two sorted lists have a value in common.
func sharesAny(a, b []uint32) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			return true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return false
}

// HoldShares is a whole price in Request.HoldShare.
const HoldShares = 1024

// HoldByWinRate is a Request.HoldShare: the bound of the line item's win
// rate as the Counters measure it.
const HoldByWinRate = -1

// holdSpans is how many spans a reservation's holds are counted in: see
// HoldEnd.
const holdSpans = 16

// HoldEnd returns when a reservation of length reservation made at now
// ends, as a request's ReserveUntil and its tracking URLs carry it: now
// plus reservation, rounded up to the second, or for a reservation of
// over holdSpans seconds to a span of a sixteenth of it in whole
// seconds. A node counts what it holds per line item and end, so the
// spans bound what it keeps: with the default 10-minute reservation, 16
// or 17 counts a line item rather than one a second (600), whatever the
// traffic. Rounding up holds no hold for less than the reservation, and
// at most a span (6 %) longer.
//
// A bid with a win window (Request.WinBy) is given back at its window,
// not its end: its reservation's end is rounded to the second alone
// (pass a reservation of at most holdSpans seconds, or round it so), lest
// a span's later bids keep its earlier ones past their windows.
func HoldEnd(now time.Time, reservation time.Duration) time.Time {
	span := max(time.Second, (reservation / holdSpans).Truncate(time.Second))
	return RoundUp(now.Add(reservation), span)
}

// RoundUp returns t rounded up to a multiple of d since the Unix epoch
// (d at least a second, in whole seconds).
func RoundUp(t time.Time, d time.Duration) time.Time {
	s := int64(d / time.Second)
	u := t.Unix()
	if t.Nanosecond() > 0 {
		u++
	}
	if r := u % s; r != 0 {
		u += s - r
	}
	return time.Unix(u, 0).In(t.Location())
}
