package decision

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
)

// Targeting dimensions held as interned ids.
const (
	dimPlacement = iota
	dimSite
	dimApp
	dimCountry
	dimRegion
	dimDevice
	dimOS
	dimBrowser
	numDims
)

// Options tune Compile.
type Options struct {
	// Now is the time of compiling (time.Now when zero): line items whose
	// flight has ended by then are left out.
	Now time.Time
	// Counters is asked whether a line item may serve (NoCounters when nil).
	Counters Counters
}

// Line is a compiled line item: what a Decision names and what Counters
// are asked about. It is the Index's own and must not be modified.
type Line struct {
	ID         string
	Campaign   string
	Advertiser string
	Priority   int
	Weight     int
	CPM        tsubame.Money
	// Ord is the line's position in this Index's array of line items
	// (Line(Ord)): below Len() after a compile; a patch appends the line
	// items it compiles after the others, and the ones they replace keep
	// their ordinals, out of the index (not stable across compiles or
	// patches: the ID is).
	Ord int
	// Frequency are the line item's frequency caps (none: uncapped), for
	// Counters to count per visitor; the Index's own copy.
	Frequency []tsubame.FrequencyCap
	// Limits are the line item's impression limits, Budget and Pacing its
	// campaign's (the Index's own copy of the hour weights), Zone the
	// campaign's time zone (the day of daily limits and budgets): for
	// Counters to keep.
	Limits tsubame.ImpressionLimits
	Budget tsubame.Budget
	Pacing tsubame.Pacing
	Zone   *time.Location
	// Limited reports whether the line item has an impression limit, or
	// its campaign a budget and it a price: whether serving it costs what
	// Counters keep.
	Limited bool
	// Gen is the compile the Line belongs to: a Line of a later compile
	// has a larger one, so that Counters can tell a decision still running
	// on an index that was replaced.
	Gen uint64
	// Domains are the advertiser's landing-page domains (OpenRTB's
	// adomain); the Index's own copy.
	Domains []string
	// Deals are the line item's deal ids (none: it bids in open
	// auctions); the Index's own copy.
	Deals []string

	adv       int32   // interned advertiser
	creatives []int32 // approved creatives, indexes into Index.creatives
	start     int64   // flight (campaign ∩ line), Unix nanoseconds, end excluded
	end       int64
	campStart int64 // the campaign's flight
	campEnd   int64
	zone      int32  // index into Index.zones
	hours     uint32 // bit h set: hour h (in the zone) may serve
	days      uint8  // bit d set: weekday d (Sunday 0) may serve
	timed     bool   // hours or days restrict it
	dims      uint16 // bit d set: incl[d] or excl[d] is not empty
	deals     []uint32
	// targ holds the include lists of the dimensions, then their exclude
	// lists, each sorted (incl, excl): one slice rather than sixteen.
	targ   []uint32
	targAt [2*numDims + 1]uint32
	kvIncl [][]uint32 // per targeted key, its sorted (key, value) ids
	kvExcl []uint32   // sorted (key, value) ids
}

// setTargets keeps the include and exclude lists of each dimension.
func (l *Line) setTargets(incl, excl *[numDims][]uint32) {
	n := 0
	for d := range numDims {
		n += len(incl[d]) + len(excl[d])
	}
	if n > 0 {
		l.targ = make([]uint32, 0, n)
	}
	for i, lists := range [2]*[numDims][]uint32{incl, excl} {
		for d, list := range lists {
			l.targAt[i*numDims+d] = uint32(len(l.targ))
			l.targ = append(l.targ, list...)
			if len(list) > 0 {
				l.dims |= 1 << d
			}
		}
	}
	l.targAt[2*numDims] = uint32(len(l.targ))
}

// incl is the include list of dimension d (empty: any value), sorted.
func (l *Line) incl(d int) []uint32 { return l.targ[l.targAt[d]:l.targAt[d+1]] }

// excl is the exclude list of dimension d, sorted.
func (l *Line) excl(d int) []uint32 { return l.targ[l.targAt[numDims+d]:l.targAt[numDims+d+1]] }

// Flight returns the line item's flight (its campaign's window narrowed by
// its own), in Unix nanoseconds, end excluded: math.MinInt64 and
// math.MaxInt64 where it is unbounded.
func (l *Line) Flight() (start, end int64) { return l.start, l.end }

// CampaignFlight returns the campaign's window as Flight does.
func (l *Line) CampaignFlight() (start, end int64) { return l.campStart, l.campEnd }

// creative is an approved creative as the picker sees it.
type creative struct {
	c      *tsubame.Creative // a copy owned by the Index
	format string
	cats   []uint32 // sorted interned IAB categories
	// blocks are cats and their top-level categories (IAB7 for IAB7-39),
	// sorted: what a request's blocked categories are matched against.
	blocks []uint32
	app    uint32 // the app it promotes, interned; 0: none
	// secure: every URL it loads or leads to is https (Request.Secure).
	secure bool
}

type kvKey struct{ k, v string }

// compiles numbers the compiles and patches of this process (Line.Gen).
var compiles atomic.Uint64

// Index is an immutable, compiled campaign set. It is safe for concurrent
// use: any number of goroutines may call Decide at once.
//
// A patched Index (Patch) shares what did not change with the one it was
// patched from: the line items' array (a patch appends to the room Compile
// left after them, which the older index never reads), the dictionaries'
// bases and the posting lists it did not touch.
type Index struct {
	compiled time.Time // Options.Now
	// id numbers this compile or patch; from is the id of the index it
	// was patched from and fromLen the line items that one held (0: a
	// compile). The line items past fromLen are the patch's.
	id, from uint64
	fromLen  int
	// compiledLen is how many line items the compile the index comes from
	// held: past them is the room patches append to.
	compiledLen int
	lines       []Line
	// dead marks the ordinals a patch replaced or removed (nil: none);
	// live counts the others.
	dead      []uint64
	live      int
	started   []int32 // the line items whose flight a patch saw start
	creatives []creative
	zones     []*time.Location
	zoneNames []string
	counters  Counters
	// edge is the first start or end of a live line item's flight after
	// compiled (math.MaxInt64: none): until then the clock changes
	// nothing a patch for it would (Stale).
	edge int64

	dicts [numDims]ids[string] // value -> id (ids from 1)
	kvs   ids[kvKey]
	deals ids[string]
	cats  ids[string]
	apps  ids[string] // the apps creatives promote, interned
	// siteNames[id] is the site of dicts[dimSite]'s id: filing reads it.
	siteNames []string
	// advDomains lists, per advertiser domain, the interned advertisers
	// that have it: a request's blocked domains resolve through it.
	advDomains dict[string, []int32]
	// advs interns the advertisers of the line items (Line.adv), and
	// advDomainLists keeps each one's domains, which its line items share
	// (Line.Domains).
	advs           ids[string]
	advDomainLists dict[string, []string]
	// byID finds a line item and a creative by id (Lookup); a patch
	// marks one it removed -1.
	lineByID     dict[string, int32]
	creativeByID dict[string, int32]

	// post are the posting lists of the targeting index (filing.go), per
	// attribute and interned value; zero lists, per priority, the line
	// items with no ∈ predicate. named counts, per attribute and value,
	// the line items of the compile that name it with ∈: how rare a
	// predicate is, which files a line item (a patch files by the
	// compile's counts, so that it finds where it filed one).
	post  [numAttrs][]groups
	zero  [tsubame.MaxPriority + 1][]uint32
	named [numAttrs][]int32

	pool sync.Pool // *scratch
}

// Compiled is the time the index was compiled for (Options.Now).
func (ix *Index) Compiled() time.Time { return ix.compiled }

// Len returns the number of line items that may serve.
func (ix *Index) Len() int { return ix.live }

// Line returns the line item of ordinal ord (Line.Ord).
func (ix *Index) Line(ord int) *Line { return &ix.lines[ord] }

// isDead reports whether a patch replaced or removed ordinal i.
func (ix *Index) isDead(i int) bool {
	return ix.dead != nil && ix.dead[i>>6]&(1<<(i&63)) != 0
}

// Lines yields the line items that may serve, in ordinal order.
func (ix *Index) Lines() iter.Seq[*Line] {
	return ix.linesFrom(0)
}

func (ix *Index) linesFrom(first int) iter.Seq[*Line] {
	return func(yield func(*Line) bool) {
		for i := first; i < len(ix.lines); i++ {
			if !ix.isDead(i) && !yield(&ix.lines[i]) {
				return
			}
		}
	}
}

// Fresh yields the line items of ix that prev did not hold as they are,
// or whose flight started since prev was compiled: when ix was patched
// from prev, those the patch compiled (new or changed) and started; else
// every one.
func (ix *Index) Fresh(prev *Index) iter.Seq[*Line] {
	if prev != nil && ix.from == prev.id {
		return ix.freshLines()
	}
	return ix.Lines()
}

// lineOrd returns the ordinal of line item id, if it may serve.
func (ix *Index) lineOrd(id string) (int32, bool) {
	o, ok := ix.lineByID.get(id)
	return o, ok && o >= 0
}

// Lookup returns the decision of line item lineID with creative
// creativeID, both still in the index (the creative approved and the
// line item's): what a win notice serves the markup of.
func (ix *Index) Lookup(lineID, creativeID string) (Decision, bool) {
	li, ok1 := ix.lineOrd(lineID)
	cr, ok2 := ix.creativeByID.get(creativeID)
	if !ok1 || !ok2 || cr < 0 {
		return Decision{}, false
	}
	l := &ix.lines[li]
	for _, c := range l.creatives {
		if c == cr {
			return Decision{Line: l, Creative: ix.creatives[cr].c, cr: cr}, true
		}
	}
	return Decision{}, false
}

// LineByID returns line item id, if it is in the index: what a win
// notice counts a frequency cap of.
func (ix *Index) LineByID(id string) (*Line, bool) {
	li, ok := ix.lineOrd(id)
	if !ok {
		return nil, false
	}
	return &ix.lines[li], true
}

// Compile builds an Index from set, which it does not keep or modify. It
// is meant to run when the set changes, off the request path. It returns
// the set's validation error (EINVALID) when the set breaks a rule of the
// model, since a decision over such a set could not be trusted.
//
// Only approved creatives are kept; a line item is left out when it is
// archived, when it or its campaign is paused, when it has no approved
// creative, when its flight within its campaign's is empty, or when that
// flight ended before opt.Now.
func Compile(set *tsubame.CampaignSet, opt Options) (*Index, error) {
	if set == nil {
		return nil, tsubame.Errorf(tsubame.EINVALID, "no campaign set to compile")
	}
	if err := set.Validate(); err != nil {
		return nil, err
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	gen := compiles.Add(1)
	ix := &Index{compiled: now, id: gen, counters: opt.Counters, edge: math.MaxInt64,
		kvs: newIDs[kvKey](), deals: newIDs[string](), cats: newIDs[string](), apps: newIDs[string](),
		advDomains: newDict[string, []int32](), advs: newIDs[string](), advDomainLists: newDict[string, []string](),
		lineByID: newDict[string, int32](), creativeByID: newDict[string, int32](), siteNames: []string{""}}
	if ix.counters == nil {
		ix.counters = NoCounters{}
	}
	for d := range ix.dicts {
		ix.dicts[d] = newIDs[string]()
	}
	for _, c := range set.Creatives {
		if approved(c) {
			ix.addCreative(c)
		}
	}
	lc := newLineContext(set, now, gen, nil)
	// Room for a patch's line items after these (Patch): an eighth more,
	// which a patch's appends use without moving the ones in use.
	n := len(set.LineItems)
	ix.lines = make([]Line, 0, n+n/8+64)
	for _, li := range set.LineItems {
		l, why, err := ix.compileLine(li, lc)
		if err != nil {
			return nil, err
		}
		if why == WhyEligible {
			ix.addLine(l)
		}
	}
	if len(ix.lines) > math.MaxInt32 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "%d line items: more than an index holds", len(ix.lines))
	}

	ix.compiledLen = len(ix.lines)
	ix.file()
	for d := range ix.dicts {
		ix.dicts[d].freeze()
	}
	for _, m := range []*ids[string]{&ix.deals, &ix.cats, &ix.apps} {
		m.freeze()
	}
	ix.kvs.freeze()
	ix.advDomains.freeze()
	ix.advs.freeze()
	ix.advDomainLists.freeze()
	ix.lineByID.freeze()
	ix.creativeByID.freeze()
	ix.pool.New = func() any { return ix.newScratch() }
	return ix, nil
}

// lineContext is what compiling a line item reads of its set.
type lineContext struct {
	camps    map[string]*tsubame.Campaign
	domains  map[string][]string // advertiser id -> its domains
	archived map[string]bool     // archived advertisers
	now      int64
	gen      uint64
}

// newLineContext reads set's campaigns (those in need only, when not nil)
// and advertisers' domains for compileLine.
func newLineContext(set *tsubame.CampaignSet, now time.Time, gen uint64, need map[string]bool) *lineContext {
	lc := &lineContext{camps: make(map[string]*tsubame.Campaign, len(set.Campaigns)), domains: make(map[string][]string, len(set.Advertisers)),
		now: now.UnixNano(), gen: gen}
	for _, a := range set.Advertisers {
		lc.domains[a.ID] = a.Domains
	}
	lc.archived = archivedAdvertisers(set)
	for _, c := range set.Campaigns {
		if need == nil || need[c.ID] {
			lc.camps[c.ID] = c
		}
	}
	return lc
}

// archivedAdvertisers returns the ids of set's archived advertisers (nil:
// none, the usual case, which costs no map).
func archivedAdvertisers(set *tsubame.CampaignSet) map[string]bool {
	var out map[string]bool
	for _, a := range set.Advertisers {
		if a != nil && a.Archived() {
			if out == nil {
				out = map[string]bool{}
			}
			out[a.ID] = true
		}
	}
	return out
}

// addCreative interns approved creative c, a copy of it.
func (ix *Index) addCreative(c *tsubame.Creative) {
	cr := creative{c: c.Clone(), format: c.Format, secure: secureCreative(c)}
	for _, cat := range c.Categories {
		cr.cats = append(cr.cats, ix.cats.intern(cat))
		cr.blocks = append(cr.blocks, ix.cats.intern(cat))
		if top, _, sub := strings.Cut(cat, "-"); sub {
			cr.blocks = append(cr.blocks, ix.cats.intern(top))
		}
	}
	if c.App != "" {
		cr.app = ix.apps.intern(c.App)
	}
	slices.Sort(cr.cats)
	slices.Sort(cr.blocks)
	cr.blocks = slices.Compact(cr.blocks)
	ix.creativeByID.put(c.ID, int32(len(ix.creatives)))
	ix.creatives = append(ix.creatives, cr)
}

// addLine appends l, giving it its ordinal.
func (ix *Index) addLine(l Line) {
	l.Ord = len(ix.lines)
	ix.lineByID.put(l.ID, int32(l.Ord))
	ix.lines = append(ix.lines, l)
	ix.live++
	ix.edge = min(ix.edge, l.nextEdge(ix.compiled.UnixNano()))
}

// nextEdge is the first start or end of l's flight after now
// (math.MaxInt64: none).
func (l *Line) nextEdge(now int64) int64 {
	e := int64(math.MaxInt64)
	if l.start > now {
		e = l.start
	}
	if l.end > now {
		e = min(e, l.end)
	}
	return e
}

// compileLine compiles li, interning its values into ix's dictionaries. It
// reports why li cannot serve (archived, it or its campaign paused, its
// campaign or advertiser archived, its flight empty or ended, no approved creative, no hour or day it may
// serve: LeftOut's reasons), or WhyEligible.
func (ix *Index) compileLine(li *tsubame.LineItem, lc *lineContext) (Line, Why, error) {
	camp := lc.camps[li.Campaign]
	if camp == nil { // Validate refuses this; keep Compile total
		return Line{}, 0, tsubame.Errorf(tsubame.EINVALID, "line item %q: campaign %q does not exist", li.ID, li.Campaign)
	}
	start, end := flight(camp.Start, li.Start, camp.End, li.End)
	if why := standing(li, camp, lc.archived[camp.Advertiser], start, end, lc.now); why != WhyEligible {
		return Line{}, why, nil
	}
	campStart, campEnd := flight(camp.Start, time.Time{}, camp.End, time.Time{})
	l := Line{
		ID: li.ID, Campaign: camp.ID, Advertiser: camp.Advertiser,
		Priority: li.Priority, Weight: li.Weight, CPM: li.CPM, Frequency: slices.Clone(li.Frequency),
		Limits: li.Limits.Impressions, Budget: camp.Budget,
		Pacing: tsubame.Pacing{Mode: camp.Pacing.Mode, HourWeights: slices.Clone(camp.Pacing.HourWeights)},
		start:  start, end: end, campStart: campStart, campEnd: campEnd,
	}
	l.Limited = l.Limits != (tsubame.ImpressionLimits{}) || l.Budget != (tsubame.Budget{}) && l.CPM > 0
	l.Gen = lc.gen
	for _, id := range li.Creatives {
		if i, ok := ix.creativeByID.get(id); ok && i >= 0 {
			if a := ix.creatives[i].c.Advertiser; a != camp.Advertiser { // Validate refuses this too
				return Line{}, 0, tsubame.Errorf(tsubame.EINVALID, "line item %q: creative %q belongs to advertiser %q, not to the campaign's advertiser %q", li.ID, id, a, camp.Advertiser)
			}
			l.creatives = append(l.creatives, i)
		}
	}
	if len(l.creatives) == 0 {
		return Line{}, WhyNoApprovedCreative, nil
	}
	a := int32(ix.advs.id(camp.Advertiser))
	if a == 0 {
		a = int32(ix.advs.intern(camp.Advertiser))
		domains := slices.Clone(lc.domains[camp.Advertiser])
		ix.advDomainLists.put(camp.Advertiser, domains)
		for _, d := range domains {
			ix.addAdvDomain(d, a)
		}
	}
	l.adv = a
	l.Domains, _ = ix.advDomainLists.get(camp.Advertiser)
	l.Deals = slices.Clone(li.Deals)

	tz := camp.Timezone
	if tz == "" {
		tz = tsubame.DefaultTimezone
	}
	z := slices.Index(ix.zoneNames, tz)
	if z < 0 {
		loc, err := camp.Location()
		if err != nil {
			return Line{}, 0, fmt.Errorf("cannot load time zone %q of campaign %q: %w", tz, camp.ID, err)
		}
		z = len(ix.zones)
		ix.zones = append(ix.zones, loc)
		ix.zoneNames = append(ix.zoneNames, tz)
	}
	l.zone, l.Zone = int32(z), ix.zones[z]

	t := &li.Targeting
	l.hours, l.days = timeMasks(t)
	if l.hours == 0 || l.days == 0 {
		return Line{}, WhyNoTime, nil // excluded at every hour or on every day
	}
	l.timed = l.hours != 1<<24-1 || l.days != 1<<7-1

	for _, d := range li.Deals {
		l.deals = append(l.deals, ix.deals.intern(d))
	}
	slices.Sort(l.deals)
	incl := ix.compileCriteria(&t.Criteria)
	for k, vs := range t.KeyValues {
		var ids []uint32
		for _, v := range vs {
			ids = append(ids, ix.kvs.intern(kvKey{k, v}))
		}
		slices.Sort(ids)
		l.kvIncl = append(l.kvIncl, ids)
	}
	slices.SortFunc(l.kvIncl, func(a, b []uint32) int { return len(a) - len(b) }) // cheap keys first
	var excl [numDims][]uint32
	if x := t.Exclude; x != nil {
		excl = ix.compileCriteria(x)
		for k, vs := range x.KeyValues {
			for _, v := range vs {
				l.kvExcl = append(l.kvExcl, ix.kvs.intern(kvKey{k, v}))
			}
		}
		slices.Sort(l.kvExcl)
	}
	l.setTargets(&incl, &excl)
	return l, WhyEligible, nil
}

// approved reports whether creative c may serve (approved and not
// archived): an index keeps it.
func approved(c *tsubame.Creative) bool { return c.Status == tsubame.StatusApproved && !c.Archived }

// standing reports why li, of campaign camp (whose advertiser is archived
// when advArchived) and flight [start, end) (Unix nanoseconds), cannot
// serve at now whatever the request: archived or paused (it, its campaign,
// its advertiser), an empty flight, one ended; else WhyEligible.
func standing(li *tsubame.LineItem, camp *tsubame.Campaign, advArchived bool, start, end, now int64) Why {
	switch {
	case li.Archived():
		return WhyArchived
	case li.Paused():
		return WhyPaused
	case camp.Archived():
		return WhyCampaignArchived
	case camp.Paused():
		return WhyCampaignPaused
	case advArchived:
		return WhyAdvertiserArchived
	case start >= end:
		return WhyEmptyFlight
	case end <= now:
		return WhyEnded
	}
	return WhyEligible
}

// timeMasks returns the hours (24 bits) and weekdays (7 bits, Sunday 0)
// t lets a line item serve, its exclusions taken out.
func timeMasks(t *tsubame.Targeting) (hours uint32, days uint8) {
	hours, days = 1<<24-1, 1<<7-1
	if t.Hours != nil {
		hours = hourMask(*t.Hours)
	}
	if len(t.Weekdays) > 0 {
		days = dayMask(t.Weekdays)
	}
	if x := t.Exclude; x != nil {
		if x.Hours != nil {
			hours &^= hourMask(*x.Hours)
		}
		if len(x.Weekdays) > 0 {
			days &^= dayMask(x.Weekdays)
		}
	}
	return hours, days
}

// addAdvDomain lists interned advertiser a under domain d, never writing
// to a list an older index holds.
func (ix *Index) addAdvDomain(d string, a int32) {
	as, _ := ix.advDomains.get(d)
	if !slices.Contains(as, a) {
		ix.advDomains.put(d, append(slices.Clip(as), a))
	}
}

// secureCreative reports whether every URL of c is https: its image, media
// and click URLs, and any its HTML holds (markup with "http:" anywhere in
// it is taken as loading something over http, which a secure page blocks).
func secureCreative(c *tsubame.Creative) bool {
	for _, u := range [...]string{c.Image, c.Media, c.Click} {
		if u != "" && !hasPrefixFold(u, "https://") {
			return false
		}
	}
	for h := c.HTML; len(h) >= 5; h = h[1:] {
		i := strings.IndexAny(h, "hH")
		if i < 0 {
			break
		}
		h = h[i:]
		if hasPrefixFold(h, "http:") {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// keyValues returns the ids under which a line targeting ids in dimension
// d is filed. For sites, a domain whose suffix is also listed is dropped:
// the suffix's list already reaches it, and a request then finds the line
// in one list only.
func (ix *Index) keyValues(d int, ids []uint32) []uint32 {
	if d != dimSite {
		return ids
	}
	var out []uint32
	for _, id := range ids {
		covered := false
		for s := ix.siteNames[id]; ; {
			i := strings.IndexByte(s, '.')
			if i < 0 {
				break
			}
			s = s[i+1:]
			if sid := ix.dicts[dimSite].id(s); sid != 0 && has(ids, sid) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, id)
		}
	}
	return out
}

func (ix *Index) compileCriteria(c *tsubame.Criteria) [numDims][]uint32 {
	var out [numDims][]uint32
	lists := [numDims][]string{
		dimPlacement: c.Placements, dimSite: c.Sites, dimApp: c.Apps, dimCountry: c.Countries,
		dimRegion: c.Regions, dimDevice: c.Devices, dimOS: c.OS, dimBrowser: c.Browsers,
	}
	for d, vs := range lists {
		for _, v := range vs {
			out[d] = append(out[d], ix.internValue(d, v))
		}
		slices.Sort(out[d])
		out[d] = slices.Compact(out[d])
	}
	return out
}

// internValue interns value v of dimension d, keeping a site's name.
func (ix *Index) internValue(d int, v string) uint32 {
	id := ix.dicts[d].intern(v)
	if d == dimSite && int(id) == len(ix.siteNames) {
		ix.siteNames = append(ix.siteNames, v)
	}
	return id
}

// flight intersects the campaign's and the line item's windows, in Unix
// nanoseconds; a zero time is no bound.
func flight(cs, ls, ce, le time.Time) (start, end int64) {
	start, end = math.MinInt64, math.MaxInt64
	for _, t := range []time.Time{cs, ls} {
		if !t.IsZero() {
			start = max(start, t.UnixNano())
		}
	}
	for _, t := range []time.Time{ce, le} {
		if !t.IsZero() {
			end = min(end, t.UnixNano())
		}
	}
	return start, end
}

// hourMask sets the bits of the hours From up to To (excluded), wrapping
// midnight when From > To.
func hourMask(h tsubame.HourRange) uint32 {
	var m uint32
	for i := h.From; i != h.To; i = (i + 1) % 24 {
		m |= 1 << i
		if h.To == 24 && i == 23 {
			break
		}
	}
	return m
}

func dayMask(days []string) uint8 {
	var m uint8
	for _, d := range days {
		if i := slices.Index(tsubame.Weekdays, d); i >= 0 {
			m |= 1 << i
		}
	}
	return m
}
