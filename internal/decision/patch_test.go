package decision

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"tsubame"
)

// patchWorld is a generated world of several advertisers (with domains),
// campaigns (with flights and time zones) and creatives (approved or
// not), whose line items conjWorld targets.
func patchWorld(seed uint64, n int) *tsubame.CampaignSet {
	set := conjWorld(seed, n, -1, 0)
	r := rand.New(rand.NewPCG(seed, 11))
	set.Advertisers, set.Campaigns, set.Creatives = nil, nil, nil
	zones := []string{"", "Asia/Tokyo", "America/New_York"}
	for a := range 4 {
		set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: fmt.Sprint("a", a), Name: "A",
			Domains: []string{fmt.Sprintf("a%d.example", a), "shared.example"}})
		for k := range 3 {
			c := &tsubame.Creative{ID: fmt.Sprintf("cr%d-%d", a, k), Advertiser: fmt.Sprint("a", a), Format: tsubame.FormatBanner,
				W: 300, H: 250, Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved,
				Categories: []string{fmt.Sprintf("IAB%d-%d", 1+a, 1+k)}}
			if k == 2 {
				c.Status = tsubame.StatusPending
			}
			set.Creatives = append(set.Creatives, c)
		}
		for k := range 3 {
			c := &tsubame.Campaign{ID: fmt.Sprintf("c%d-%d", a, k), Advertiser: fmt.Sprint("a", a), Timezone: zones[r.IntN(len(zones))]}
			if k == 2 {
				c.End = conjNow.Add(time.Duration(1+r.IntN(30)) * time.Minute)
			}
			set.Campaigns = append(set.Campaigns, c)
		}
	}
	for _, l := range set.LineItems {
		l.Campaign = set.Campaigns[r.IntN(len(set.Campaigns))].ID
		l.Creatives = lineCreatives(set, r, l.Campaign)
		switch r.IntN(20) {
		case 0:
			l.End = conjNow.Add(time.Duration(1+r.IntN(30)) * time.Minute)
		case 1:
			l.Start = conjNow.Add(time.Duration(1+r.IntN(30)) * time.Minute)
		case 2:
			l.Status = tsubame.StatusPaused
		}
	}
	return set
}

// lineCreatives draws one to three creatives of campaign's advertiser.
func lineCreatives(set *tsubame.CampaignSet, r *rand.Rand, campaign string) []string {
	adv := set.Object(tsubame.KindCampaign, campaign).(*tsubame.Campaign).Advertiser
	var ids []string
	for _, c := range set.Creatives {
		if c.Advertiser == adv && (len(ids) == 0 || r.IntN(2) == 0) {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// mutate draws n changes of set: line items edited (targeting of known
// and new values, priority, flight, pause), added and deleted; campaigns'
// flights, zones, budgets and pauses; creatives approved, rejected, archived and resized;
// advertisers' domains.
func mutate(set *tsubame.CampaignSet, r *rand.Rand, n int, now time.Time, next *int) []tsubame.CampaignChange {
	var out []tsubame.CampaignChange
	for range n {
		switch k := r.IntN(100); {
		case k < 60 || k >= 90 && k < 95:
			var l *tsubame.LineItem
			if k < 60 {
				l = set.LineItems[r.IntN(len(set.LineItems))].Clone()
			} else {
				*next++
				l = &tsubame.LineItem{ID: fmt.Sprint("new-", *next), Campaign: set.Campaigns[r.IntN(len(set.Campaigns))].ID, Weight: 1}
				l.Creatives = lineCreatives(set, r, l.Campaign)
			}
			l.Priority = 1 + r.IntN(4)
			l.Weight = 1 + r.IntN(5)
			l.Status, l.Start, l.End = "", time.Time{}, time.Time{}
			l.Targeting = tsubame.Targeting{}
			l.Deals = nil
			used := map[int]bool{}
			for range 1 + r.IntN(3) {
				a := r.IntN(len(conjAttrs))
				if used[a] {
					continue
				}
				used[a] = true
				vs := conjAttrs[a].values
				vals := pick(r, vs, 1+r.IntN(min(3, len(vs))))
				if v := newValue(a, r.IntN(20)); v != "" && r.IntN(4) == 0 {
					vals = append(vals, v) // a value no line item named yet
				}
				target(l, a, vals, false)
			}
			if r.IntN(5) == 0 {
				a := r.IntN(len(conjAttrs) - 1)
				target(l, a, pick(r, conjAttrs[a].values, 1), true)
			}
			switch r.IntN(8) {
			case 0:
				l.Status = tsubame.StatusPaused
			case 1:
				l.End = now.Add(time.Duration(1+r.IntN(20)) * time.Minute)
			case 2:
				l.Start = now.Add(time.Duration(1+r.IntN(20)) * time.Minute)
			}
			out = append(out, tsubame.CampaignChange{Kind: tsubame.KindLineItem, ID: l.ID, Object: l})
		case k < 70:
			l := set.LineItems[r.IntN(len(set.LineItems))]
			out = append(out, tsubame.CampaignChange{Kind: tsubame.KindLineItem, ID: l.ID})
		case k < 80:
			c := set.Campaigns[r.IntN(len(set.Campaigns))].Clone()
			switch r.IntN(3) {
			case 0:
				c.End = now.Add(time.Duration(1+r.IntN(20)) * time.Minute)
			case 1:
				c.End = time.Time{}
				c.Timezone = []string{"", "Europe/Paris"}[r.IntN(2)]
			case 2:
				c.Budget = tsubame.Budget{Total: tsubame.Money(1 + r.IntN(1000)), Daily: tsubame.Money(r.IntN(2))}
			}
			// A campaign paused, archived or resumed: all its line items
			// leave or come back.
			c.Status = []string{"", tsubame.StatusPaused, "", tsubame.StatusActive, tsubame.StatusArchived}[r.IntN(5)]
			out = append(out, tsubame.CampaignChange{Kind: tsubame.KindCampaign, ID: c.ID, Object: c})
		case k < 90:
			c := set.Creatives[r.IntN(len(set.Creatives))].Clone()
			if c.Status == tsubame.StatusApproved {
				c.Status = tsubame.StatusRejected
			} else {
				c.Status = tsubame.StatusApproved
			}
			if r.IntN(3) == 0 {
				c.W, c.H = 728, 90
			}
			// A creative archived or restored keeps its review.
			c.Archived = r.IntN(4) == 0
			out = append(out, tsubame.CampaignChange{Kind: tsubame.KindCreative, ID: c.ID, Object: c})
		default:
			a := set.Advertisers[r.IntN(len(set.Advertisers))].Clone()
			a.Domains = []string{fmt.Sprintf("d%d.example", r.IntN(6)), fmt.Sprintf("d%d.example", r.IntN(6))}
			a.Domains = slices.Compact(slices.Sorted(slices.Values(a.Domains)))
			// An advertiser archived or restored: all its campaigns' line
			// items leave or come back.
			a.Status = []string{"", "", tsubame.StatusArchived, tsubame.StatusActive}[r.IntN(4)]
			out = append(out, tsubame.CampaignChange{Kind: tsubame.KindAdvertiser, ID: a.ID, Object: a})
		}
	}
	return out
}

// newValue returns value k of attribute a that no generated world names
// ("": a has none).
func newValue(a, k int) string {
	switch conjAttrs[a].name {
	case "placement":
		return fmt.Sprint("pl-new", k)
	case "site":
		return fmt.Sprintf("new%d.example", k)
	case "app":
		return fmt.Sprint("appnew", k)
	case "country":
		return "Y" + string(rune('A'+k))
	case "region":
		return fmt.Sprint("JP-", 60+k)
	case "os":
		return fmt.Sprint("osnew", k)
	case "browser":
		return fmt.Sprint("brnew", k)
	case "kv":
		return fmt.Sprintf("k%d=new%d", k%5, k)
	case "deal":
		return fmt.Sprint("deal-new", k)
	}
	return ""
}

// candidates returns the ids of the line items that match req and have a
// creative that fits it, per priority, each sorted: what Decide draws
// among, whatever ordinals an index gave them.
func (ix *Index) candidates(req *Request) [tsubame.MaxPriority + 1][]string {
	s := ix.newScratch()
	ix.resolve(req, s)
	s.now = req.Time.UnixNano()
	var out [tsubame.MaxPriority + 1][]string
	for p := tsubame.MinPriority; p <= tsubame.MaxPriority; p++ {
		ix.reach(p, s)
		for _, i := range s.hits {
			if l := &ix.lines[i]; ix.match(l, req, req.Time, s) == WhyEligible && ix.fits(l, req, nil, s) == WhyEligible {
				out[p] = append(out[p], l.ID)
			}
		}
		slices.Sort(out[p])
	}
	return out
}

// patchRequests draws requests at now, some blocking a domain or a
// category, some of a size only resized creatives have.
func patchRequests(r *rand.Rand, n int, now time.Time) []Request {
	out := make([]Request, n)
	for i := range out {
		req := conjRequest(r, -1)
		req.Time = now
		switch r.IntN(6) {
		case 0:
			req.BlockedDomains = []string{fmt.Sprintf("d%d.example", r.IntN(6)), fmt.Sprintf("a%d.example", r.IntN(4))}
		case 1:
			req.BlockedCategories = []string{fmt.Sprintf("IAB%d", 1+r.IntN(4))}
		case 2:
			req.W, req.H = 728, 90
		}
		out[i] = req
	}
	return out
}

// TestPatchDecidesAsCompile applies rounds of random changes to generated
// worlds, and the clock's minutes, by Patch, and checks each patched
// index against a compile of the same set at the same time: the same
// line items, with the same settings, creatives and candidates for every
// request; and the index patched from unchanged by the patch.
func TestPatchDecidesAsCompile(t *testing.T) {
	seeds, rounds := uint64(6), 40
	if testing.Short() {
		seeds, rounds = 2, 15
	}
	for seed := range seeds {
		set := patchWorld(seed, 1_500)
		r := rand.New(rand.NewPCG(seed, 13))
		now := conjNow
		ix, err := Compile(set, Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		patched, next := 0, 0
		for round := range rounds {
			n := 1 + r.IntN(10)
			if round%10 == 9 {
				n = 150 // more than the room left, some rounds
			}
			changes := mutate(set, r, n, now, &next)
			now = now.Add(time.Duration(r.IntN(3)) * time.Minute)
			set = set.Apply(changes)
			reqs := patchRequests(r, 150, now)
			before := make([][tsubame.MaxPriority + 1][]string, len(reqs))
			for i := range reqs {
				before[i] = ix.candidates(&reqs[i])
			}
			nx, err := ix.Patch(set, changes, Options{Now: now})
			if err != nil {
				t.Fatalf("seed %d, round %d: %v", seed, round, err)
			}
			want, err := Compile(set, Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			for i := range reqs {
				if got := ix.candidates(&reqs[i]); !slices.EqualFunc(got[:], before[i][:], slices.Equal) {
					t.Fatalf("seed %d, round %d: the index patched from changed: %v, was %v", seed, round, got, before[i])
				}
			}
			if nx == nil {
				ix = want // out of room: the caller compiles
				continue
			}
			patched++
			samePatched(t, fmt.Sprintf("seed %d, round %d", seed, round), set, nx, want, reqs)
			fresh := map[string]bool{}
			for l := range nx.Fresh(ix) {
				fresh[l.ID] = true
			}
			for l := range nx.Lines() {
				start, _ := l.Flight()
				if (l.Gen == nx.id || start > ix.compiled.UnixNano() && start <= now.UnixNano()) && !fresh[l.ID] {
					t.Fatalf("seed %d, round %d: %s compiled or started by the patch, not Fresh", seed, round, l.ID)
				}
			}
			ix = nx
		}
		if patched < rounds/2 {
			t.Fatalf("seed %d: %d of %d rounds patched", seed, patched, rounds)
		}
	}
}

// samePatched checks a patched index against a compile of set.
func samePatched(t *testing.T, at string, set *tsubame.CampaignSet, got, want *Index, reqs []Request) {
	t.Helper()
	if got.Len() != want.Len() {
		t.Fatalf("%s: %d line items, a compile has %d", at, got.Len(), want.Len())
	}
	n := 0
	for range got.Lines() {
		n++
	}
	if n != got.Len() {
		t.Fatalf("%s: Lines yields %d, Len is %d", at, n, got.Len())
	}
	for _, li := range set.LineItems {
		g, ok1 := got.LineByID(li.ID)
		w, ok2 := want.LineByID(li.ID)
		if ok1 != ok2 {
			t.Fatalf("%s: %s in the patched index %v, in a compile's %v", at, li.ID, ok1, ok2)
		}
		if !ok1 {
			continue
		}
		if g.Priority != w.Priority || g.Weight != w.Weight || g.Budget != w.Budget || g.Zone.String() != w.Zone.String() ||
			!slices.Equal(g.Domains, w.Domains) || g.start != w.start || g.end != w.end || g.hours != w.hours {
			t.Fatalf("%s: %s patched %+v, compiled %+v", at, li.ID, *g, *w)
		}
		for _, cr := range set.Creatives {
			_, ok1 := got.Lookup(li.ID, cr.ID)
			_, ok2 := want.Lookup(li.ID, cr.ID)
			if ok1 != ok2 {
				t.Fatalf("%s: %s with %s: patched %v, compiled %v", at, li.ID, cr.ID, ok1, ok2)
			}
		}
	}
	for i := range reqs {
		g, w := got.candidates(&reqs[i]), want.candidates(&reqs[i])
		if !slices.EqualFunc(g[:], w[:], slices.Equal) {
			t.Fatalf("%s: request %+v: patched %v, compiled %v", at, reqs[i], g, w)
		}
	}
	// The next flight edge: never later than a compile's (a start or an
	// end would be missed), earlier only until it passes (Patch then finds
	// the true one: the next round checks it).
	if got.edge > want.edge {
		t.Fatalf("%s: next flight edge patched %d, after a compile's %d", at, got.edge, want.edge)
	}
	if got.edge < want.edge {
		nx, err := got.Patch(set, nil, Options{Now: time.Unix(0, got.edge)})
		if err != nil || nx == nil || nx.edge != want.edge {
			t.Fatalf("%s: a patch at the early edge %d: %v, %v; want the compile's %d", at, got.edge, nx, err, want.edge)
		}
	}
}

// TestPatchRefusesWhatCompileRefuses: a change breaking an object's
// rules, or a line item's reference, is an error, and the index patched
// from stays as it was.
func TestPatchRefusesWhatCompileRefuses(t *testing.T) {
	set := patchWorld(1, 50)
	ix, err := Compile(set, Options{Now: conjNow})
	if err != nil {
		t.Fatal(err)
	}
	bad := set.LineItems[0].Clone()
	bad.Weight = -1
	other := set.LineItems[1].Clone()
	for _, c := range set.Creatives {
		if c.Status == tsubame.StatusApproved && c.Advertiser != set.Object(tsubame.KindCampaign, other.Campaign).(*tsubame.Campaign).Advertiser {
			other.Creatives = []string{c.ID}
			break
		}
	}
	missing := set.LineItems[2].Clone()
	missing.Campaign = "nowhere"
	for _, c := range []*tsubame.LineItem{bad, other, missing} {
		changes := []tsubame.CampaignChange{{Kind: tsubame.KindLineItem, ID: c.ID, Object: c}}
		nx, err := ix.Patch(set.Apply(changes), changes, Options{Now: conjNow})
		if err == nil || nx != nil || tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Fatalf("%s: patched (%v, %v), want EINVALID", c.ID, nx, err)
		}
	}
	if l, ok := ix.LineByID(bad.ID); !ok || l.Weight != set.LineItems[0].Weight {
		t.Fatalf("the index patched from changed: %v %v", ok, l)
	}
}

// TestPatchKeepsTheUnchangedLines: the line items a patch does not touch
// are the ones of the index patched from (the same *Line, so that the
// budgets' state of each stays), and each patch's are of a later Gen.
func TestPatchKeepsTheUnchangedLines(t *testing.T) {
	set := patchWorld(2, 500)
	ix, err := Compile(set, Options{Now: conjNow})
	if err != nil {
		t.Fatal(err)
	}
	before := maps.Collect(func(yield func(string, *Line) bool) {
		for l := range ix.Lines() {
			if !yield(l.ID, l) {
				return
			}
		}
	})
	var l0 *Line
	for l := range ix.Lines() {
		l0 = l
		break
	}
	li := set.Object(tsubame.KindLineItem, l0.ID).(*tsubame.LineItem).Clone()
	li.Weight++
	changes := []tsubame.CampaignChange{{Kind: tsubame.KindLineItem, ID: li.ID, Object: li}}
	nx, err := ix.Patch(set.Apply(changes), changes, Options{Now: conjNow})
	if err != nil || nx == nil {
		t.Fatal(nx, err)
	}
	for l := range nx.Lines() {
		switch {
		case l.ID == li.ID:
			if l == before[l.ID] || l.Gen <= before[l.ID].Gen || l.Weight != li.Weight {
				t.Fatalf("the changed line item: %p (was %p), gen %d (was %d), weight %d", l, before[l.ID], l.Gen, before[l.ID].Gen, l.Weight)
			}
		case l != before[l.ID]:
			t.Fatalf("%s: a new *Line for an unchanged line item", l.ID)
		}
	}
	if n := len(slices.Collect(nx.Fresh(ix))); n != 1 {
		t.Fatalf("%d line items fresh, want 1", n)
	}
}
