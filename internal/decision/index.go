package decision

import (
	"fmt"
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
	// Ord is the line's position in this Index, 0 to Len()-1: a dense key
	// for counters held in arrays (not stable across compiles: the ID is).
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

// domains returns the index's copy of advertiser adv's domains, one for
// all its line items.
func (ix *Index) domains(adv string, domains map[string][]string) []string {
	d, ok := ix.advDomainLists[adv]
	if !ok {
		d = slices.Clone(domains[adv])
		ix.advDomainLists[adv] = d
	}
	return d
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

// compiles numbers the compiles of this process (Line.Gen).
var compiles atomic.Uint64

// Index is an immutable, compiled campaign set. It is safe for concurrent
// use: any number of goroutines may call Decide at once.
type Index struct {
	compiled  time.Time // Options.Now
	lines     []Line
	creatives []creative
	zones     []*time.Location
	counters  Counters

	dicts [numDims]map[string]uint32 // value -> id (ids from 1)
	kvs   map[kvKey]uint32
	deals map[string]uint32
	cats  map[string]uint32
	apps  map[string]uint32 // the apps creatives promote, interned
	// advDomains lists, per advertiser domain, the interned advertisers
	// that have it: a request's blocked domains resolve through it.
	advDomains map[string][]int32
	// advDomainLists is each advertiser's copy of its domains, which its
	// line items share (Line.Domains): used while compiling.
	advDomainLists map[string][]string
	// byID finds a line item and a creative by id (Lookup).
	lineByID     map[string]int32
	creativeByID map[string]int32

	// post are the posting lists of the targeting index (filing.go), per
	// attribute and interned value; zero lists, per priority, the line
	// items with no ∈ predicate.
	post [numAttrs][]groups
	zero [tsubame.MaxPriority + 1][]uint32

	pool sync.Pool // *scratch
}

// Compiled is the time the index was compiled for (Options.Now).
func (ix *Index) Compiled() time.Time { return ix.compiled }

// Len returns the number of line items that may serve.
func (ix *Index) Len() int { return len(ix.lines) }

// Line returns the line item of ordinal ord.
func (ix *Index) Line(ord int) *Line { return &ix.lines[ord] }

// Lookup returns the decision of line item lineID with creative
// creativeID, both still in the index (the creative approved and the
// line item's): what a win notice serves the markup of.
func (ix *Index) Lookup(lineID, creativeID string) (Decision, bool) {
	li, ok1 := ix.lineByID[lineID]
	cr, ok2 := ix.creativeByID[creativeID]
	if !ok1 || !ok2 {
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
	li, ok := ix.lineByID[id]
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
// paused, when it has no approved creative, when its flight within its
// campaign's is empty, or when that flight ended before opt.Now.
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
	ix := &Index{compiled: now, counters: opt.Counters, kvs: map[kvKey]uint32{}, deals: map[string]uint32{}, cats: map[string]uint32{}, apps: map[string]uint32{},
		advDomains: map[string][]int32{}, lineByID: map[string]int32{}, creativeByID: map[string]int32{}}
	if ix.counters == nil {
		ix.counters = NoCounters{}
	}
	for d := range ix.dicts {
		ix.dicts[d] = map[string]uint32{}
	}

	ix.advDomainLists = map[string][]string{}
	advs := map[string]int32{}
	domains := map[string][]string{} // advertiser id -> its domains
	for _, a := range set.Advertisers {
		domains[a.ID] = a.Domains
	}
	camps := map[string]*tsubame.Campaign{}
	for _, c := range set.Campaigns {
		camps[c.ID] = c
	}
	crIdx := map[string]int32{}
	for _, c := range set.Creatives {
		if c.Status != tsubame.StatusApproved {
			continue
		}
		cr := creative{c: c.Clone(), format: c.Format, secure: secureCreative(c)}
		for _, cat := range c.Categories {
			cr.cats = append(cr.cats, intern(ix.cats, cat))
			cr.blocks = append(cr.blocks, intern(ix.cats, cat))
			if top, _, sub := strings.Cut(cat, "-"); sub {
				cr.blocks = append(cr.blocks, intern(ix.cats, top))
			}
		}
		if c.App != "" {
			cr.app = intern(ix.apps, c.App)
		}
		slices.Sort(cr.cats)
		slices.Sort(cr.blocks)
		cr.blocks = slices.Compact(cr.blocks)
		crIdx[c.ID] = int32(len(ix.creatives))
		ix.creativeByID[c.ID] = int32(len(ix.creatives))
		ix.creatives = append(ix.creatives, cr)
	}
	zoneIdx := map[string]int32{}
	nowNs := now.UnixNano()

	for _, li := range set.LineItems {
		camp := camps[li.Campaign]
		if camp == nil { // Validate refuses this; keep Compile total
			return nil, tsubame.Errorf(tsubame.EINVALID, "line item %q: campaign %q does not exist", li.ID, li.Campaign)
		}
		start, end := flight(camp.Start, li.Start, camp.End, li.End)
		if start >= end || end <= nowNs || li.Paused() {
			continue
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
		l.Gen = gen
		for _, id := range li.Creatives {
			if i, ok := crIdx[id]; ok {
				l.creatives = append(l.creatives, i)
			}
		}
		if len(l.creatives) == 0 {
			continue
		}
		a, ok := advs[camp.Advertiser]
		if !ok {
			a = int32(len(advs))
			advs[camp.Advertiser] = a
			for _, d := range domains[camp.Advertiser] {
				ix.advDomains[d] = append(ix.advDomains[d], a)
			}
		}
		l.adv = a
		l.Domains = ix.domains(camp.Advertiser, domains)
		l.Deals = slices.Clone(li.Deals)

		tz := camp.Timezone
		if tz == "" {
			tz = tsubame.DefaultTimezone
		}
		z, ok := zoneIdx[tz]
		if !ok {
			loc, err := camp.Location()
			if err != nil {
				return nil, fmt.Errorf("cannot load time zone %q of campaign %q: %w", tz, camp.ID, err)
			}
			z = int32(len(ix.zones))
			zoneIdx[tz] = z
			ix.zones = append(ix.zones, loc)
		}
		l.zone, l.Zone = z, ix.zones[z]

		t := &li.Targeting
		l.hours, l.days = 1<<24-1, 1<<7-1
		if t.Hours != nil {
			l.hours = hourMask(*t.Hours)
		}
		if len(t.Weekdays) > 0 {
			l.days = dayMask(t.Weekdays)
		}
		if x := t.Exclude; x != nil {
			if x.Hours != nil {
				l.hours &^= hourMask(*x.Hours)
			}
			if len(x.Weekdays) > 0 {
				l.days &^= dayMask(x.Weekdays)
			}
		}
		if l.hours == 0 || l.days == 0 {
			continue // excluded at every hour or on every day
		}
		l.timed = l.hours != 1<<24-1 || l.days != 1<<7-1

		for _, d := range li.Deals {
			l.deals = append(l.deals, intern(ix.deals, d))
		}
		slices.Sort(l.deals)
		incl := ix.compileCriteria(&t.Criteria)
		for k, vs := range t.KeyValues {
			var ids []uint32
			for _, v := range vs {
				ids = append(ids, internKV(ix.kvs, k, v))
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
					l.kvExcl = append(l.kvExcl, internKV(ix.kvs, k, v))
				}
			}
			slices.Sort(l.kvExcl)
		}
		l.setTargets(&incl, &excl)
		l.Ord = len(ix.lines)
		ix.lineByID[l.ID] = int32(l.Ord)
		ix.lines = append(ix.lines, l)
	}
	if len(ix.lines) > math.MaxInt32 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "%d line items: more than an index holds", len(ix.lines))
	}

	ix.file()
	ix.advDomainLists = nil
	ix.pool.New = func() any { return ix.newScratch() }
	return ix, nil
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
func (ix *Index) keyValues(d int, ids []uint32, siteNames []string) []uint32 {
	if d != dimSite {
		return ids
	}
	var out []uint32
	for _, id := range ids {
		covered := false
		for s := siteNames[id]; ; {
			i := strings.IndexByte(s, '.')
			if i < 0 {
				break
			}
			s = s[i+1:]
			if sid, ok := ix.dicts[dimSite][s]; ok && has(ids, sid) {
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
			out[d] = append(out[d], intern(ix.dicts[d], v))
		}
		slices.Sort(out[d])
		out[d] = slices.Compact(out[d])
	}
	return out
}

func intern(m map[string]uint32, s string) uint32 {
	if id, ok := m[s]; ok {
		return id
	}
	id := uint32(len(m) + 1)
	m[s] = id
	return id
}

func internKV(m map[kvKey]uint32, k, v string) uint32 {
	key := kvKey{k, v}
	if id, ok := m[key]; ok {
		return id
	}
	id := uint32(len(m) + 1)
	m[key] = id
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
