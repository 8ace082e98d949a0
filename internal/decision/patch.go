package decision

import (
	"iter"
	"maps"
	"math"
	"slices"
	"time"

	"tsubame"
)

// Patch returns the index of set built from ix rather than compiled whole:
// set must be the set ix was compiled or patched from with changes made
// (tsubame.CampaignSet.Apply). The line items the changes touch (those
// changed, those of a changed campaign or advertiser, those naming a
// changed creative) are compiled again and filed; the line items whose
// flight ended by opt.Now leave; the others, their posting lists and the
// dictionaries are shared with ix. A change to a few line items of a
// million so costs milliseconds where a compile costs seconds.
//
// Patch checks each changed object's own rules and the references of the
// line items it compiles (a store checks each write against the whole
// set; Compile checks the whole set again). It returns nil and no error
// when the changes are too many for the room Compile left after the line
// items (an eighth of them): compile set instead, which also takes back
// the room of the line items patches replaced.
func (ix *Index) Patch(set *tsubame.CampaignSet, changes []tsubame.CampaignChange, opt Options) (*Index, error) {
	if set == nil {
		return nil, tsubame.Errorf(tsubame.EINVALID, "no campaign set to patch")
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	nowNs := now.UnixNano()
	changed := [tsubame.KindLineItem + 1]map[string]tsubame.CampaignObject{}
	for k := range changed {
		changed[k] = map[string]tsubame.CampaignObject{}
	}
	for _, c := range changes {
		if !c.Kind.Valid() {
			return nil, tsubame.Errorf(tsubame.EINVALID, "a change of kind %d", c.Kind)
		}
		changed[c.Kind][c.ID] = c.Object // of two changes of one object, the last
	}
	for _, objs := range changed {
		for _, o := range objs {
			if o != nil {
				if err := o.(interface{ Validate() error }).Validate(); err != nil {
					return nil, err
				}
			}
		}
	}
	// The line items to compile again (nil: to remove), by id.
	touched := map[string]*tsubame.LineItem{}
	need := map[string]bool{} // their campaigns
	for id, o := range changed[tsubame.KindLineItem] {
		li, _ := o.(*tsubame.LineItem)
		touched[id] = li
		if li != nil {
			need[li.Campaign] = true
		}
	}
	var lc *lineContext
	if len(changed[tsubame.KindAdvertiser])+len(changed[tsubame.KindCampaign])+len(changed[tsubame.KindCreative]) > 0 {
		lc = newLineContext(set, now, 0, nil)
		for _, li := range set.LineItems {
			if _, ok := touched[li.ID]; ok {
				continue
			}
			_, camp := changed[tsubame.KindCampaign][li.Campaign]
			adv := false
			if c := lc.camps[li.Campaign]; c != nil {
				_, adv = changed[tsubame.KindAdvertiser][c.Advertiser]
			}
			cr := false
			for _, id := range li.Creatives {
				if _, cr = changed[tsubame.KindCreative][id]; cr {
					break
				}
			}
			if camp || adv || cr {
				touched[li.ID] = li
			}
		}
	} else {
		lc = newLineContext(set, now, 0, need) // the campaigns of the line items changed only
	}
	// The line items whose flight ended leave; those whose flight started
	// are Fresh, for their budgets to be leased ahead.
	var ended, started []int32
	if ix.edge <= nowNs {
		from := ix.compiled.UnixNano()
		for i := range ix.lines {
			l := &ix.lines[i]
			if ix.isDead(i) {
				continue
			}
			if l.end <= nowNs {
				ended = append(ended, int32(i))
			} else if l.start > from && l.start <= nowNs {
				started = append(started, int32(i))
			}
		}
	}
	if len(ix.lines)+len(touched) > cap(ix.lines) {
		return nil, nil
	}

	nx := ix.fork(now)
	lc.gen = nx.id
	for id, o := range changed[tsubame.KindCreative] {
		if _, ok := nx.creativeByID.get(id); ok {
			nx.creativeByID.put(id, -1)
		}
		if c, _ := o.(*tsubame.Creative); c != nil && approved(c) {
			nx.addCreative(c)
		}
	}
	for id, o := range changed[tsubame.KindAdvertiser] {
		if a, _ := o.(*tsubame.Advertiser); a != nil {
			nx.setDomains(id, a.Domains)
		}
	}

	var p patching
	p.init(nx)
	for _, i := range ended {
		p.remove(int(i))
	}
	for _, id := range slices.Sorted(maps.Keys(touched)) {
		if o, ok := nx.lineOrd(id); ok {
			p.remove(int(o))
		}
		li := touched[id]
		if li == nil {
			continue
		}
		l, why, err := nx.compileLine(li, lc)
		if err != nil {
			return nil, err
		}
		if why == WhyEligible {
			nx.addLine(l)
			p.add(len(nx.lines) - 1)
		}
	}
	p.rebuild()
	nx.started = slices.DeleteFunc(started, func(i int32) bool { return nx.isDead(int(i)) })
	if ix.edge <= nowNs {
		// The edge passed: the next one is looked for again. Till then
		// the edge may be earlier than any live line item's (the one that
		// set it replaced or removed): Stale comes early, never late, and
		// this finds the true one.
		nx.edge = math.MaxInt64
		for l := range nx.Lines() {
			nx.edge = min(nx.edge, l.nextEdge(nowNs))
		}
	}
	nx.pool.New = func() any { return nx.newScratch() }
	return nx, nil
}

// fork returns the index a patch at now builds from ix: the line items
// and the compile's tables shared, what patches write copied.
func (ix *Index) fork(now time.Time) *Index {
	nx := &Index{compiled: now, id: compiles.Add(1), from: ix.id, fromLen: len(ix.lines), compiledLen: ix.compiledLen,
		lines: ix.lines, live: ix.live, creatives: ix.creatives, zones: ix.zones, zoneNames: ix.zoneNames,
		counters: ix.counters, edge: ix.edge, siteNames: ix.siteNames,
		kvs: ix.kvs.fork(), deals: ix.deals.fork(), cats: ix.cats.fork(), apps: ix.apps.fork(),
		advDomains: ix.advDomains.fork(), advs: ix.advs.fork(), advDomainLists: ix.advDomainLists.fork(),
		lineByID: ix.lineByID.fork(), creativeByID: ix.creativeByID.fork(),
		post: ix.post, zero: ix.zero, named: ix.named}
	for d := range ix.dicts {
		nx.dicts[d] = ix.dicts[d].fork()
	}
	nx.dead = make([]uint64, (cap(ix.lines)+63)/64)
	copy(nx.dead, ix.dead)
	return nx
}

// setDomains gives advertiser id the domains, where its line items are
// interned (they are compiled again, and take the new list).
func (ix *Index) setDomains(id string, domains []string) {
	a := int32(ix.advs.id(id))
	if a == 0 {
		return
	}
	old, _ := ix.advDomainLists.get(id)
	for _, d := range old {
		if !slices.Contains(domains, d) {
			as, _ := ix.advDomains.get(d)
			ix.advDomains.put(d, slices.DeleteFunc(slices.Clone(as), func(x int32) bool { return x == a }))
		}
	}
	for _, d := range domains {
		ix.addAdvDomain(d, a)
	}
	ix.advDomainLists.put(id, slices.Clone(domains))
}

// patching gathers the posting lists a patch changes.
type patching struct {
	ix    *Index
	f     filing
	terms map[term][]uint64 // the term's new entries, priority<<32 | entry
	zero  map[int][]uint32  // the zero list's, by priority
	owned [numAttrs]bool    // ix.post[a] is the patch's own copy
}

func (p *patching) init(ix *Index) {
	p.ix, p.terms, p.zero = ix, map[term][]uint64{}, map[int][]uint32{}
}

// remove takes line item i out of the index: it is marked dead, and the
// lists it was filed in are rebuilt without it.
func (p *patching) remove(i int) {
	ix := p.ix
	if ix.isDead(i) {
		return
	}
	ix.dead[i>>6] |= 1 << (i & 63)
	ix.live--
	l := &ix.lines[i]
	if o, ok := ix.lineOrd(l.ID); ok && int(o) == i {
		ix.lineByID.put(l.ID, -1)
	}
	ix.filing(l, &p.f)
	for _, t := range p.f.terms {
		if _, ok := p.terms[t]; !ok {
			p.terms[t] = nil
		}
	}
	if p.f.zero {
		if _, ok := p.zero[l.Priority]; !ok {
			p.zero[l.Priority] = nil
		}
	}
}

// add files line item i, which the patch compiled.
func (p *patching) add(i int) {
	l := &p.ix.lines[i]
	p.ix.filing(l, &p.f)
	key := uint64(l.Priority) << 32
	for _, t := range p.f.terms {
		p.terms[t] = append(p.terms[t], key|p.f.entry(t))
	}
	if p.f.zero {
		p.zero[l.Priority] = append(p.zero[l.Priority], uint32(i)<<1|1)
	}
}

// rebuild makes the new lists: each changed one's live entries and those
// added, in copies (the older index keeps reading its own).
func (p *patching) rebuild() {
	ix := p.ix
	sizes := ix.sizes()
	for t, adds := range p.terms {
		if !p.owned[t.attr] {
			post := make([]groups, max(len(ix.post[t.attr]), sizes[t.attr]+1))
			copy(post, ix.post[t.attr])
			ix.post[t.attr], p.owned[t.attr] = post, true
		}
		es := adds
		if int(t.id) < len(ix.post[t.attr]) {
			for _, g := range ix.post[t.attr][t.id] {
				for _, e := range g.ents {
					if !ix.isDead(int(e >> 1)) {
						es = append(es, uint64(g.prio)<<32|uint64(e))
					}
				}
			}
		}
		ix.post[t.attr][t.id] = nil
		if len(es) > 0 {
			ix.post[t.attr][t.id] = makeGroups(es)
		}
	}
	for prio, adds := range p.zero {
		var z []uint32
		for _, e := range ix.zero[prio] {
			if !ix.isDead(int(e >> 1)) {
				z = append(z, e)
			}
		}
		ix.zero[prio] = append(z, adds...)
	}
}

// Crowded reports whether patches have used half the room the compile
// left: time to compile the set again, off the request path, before a
// change finds no room.
func (ix *Index) Crowded() bool {
	return len(ix.lines)-ix.compiledLen > (cap(ix.lines)-ix.compiledLen)/2
}

// Stale reports whether a flight of a line item of ix has started or
// ended since it was compiled: a patch (with no changes) then takes the
// ended ones out and yields the started ones as Fresh.
func (ix *Index) Stale(now time.Time) bool { return ix.edge <= now.UnixNano() }

// freshLines yields the line items a patch compiled, then those whose
// flight started since the index it was patched from.
func (ix *Index) freshLines() iter.Seq[*Line] {
	return func(yield func(*Line) bool) {
		for _, i := range ix.started {
			if !yield(&ix.lines[i]) {
				return
			}
		}
		for l := range ix.linesFrom(ix.fromLen) {
			if !yield(l) {
				return
			}
		}
	}
}
