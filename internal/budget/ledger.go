package budget

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

// Defaults of LedgerOptions.
const (
	DefaultInterval = time.Second
	DefaultGrace    = 30 * time.Second
	DefaultLease    = time.Minute
	DefaultMaxHold  = 10 * time.Minute
	// DefaultStoreTimeout bounds one store call of the ledger's loop.
	DefaultStoreTimeout = 5 * time.Second
	// DefaultWait bounds how long a decision waits for an empty hand's
	// top-up (LedgerOptions.Wait).
	DefaultWait = 5 * time.Millisecond
	// DefaultWarm is how many accounts a ledger leases for ahead of their
	// first decision (LedgerOptions.Warm).
	DefaultWarm = 4096
	// DefaultCatchUp is how much of an hour's plan, in percent, a paced
	// limit may commit in that hour behind it (LedgerOptions.CatchUp).
	DefaultCatchUp = 150
)

// nanosPerMicro: spend is kept in the store in micro-units of the account
// currency, and on a node in thousandths of them, so that an impression's
// cost, its CPM divided by 1,000, is a whole number: a CPM of 2.500001
// (2,500,001 micro-units) costs 2,500,001 thousandths of a micro-unit.
const nanosPerMicro = 1000

// LedgerOptions tune a Ledger.
type LedgerOptions struct {
	// Holder names this node's leases in the store, followed by "/" and 8
	// random hex digits new at every start (at most 64 bytes in all).
	// Empty: the host name and the process id.
	Holder string
	// Interval is how often leases are topped up, renewed and given back,
	// and reservations settled (DefaultInterval).
	Interval time.Duration
	// Grace is how long after its deadline a reservation is settled
	// (DefaultGrace): an impression counted on another node, whose clock
	// is behind or whose store call is slow, is seen by then.
	Grace time.Duration
	// Lease is how long a lease may be spent without being renewed
	// (DefaultLease): with the store gone, a node spends what it holds
	// for at most this long, then stops the line items it holds it for.
	Lease time.Duration
	// MaxHold is the longest reservation (DefaultMaxHold): a lease lasts
	// MaxHold+Grace+Lease in the store, so that every reservation made
	// from it is settled while it lasts.
	MaxHold time.Duration
	// Timeout bounds one store call (DefaultStoreTimeout).
	Timeout time.Duration
	// Log gets the store's failures (the process logger bounds repeats).
	Log *slog.Logger
	// Now is the clock (time.Now when nil), for tests and simulations.
	Now func() time.Time
	// Handovers, when set, passes the open holds on at Close for another
	// server to settle, and the loop settles those other servers hand over
	// (handover.go). Without it, open holds count as spent at Close.
	Handovers tsubame.Handovers
	// Wait is the longest a decision waits for its line item's top-up when
	// the node's hand is empty and the store may still grant (DefaultWait;
	// negative: never waits): a fresh node, a new flight or a burst of
	// traffic is served from the budget, not refused while the loop asks.
	// Waits only while Run runs. A wait that times out turns waiting off
	// for that account for an Interval, so a slow store costs one wait per
	// account and interval, not one per request.
	Wait time.Duration
	// Idle is how long an account no decision asked of keeps its lease
	// (0 or negative: while its period lasts); at least two Intervals. An
	// account decisions asked of keeps its lease at least twice the
	// longest time it went without one before, and one asked of once
	// keeps it (how often it is asked of is not known yet). Then the lease
	// goes back to the store whole, as at the period's end, and is no
	// longer renewed, so that an idle node sends the store nothing for it.
	// The next decision asking of it waits (Wait) for a lease, which the
	// pacing may not grant at once where other nodes hold what this hour
	// allows (catch-up): off by default, for line items that see a request
	// an hour or less.
	Idle time.Duration
	// Warm is how many accounts Warm leases for at most (DefaultWarm;
	// negative: none): the live limited line items' of a new index, before
	// their first decision.
	Warm int
	// CatchUp bounds what a paced limit (even, frontloaded) behind its
	// plan commits in an hour: at most this percent of the hour's plan
	// (DefaultCatchUp; at least 100; negative: unbounded, all at once).
	// A shortfall is caught up over the next hours instead of in a burst.
	CatchUp int
	// KeepDaily is how long the store keeps a day's budget and limit keys
	// after the day is over (Quotas.Expire): long enough for its late bills
	// (MaxHold and Grace) and for the dashboards that read past days; 0:
	// forever. At least a day when set.
	KeepDaily time.Duration
}

// Ledger keeps a node's share of the budgets and impression limits of line
// items, in leases of the store's Quotas, and the reservations made from
// them. See the package comment. It is safe for concurrent use.
type Ledger struct {
	quotas   tsubame.Quotas
	outcomes tsubame.Outcomes
	opt      LedgerOptions
	ttl      time.Duration // of a lease in the store
	log      *slog.Logger

	lines sync.Map // line item id -> *lineState

	mu       sync.Mutex // guards accounts and the building of states
	accounts map[string]*account
	made     uint64 // accounts made, under mu: each account's release id prefix

	holds   holdTable
	kept    keptTable
	traffic *traffic // what this node learned of its traffic (traffic.go)
	kicks   chan *account
	// collected is when the loop last read the whole outcome queue (Unix
	// nanoseconds): a deadline passed before then gives back only what
	// no outcome recorded by then claimed. unacked is how many outcomes at
	// the head of the queue were applied and not acked. The loop's own.
	collected int64
	unacked   int

	storeErrors   atomic.Uint64 // Lease, Release, Collect and Ack calls that failed
	lost          atomic.Uint64 // times the store held less of a lease than the node counted on
	forgotten     atomic.Uint64 // store units of those leases it no longer held
	billed        atomic.Uint64 // holds ended by a bill: spent
	won           atomic.Uint64 // holds that won (held on until their bill)
	lostBids      atomic.Uint64 // holds ended by a loss notice: given back at once
	expired       atomic.Uint64 // holds given back at a deadline: no win, or no bill
	late          atomic.Uint64 // bills of no hold (after its deadline, or of another process's)
	overage       atomic.Uint64 // bills (late or past their hold) this node could not take from its hand
	pastHold      atomic.Uint64 // bills that cost more than their bucket's holds had left: bids held by a share
	keptWon       atomic.Uint64 // won bids spent at their end, unbilled (reservation.keepWon)
	keptBilled    atomic.Uint64 // late bills of those: not spent again
	waited        atomic.Uint64 // decisions that waited for a top-up and got the loop's answer
	waitsTimedOut atomic.Uint64 // decisions whose wait for a top-up timed out
	warmed        atomic.Uint64 // accounts leased for ahead of their first decision (Warm)

	// child marks a ledger adopted from a stopped server's handover; the
	// parent's children, under mu, are ticked by its loop.
	child      bool
	parent     *Ledger // a child's: its late bills spend the parent's accounts
	children   []*Ledger
	handedOver atomic.Uint64 // buckets handed over at Close

	// The loop's own: touched by Run's goroutine (and Close after it).
	loopMu sync.Mutex
	closed bool
	// running: Run's loop answers kicks, so a decision may wait for one;
	// stopped: Close has begun, and no decision waits any more.
	running, stopped atomic.Bool
}

// NewLedger returns a Ledger over q whose holds are settled by the
// outcomes recorded for it in out (its Holder's queue). Run keeps it;
// Close gives its leases back.
func NewLedger(q tsubame.Quotas, out tsubame.Outcomes, opt LedgerOptions) (*Ledger, error) {
	opt.Interval = cmp.Or(opt.Interval, DefaultInterval)
	opt.Grace = cmp.Or(opt.Grace, DefaultGrace)
	opt.Lease = cmp.Or(opt.Lease, DefaultLease)
	opt.MaxHold = cmp.Or(opt.MaxHold, DefaultMaxHold)
	opt.Timeout = cmp.Or(opt.Timeout, DefaultStoreTimeout)
	opt.Wait = cmp.Or(opt.Wait, DefaultWait)
	opt.Warm = cmp.Or(opt.Warm, DefaultWarm)
	opt.CatchUp = cmp.Or(opt.CatchUp, DefaultCatchUp)
	if opt.KeepDaily != 0 && opt.KeepDaily < 24*time.Hour {
		return nil, tsubame.Errorf(tsubame.EINVALID, "a day's keys must be kept at least 24h after it, not %v", opt.KeepDaily)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	opt.Holder = newHolder(opt.Holder)
	ttl := opt.MaxHold + opt.Grace + opt.Lease
	switch {
	case len(opt.Holder) > tsubame.MaxQuotaHolderLength:
		return nil, tsubame.Errorf(tsubame.EINVALID, "budget holder %q is longer than %d bytes (with its random suffix)", opt.Holder, tsubame.MaxQuotaHolderLength)
	case opt.Interval <= 0 || opt.Grace <= 0 || opt.Lease <= 0 || opt.MaxHold <= 0 || opt.Timeout <= 0:
		return nil, tsubame.Errorf(tsubame.EINVALID, "budget interval, grace, lease, max hold and timeout must be positive")
	case opt.CatchUp >= 0 && opt.CatchUp < 100:
		return nil, tsubame.Errorf(tsubame.EINVALID, "a budget catch-up of %d%% of the plan would hold delivery below it: at least 100", opt.CatchUp)
	case opt.Wait > time.Second:
		return nil, tsubame.Errorf(tsubame.EINVALID, "a budget wait (%v) must be at most 1s: a decision waits on it", opt.Wait)
	case opt.Idle > 0 && opt.Idle < 2*opt.Interval:
		return nil, tsubame.Errorf(tsubame.EINVALID, "a budget's idle time (%v) must last at least two intervals (%v)", opt.Idle, opt.Interval)
	case opt.Lease < 2*opt.Interval:
		return nil, tsubame.Errorf(tsubame.EINVALID, "a budget lease (%v) must last at least two intervals (%v): it is renewed every half of it", opt.Lease, opt.Interval)
	case ttl > tsubame.MaxLeaseTTL:
		return nil, tsubame.Errorf(tsubame.EINVALID, "reservations of %v, grace %v and lease %v add up to more than %v", opt.MaxHold, opt.Grace, opt.Lease, tsubame.MaxLeaseTTL)
	}
	g := &Ledger{quotas: q, outcomes: out, opt: opt, ttl: ttl, log: opt.Log,
		accounts: map[string]*account{}, kicks: make(chan *account, 1024), traffic: newTraffic(opt.Interval)}
	g.holds.init()
	return g, nil
}

// newHolder names this process: name (the host name and the process id
// when empty) and 32 random bits, so that a process restarted under the
// same name never takes over the leases, nor the release ids, of the one
// before it.
func newHolder(name string) string {
	if name == "" {
		host, _ := os.Hostname()
		if len(host) > 32 {
			host = host[:32]
		}
		name = fmt.Sprintf("%s/%d", cmp.Or(host, "node"), os.Getpid())
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	return name + "/" + hex.EncodeToString(r[:])
}

// Running reports whether Run's loop runs: decisions may wait for its
// top-ups (LedgerOptions.Wait).
func (g *Ledger) Running() bool { return g.running.Load() && !g.stopped.Load() }

// Holder is this node's name in the store.
func (g *Ledger) Holder() string { return g.opt.Holder }

// MaxHold is the longest reservation the ledger keeps.
func (g *Ledger) MaxHold() time.Duration { return g.opt.MaxHold }

// account is this node's part of one counter of the store (a key of
// Quotas): a line item's impressions or a campaign's spend, in total or on
// one day.
type account struct {
	key string
	// scale is the local units per store unit: impScale for impressions,
	// nanosPerMicro for spend (spends).
	scale int64

	cfg atomic.Pointer[accountCfg]

	// mu orders a lost lease (hand emptied, gen moved) against takes and
	// give-backs of units of the lease being lost; hand itself is atomic.
	mu   sync.RWMutex
	gen  uint32       // under mu: the lease's generation
	hand atomic.Int64 // local units leased and not taken
	exp  atomic.Int64 // when the lease ends, Unix nanoseconds (our clock, before the store's); 0: none
	// spendBy is when the lease stops being spent unless renewed: Lease
	// after it was last taken or renewed.
	spendBy atomic.Int64

	used atomic.Int64 // local units settled (seen, or spent at once), not yet released
	// drained are local units taken out of the hand to be given back: it
	// was leased under a limit since lowered.
	drained atomic.Int64
	// debt are local units of late bills no hand covered: debited in the
	// store past the leases (Quotas.Debit).
	debt atomic.Int64
	// pooled are the local units the holds of bids held by a share keep
	// together (bucket.pool); owed, what bills past those holds spent
	// that no hand covered: paid from the pools' units as they come back
	// (repay), and debited past the leases only where the pools cannot
	// pay it (plan).
	pooled, owed atomic.Int64
	// risk is what the open bids held by a share may be billed past their
	// holds: the hand keeps headroom for it (account.headroom).
	risk   risk
	rate   atomic.Int64 // local units asked for since the last step
	asks   atomic.Int64 // takes asked for since the last tick: requests, for the traffic
	holds  atomic.Int64 // reservations open
	unit   atomic.Int64 // the largest take
	kicked atomic.Bool  // an empty hand was reported to the loop
	warmed atomic.Bool  // leased for by Warm (once)
	// bids: an auction's bid took from it (decision.Request.CapsOnWin):
	// its bids hold their price until they lose, so what it commits runs
	// behind its plan by design, and catchUp does not bound it.
	bids atomic.Bool
	// dropAt is the drop time the store was given for the key (0: none
	// yet): Quotas.Expire is called once per key and time.
	dropAt atomic.Int64
	// dry: no lease is asked before this (Unix nanoseconds) but to renew:
	// the limit or the pacing held the last one back, or the store failed.
	// noWait: decisions do not wait for a top-up before this (a wait timed
	// out). wake is closed when the loop has stepped the account (a
	// top-up, or its refusal), for the decisions waiting on it.
	dry, noWait atomic.Int64
	wakeMu      sync.Mutex
	wake        chan struct{}

	nonce uint64 // tells this account's release ids from those of one retired before it

	// The loop's own.
	leased  int64 // store units of our lease, as the store last told
	carry   int64 // local units settled and not yet a whole store unit
	seq     uint64
	pending *release // a release to make, or whose answer was lost: retried with its id
	debit   *release // a debit to make (its used units), retried likewise
	// unsure: a Lease's answer was lost, so a grant may have landed; the
	// next answer's surplus is this node's to spend (reconcile).
	unsure bool
	// resync: the store refused a release as more than it holds of the
	// lease; the next round asks what it holds before releasing again.
	resync bool
	recent int64 // local units asked for per interval, smoothed
	// asked is when a decision last asked of it, or Warm leased for it
	// (Unix nanoseconds; 0: not stepped yet); seen counts the rounds that
	// saw decisions ask (up to 2), and gap is the longest time between
	// two of them. The lease goes back past LedgerOptions.Idle when no
	// decision ever asked, or, once two rounds did, past Idle or twice
	// gap if longer (an account asked of once an hour keeps it); an
	// account asked of once keeps it, since how often it is asked of is
	// not known yet.
	asked, gap int64
	seen       int8
	curve      curve
	// The hour's catch-up bound (catchUp): the hour it is of (Unix hours),
	// and the store's committed count and the plan when it was read.
	cuHour, cuBase, cuPlan int64
	cuAt                   int64       // when it was read, Unix nanoseconds
	cuNext                 int64       // the plan an hour after the read
	cuCfg                  *accountCfg // the setting it was read under
	cuCurve                curve       // the re-paced curve's cache
	// The round's plan.
	want         int64 // store units to lease
	renew, lease bool
}

// impScale is the local units of an impression: a bid held by its
// exchange's win rate holds a share of one (decision.HoldShares).
const impScale = decision.HoldShares

// spends reports whether a is an account of spend (its units
// thousandths of a micro-unit), not of impressions.
func (a *account) spends() bool { return a.scale == nanosPerMicro }

// accountCfg is what an account's lease depends on, replaced when the
// campaign set changes.
type accountCfg struct {
	limit      int64 // store units; 0 serves nothing
	start, end int64 // the period paced over (the flight, or a day of it)
	pacer      pacer
	// drop is when the store may drop the key (Unix nanoseconds): a day's
	// end and LedgerOptions.KeepDaily; 0: never.
	drop int64
}

type release struct {
	id           string
	used, unused int64 // store units
}

// take removes what r holds of its i-th account, a, from the hand at now
// for a reservation settled at need (Unix nanoseconds), if the hand holds
// at least r's whole units of it too and keeps its headroom after (with r
// counted in it), and the lease covers it, lasts until then and was
// renewed within its Lease. It returns the lease's generation.
//
// Every take counts in rate, refused or not: the hand is sized by demand,
// and what the store grants is bounded by the limit and the pacing.
func (a *account) take(r *reservation, i int, now, need int64) (uint32, bool) {
	a.rate.Add(r.held(i))
	return a.takeAgain(r, i, now, need)
}

// takeAgain is take without counting the demand: the retry of a take
// that waited for its top-up.
func (a *account) takeAgain(r *reservation, i int, now, need int64) (uint32, bool) {
	a.mu.RLock()
	if a.exp.Load() <= need || a.spendBy.Load() <= now {
		a.mu.RUnlock()
		return 0, false
	}
	n, whole := r.held(i), r.slots[i].units
	// A bid held by a share counts in the pools and the risk before the
	// hand is checked, so that takes at once each see the others': they
	// may fail too often together, never pass wrongly.
	a.pool(n, 1, r, i)
	room := a.headroom()
	for {
		h := a.hand.Load()
		if h < max(n, whole) || h-n < room {
			a.mu.RUnlock()
			a.pool(-n, -1, r, i)
			return 0, false
		}
		if a.hand.CompareAndSwap(h, h-n) {
			break
		}
	}
	gen := a.gen
	a.mu.RUnlock()
	return gen, true
}

// giveBack returns n local units taken from the lease of generation gen to
// the hand; units of a lease since lost are dropped (the store settled them
// with it).
func (a *account) giveBack(n int64, gen uint32) {
	a.mu.RLock()
	if a.gen == gen {
		a.hand.Add(n)
	}
	a.mu.RUnlock()
}

// takeAny removes n local units from the hand for a bill already paid,
// whatever the pacing or the lease's renewal, if the hand holds them; it
// returns the lease's generation. It counts in rate, taken or not: the
// hand is sized for the bills past their holds too.
func (a *account) takeAny(n int64) (uint32, bool) {
	a.rate.Add(n)
	a.mu.RLock()
	defer a.mu.RUnlock()
	for {
		h := a.hand.Load()
		if h < n {
			return 0, false
		}
		if a.hand.CompareAndSwap(h, h-n) {
			return a.gen, true
		}
	}
}

// repay gives n local units taken from the lease of generation gen back,
// paying what is owed first (spent: a bill past its holds).
func (a *account) repay(n int64, gen uint32) {
	for n > 0 {
		o := a.owed.Load()
		if o <= 0 {
			break
		}
		d := min(o, n)
		if a.owed.CompareAndSwap(o, o-d) {
			a.settle(d, gen)
			n -= d
			break
		}
	}
	if n > 0 {
		a.giveBack(n, gen)
	}
}

// settle counts n local units taken from the lease of generation gen as
// spent.
func (a *account) settle(n int64, gen uint32) {
	a.mu.RLock()
	if a.gen == gen {
		a.used.Add(n)
	}
	a.mu.RUnlock()
}

// slot is one account a reservation takes from, and how much.
type slot struct {
	acct  *account
	units int64
}

// maxSlots: a line item's impressions in total and today, its campaign's
// spend in total and today.
const maxSlots = 4

// reservation is what one decision took: units of up to maxSlots accounts.
type reservation struct {
	n int
	// slots are the accounts and what the decision costs each when it is
	// billed (a spend account: its price); gens the generation of each's
	// lease it was taken from.
	slots [maxSlots]slot
	gens  [maxSlots]uint32
	// share is the part of each slot's units held (in decision.HoldShares;
	// 0: all of them): see held. rate, for a bid held by its line item's
	// win rate (decision.HoldByWinRate), is where what became of it counts.
	share int64
	rate  *winCount
	// keepWon spends the bids that won and were not billed by their end
	// (decision.Request.KeepWon); whole holds only.
	keepWon bool
}

// held is what r holds of its i-th account: its units, or the share of
// them of a bid held by its exchange's win rate (rounded up).
func (r *reservation) held(i int) int64 {
	u := r.slots[i].units
	if r.share <= 0 || r.share >= decision.HoldShares {
		return u
	}
	return max((u*r.share+decision.HoldShares-1)/decision.HoldShares, 1)
}

// cost is what a bill at price (a CPM, as take's) spends of r's i-th
// account: an impression account its units, a spend account the price,
// at most the bid's.
func (r *reservation) cost(i int, price int64) int64 {
	if s := r.slots[i]; s.acct.spends() {
		return min(max(price, 0), s.units)
	}
	return r.slots[i].units
}

// lineState is what the ledger keeps per line item: its accounts in
// total, and those of the current day.
type lineState struct {
	line  atomic.Pointer[decision.Line] // the Line it was checked against last
	total [2]slot                       // impressions, spend (nil account: no limit)
	day   atomic.Pointer[dayState]
	rate  winCount // its bids held by their win rate
}

// dayState is a line item's daily accounts for one day of its campaign's
// time zone.
type dayState struct {
	start, end int64
	slots      [2]slot
}

// take reserves a decision of l at now at price (a CPM: what one
// impression of it costs, in thousandths of a micro-unit; at most l's
// CPM, less when a bid is shaded), held until until (Unix nanoseconds;
// now when it is spent at once), holding share of it (reservation.share).
func (g *Ledger) take(l *decision.Line, now time.Time, until int64, price, share int64, waited *bool) (reservation, bool) {
	st := g.state(l)
	r := reservation{share: share}
	if share == decision.HoldByWinRate {
		r.share, r.rate = st.rate.share.Load(), &st.rate
	}
	if r.share < 0 || r.share >= decision.HoldShares {
		r.share = 0 // all of it: a whole hold (r.shared is r.share > 0 from here)
	}
	nowNs := now.UnixNano()
	d := st.day.Load()
	if d == nil || nowNs < d.start || nowNs >= d.end {
		d = g.newDay(st, now)
	}
	need := until + int64(g.opt.Grace)
	slots := [...]slot{st.total[0], st.total[1], d.slots[0], d.slots[1]}
	for i := range slots {
		if a := slots[i].acct; a != nil {
			a.asks.Add(1) // a request for each, taken or not: the traffic
			if a.spends() {
				slots[i].units = min(max(price, 0), slots[i].units) // what the decision asks of it
			}
		}
	}
	for k, s := range slots {
		if s.acct == nil {
			continue
		}
		r.slots[r.n] = s
		// A bid held by a share still needs its whole price in the hand:
		// at a budget's end, what is left is spent by bids that could
		// each pay their own bill, not by a tail of shares whose bills
		// would go past it.
		gen, ok := s.acct.take(&r, r.n, nowNs, need)
		if !ok && waited != nil && !*waited {
			// The request's later counters that hold no lease (given back
			// idle, or new) are topped up in the same round as this one,
			// for what it asks of each: a request waits once, for all.
			for _, o := range slots[k+1:] {
				if o.acct != nil && o.acct.exp.Load() == 0 {
					o.acct.rate.Add(o.units)
					g.kick(o.acct)
				}
			}
			if g.wait(s.acct, nowNs, waited) {
				gen, ok = s.acct.takeAgain(&r, r.n, g.opt.Now().UnixNano(), need)
			}
		}
		if !ok {
			g.kick(s.acct)
			g.cancel(&r)
			return reservation{}, false
		}
		r.gens[r.n] = gen
		r.n++
	}
	return r, true
}

// could reports whether a decision of l could be taken now, taking
// nothing (a test request).
func (g *Ledger) could(l *decision.Line, now time.Time) bool {
	st := g.state(l)
	nowNs := now.UnixNano()
	d := st.day.Load()
	if d == nil || nowNs < d.start || nowNs >= d.end {
		d = g.newDay(st, now)
	}
	for _, s := range [...]slot{st.total[0], st.total[1], d.slots[0], d.slots[1]} {
		if a := s.acct; a != nil {
			if a.hand.Load() < s.units+a.headroom() || a.spendBy.Load() <= nowNs {
				g.kick(a)
				return false
			}
		}
	}
	return true
}

// cancel gives back what r took.
func (g *Ledger) cancel(r *reservation) {
	for i := range r.n {
		a := r.slots[i].acct
		a.pool(-r.held(i), -1, r, i)
		a.giveBack(r.held(i), r.gens[i])
	}
	r.n = 0
}

// hold keeps what a bid (or decision) of line item l took, r, until its
// outcome: a loss gives it back, a bill spends it, and without either
// it is given back at winBy when it did not win, a grace after until when
// it won and was not billed (Unix nanoseconds; winBy 0: no win window). due is the
// second its outcomes name it by (tsubame.Outcome.Due: the reservation's
// end as its tracking URLs carry it). until 0: spent at once.
func (g *Ledger) hold(l *decision.Line, r *reservation, now, due, until, winBy int64) {
	if r.n == 0 {
		return
	}
	if until == 0 {
		for i := range r.n {
			r.slots[i].acct.pool(-r.held(i), -1, r, i) // not held after all (take)
			r.slots[i].acct.settle(r.held(i), r.gens[i])
		}
		return
	}
	for i := range r.n {
		r.slots[i].acct.holds.Add(1) // its pool and risk were counted by take
	}
	// The win window is the exchange's delay already: no grace on it. The
	// reservation's end takes the grace, for bills on their way.
	billBy := until + int64(g.opt.Grace)
	if winBy <= 0 {
		winBy = billBy
	}
	g.holds.add(bucketKey{l.ID, due}, r, now, min(winBy, billBy), billBy)
}

// wait waits, at most Wait, for the loop to top a's empty hand up, and
// reports whether it did something about it since (the hand may still be
// short: the caller takes again). It does not wait while Run is not
// running, while the store refused a's last lease (a.dry: the limit or the
// pacing holds it back, or the store failed), nor for an Interval after a
// wait timed out.
func (g *Ledger) wait(a *account, now int64, waited *bool) bool {
	if g.opt.Wait <= 0 || !g.running.Load() || g.stopped.Load() || a.dry.Load() > now || a.noWait.Load() > now {
		return false
	}
	*waited = true
	a.wakeMu.Lock()
	if a.wake == nil {
		a.wake = make(chan struct{})
	}
	ch := a.wake
	a.wakeMu.Unlock()
	g.kick(a)
	t := time.NewTimer(g.opt.Wait)
	defer t.Stop()
	select {
	case <-ch:
		g.waited.Add(1)
		return true
	case <-t.C:
		a.noWait.Store(now + int64(g.opt.Interval))
		g.waitsTimedOut.Add(1)
		return false
	}
}

// woken wakes the decisions waiting for a's top-up.
func (a *account) woken() {
	a.wakeMu.Lock()
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
	}
	a.wakeMu.Unlock()
}

// kick tells the loop that a's hand ran short, once until the loop has
// looked at it.
func (g *Ledger) kick(a *account) {
	if a.kicked.CompareAndSwap(false, true) {
		select {
		case g.kicks <- a:
		default: // the next tick sees it
		}
	}
}

// state returns the ledger's state of line item l, made or brought up to
// date when l is a Line it has not seen (a new index).
//
// A Line of an older compile than the state's (a decision still running on
// an index that was replaced) gets the state as it is: the newer settings
// hold, and a stale Line never writes its limits over them.
func (g *Ledger) state(l *decision.Line) *lineState {
	if v, ok := g.lines.Load(l.ID); ok {
		st := v.(*lineState)
		if cur := st.line.Load(); cur == l || cur.Gen > l.Gen {
			return st
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.lines.Load(l.ID); ok {
		st := v.(*lineState)
		cur := st.line.Load()
		if cur == l || cur.Gen > l.Gen {
			return st
		}
		if sameBudget(cur, l) {
			st.line.Store(l)
			return st
		}
	}
	st := &lineState{}
	st.line.Store(l)
	start, end := l.Flight()
	cs, ce := l.CampaignFlight()
	if n := l.Limits.Total; n > 0 {
		st.total[0] = g.slot(keyLineImp(l.ID), impScale, accountCfg{n, start, end, g.pacer(l, keyLineImp(l.ID), start, end), 0}, impScale)
	}
	if b := int64(l.Budget.Total); b > 0 && l.CPM > 0 {
		st.total[1] = g.slot(keyCampaignSpend(l.Campaign), nanosPerMicro, accountCfg{b, cs, ce, g.pacer(l, keyCampaignSpend(l.Campaign), cs, ce), 0}, int64(l.CPM))
	}
	g.lines.Store(l.ID, st)
	return st
}

// sameBudget reports whether two Lines of one line item keep the same
// accounts.
func sameBudget(a, b *decision.Line) bool {
	as, ae := a.Flight()
	bs, be := b.Flight()
	acs, ace := a.CampaignFlight()
	bcs, bce := b.CampaignFlight()
	return a.Campaign == b.Campaign && a.CPM == b.CPM && a.Limits == b.Limits && a.Budget == b.Budget &&
		as == bs && ae == be && acs == bcs && ace == bce &&
		newPacer(a.Pacing, a.Zone).equal(newPacer(b.Pacing, b.Zone))
}

// pacer is the pacing of l's counter family (its total's key: a line
// item's impressions, a campaign's spend) over the period [start, end),
// weighed by the traffic this node learned when it is paced, has no hour
// weights and the period is bounded (else it is not paced, and learns
// nothing). The caller holds g.mu.
func (g *Ledger) pacer(l *decision.Line, family string, start, end int64) pacer {
	p := newPacer(l.Pacing, l.Zone)
	if p.mode != tsubame.PacingASAP && p.weights == nil && start != math.MinInt64 && end != math.MaxInt64 {
		p.own, p.all = g.traffic.of(family), g.traffic.all
	}
	return p
}

// newDay makes the day state of st for the day of now, by the settings of
// the newest Line st has seen.
func (g *Ledger) newDay(st *lineState, now time.Time) *dayState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := st.day.Load(); d != nil && now.UnixNano() >= d.start && now.UnixNano() < d.end {
		return d
	}
	l := st.line.Load()
	ds, de, date := day(now, l.Zone)
	d := &dayState{start: ds, end: de}
	var drop int64 // the store drops a day's keys once it is over and kept
	if g.opt.KeepDaily > 0 {
		drop = de + int64(g.opt.KeepDaily)
	}
	if n := l.Limits.Daily; n > 0 {
		start, end := l.Flight()
		d.slots[0] = g.slot(keyLineImpDay(l.ID, date), impScale, accountCfg{n, max(ds, start), min(de, end), g.pacer(l, keyLineImp(l.ID), ds, de), drop}, impScale)
	}
	if b := int64(l.Budget.Daily); b > 0 && l.CPM > 0 {
		cs, ce := l.CampaignFlight()
		d.slots[1] = g.slot(keyCampaignSpendDay(l.Campaign, date), nanosPerMicro, accountCfg{b, max(ds, cs), min(de, ce), g.pacer(l, keyCampaignSpend(l.Campaign), ds, de), drop}, int64(l.CPM))
	}
	st.day.Store(d)
	return d
}

// slot returns the account of key with cfg in force (made if new), taken
// units at a time. The caller holds g.mu.
func (g *Ledger) slot(key string, scale int64, cfg accountCfg, units int64) slot {
	a := g.accounts[key]
	if a == nil {
		g.made++
		a = &account{key: key, scale: scale, nonce: g.made}
		g.accounts[key] = a
	}
	old := a.cfg.Swap(&cfg)
	if old != nil && cfg.limit < old.limit {
		a.drain()
	}
	if units > a.unit.Load() {
		a.unit.Store(units) // under g.mu: the only writer
	}
	return slot{a, units}
}

// drain takes what a's hand holds out of it, to be given back: the limit
// it was leased under was lowered, possibly below what is committed, and
// only the store can tell how much of it may still be spent. The next
// take finds the hand empty and kicks the loop, which leases again under
// the new limit. Open reservations stay: they were within the old one.
func (a *account) drain() {
	a.mu.Lock()
	h := a.hand.Swap(0)
	a.mu.Unlock()
	a.drained.Add(h)
}

// Run keeps the leases until ctx ends: every Interval it settles the
// reservations whose grace has passed, gives back what is left unused,
// renews leases half-way through their Lease, and tops hands up to what
// the last interval took; an account whose hand ran short is topped up at
// once.
func (g *Ledger) Run(ctx context.Context) {
	t := time.NewTicker(g.opt.Interval)
	defer t.Stop()
	g.running.Store(true)
	defer g.running.Store(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Tick(ctx)
		case a := <-g.kicks:
			kicked := []*account{a}
			for more := true; more; {
				select {
				case a := <-g.kicks:
					if !slices.Contains(kicked, a) { // kicked again since: one step each
						kicked = append(kicked, a)
					}
				default:
					more = false
				}
			}
			g.loopMu.Lock()
			if !g.closed {
				g.steps(ctx, kicked, false)
			}
			g.loopMu.Unlock()
		}
	}
}

// Tick does one round of Run's work at once.
func (g *Ledger) Tick(ctx context.Context) {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if g.closed {
		return
	}
	g.settleDue(ctx)
	g.mu.Lock()
	all := make([]*account, 0, len(g.accounts))
	for _, a := range g.accounts {
		all = append(all, a)
	}
	g.mu.Unlock()
	if !g.child { // a child decides nothing: its parent counts the traffic
		g.count(all)
	}
	g.steps(ctx, all, true)
	g.retire()
	if !g.child {
		g.claimHandovers(ctx)
		g.tickChildren(ctx)
	}
}

// count adds the requests each account was asked for since the last
// tick to the traffic its pacing learns (once per profile: a line item's
// total and daily accounts count the same requests), and all of them to
// the node's.
func (g *Ledger) count(accts []*account) {
	now := g.opt.Now().UnixNano()
	var total int64
	byProf := map[*profile]int64{}
	for _, a := range accts {
		n := a.asks.Swap(0)
		if p := a.cfg.Load().pacer.own; p != nil {
			if n > byProf[p] {
				byProf[p] = n
			} else if _, ok := byProf[p]; !ok {
				byProf[p] = 0
			}
		}
		total += n
	}
	for p, n := range byProf {
		p.count(now, n)
	}
	g.traffic.all.count(now, total)
	t := g.traffic
	if t.swept == 0 {
		t.swept = now // a day of running before the first sweep: a restart keeps what it read
	}
	if now-t.swept > dayNs {
		t.swept = now
		t.forget(now)
	}
}

// maxParallel bounds the store calls of one round in flight at once.
const maxParallel = 16

// steps plans each account's round (no store call), then runs the rounds
// that need the store, up to maxParallel at once: a store that commits to
// disk (embedded) takes them in shared commits.
func (g *Ledger) steps(ctx context.Context, accts []*account, tick bool) {
	now := g.opt.Now().UnixNano()
	var work []*account
	for _, a := range accts {
		if g.plan(a, now, tick) {
			work = append(work, a)
		}
	}
	defer func() {
		for _, a := range accts {
			a.woken()
		}
	}()
	if len(work) == 1 {
		g.run(ctx, work[0], now)
		return
	}
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for _, a := range work {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			g.run(ctx, a, now)
		})
	}
	wg.Wait()
}

// plan works out one account's round at now and reports whether it needs
// the store: on a tick, a release of settled units and of what the hand
// holds beyond twice its target (a.pending); on a tick or a kick, a lease
// topping the hand up to its target, or renewing it half-way through its
// Lease (a.want, a.renew).
func (g *Ledger) plan(a *account, now int64, tick bool) bool {
	cfg := a.cfg.Load()
	a.kicked.Store(false)
	if a.leased > 0 && now >= a.exp.Load() {
		// The lease ended before it was renewed (the store did not
		// answer): the store counts all of it as spent.
		g.forget(a, a.leased)
	}
	switch {
	case a.rate.Load() > 0:
		if a.seen > 0 {
			a.gap = max(a.gap, now-a.asked)
		}
		a.asked, a.seen = now, min(a.seen+1, 2)
	case a.asked == 0:
		a.asked = now
	}
	target := a.target(cfg, now, tick)
	// idle: no decision asked of it for Idle, and nothing is held.
	idle := g.opt.Idle > 0 && (a.seen == 0 || a.seen == 2 && now-a.asked >= 2*a.gap) && now-a.asked >= int64(g.opt.Idle) && a.holds.Load() == 0 && a.pooled.Load() <= 0 && a.headroom() <= 0
	if idle {
		target = 0
	}
	if tick && a.pending == nil && (now >= cfg.end || idle) && a.leased > 0 && a.holds.Load() == 0 && a.pooled.Load() <= 0 {
		// The period is over, or no decision asked of it for Idle, and no
		// reservation is open, nor a pool of shares its bids left
		// (bucket.pool): the lease ends.
		// The hand's whole units go back; the rest, settled or a part of a
		// unit, is spent (rounded up, never down).
		a.mu.Lock()
		hand := a.hand.Swap(0) + a.drained.Swap(0)
		a.mu.Unlock()
		a.used.Store(0)
		unused := min(hand/a.scale, a.leased)
		a.carry = 0
		a.seq++
		a.pending = &release{id: g.releaseID(a), used: a.leased - unused, unused: unused}
	}
	if tick && a.pending == nil {
		// The drained hand's whole units go back; a part of a unit is
		// spent (rounded up, never down).
		drained := a.drained.Swap(0)
		used := a.used.Swap(0) + a.carry + drained%a.scale
		a.carry = used % a.scale
		back := drained / a.scale
		if h := a.hand.Load(); h > 2*target || now >= cfg.end {
			// Whole store units above the target leave the hand.
			extra := (h - target) / a.scale
			for extra > 0 {
				if a.hand.CompareAndSwap(h, h-extra*a.scale) {
					break
				}
				h = a.hand.Load()
				extra = min(extra, (h-target)/a.scale)
			}
			back += max(extra, 0)
		}
		if used/a.scale > 0 || back > 0 {
			a.seq++
			a.pending = &release{id: g.releaseID(a), used: used / a.scale, unused: back}
		}
	}
	if tick {
		// What bills past their holds owe and the pools cannot pay is
		// debited (the hand first).
		if o := a.owed.Load(); o > a.pooled.Load() {
			rest := o - max(a.pooled.Load(), 0)
			if a.owed.CompareAndSwap(o, o-rest) {
				if gen, ok := a.takeAny(rest); ok {
					a.settle(rest, gen)
				} else {
					a.debt.Add(rest)
					g.overage.Add(1)
				}
			}
		}
	}
	if tick && a.debit == nil {
		if debt := a.debt.Swap(0); debt > 0 {
			a.seq++
			a.debit = &release{id: g.releaseID(a), used: (debt + a.scale - 1) / a.scale} // rounded up
		}
	}
	a.want = (target - a.hand.Load() + a.scale - 1) / a.scale // store units, rounded up
	a.renew = a.leased > 0 && a.exp.Load()-now < int64(g.ttl-g.opt.Lease/2)
	a.lease = a.want > 0 && now >= a.dry.Load() || a.renew
	a.want = max(a.want, 0)
	return tick && (a.pending != nil || a.debit != nil) || a.lease
}

// run does the store calls plan decided on: the release first (a lease
// is asked only once it went through), then the lease. After a refused
// release it first asks the store what it holds of the lease.
func (g *Ledger) run(ctx context.Context, a *account, now int64) {
	if d := a.debit; d != nil {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		err := g.quotas.Debit(sctx, a.key, g.opt.Holder, d.id, d.used)
		cancel()
		if err != nil {
			g.storeErrors.Add(1)
			g.warn("cannot debit late bills in the store (retried)", a, err)
		} else {
			a.debit = nil
		}
	}
	if a.resync && !g.lease(ctx, a, now, 0) {
		return
	}
	if a.pending != nil && !g.release(ctx, a) {
		return
	}
	if a.lease {
		g.lease(ctx, a, now, a.want)
	}
}

// lease asks the store for want more units of a's key (0: only renew the
// lease and learn what it holds) and brings the node's count of its lease
// in line with the answer. False when the store did not answer.
func (g *Ledger) lease(ctx context.Context, a *account, now, want int64) bool {
	cfg := a.cfg.Load()
	limit := min(cfg.pacer.target(&a.curve, cfg.limit, cfg.start, cfg.end, now), tsubame.MaxQuotaUnits)
	limit = g.catchUp(ctx, a, cfg, now, limit, want)
	if room := a.headroom(); room > 0 && limit < cfg.limit {
		// The headroom is no bid's: the pacing bounds the bids, and the
		// limit what their bills may take of it.
		limit = min(limit+(room+a.scale-1)/a.scale, cfg.limit)
	}
	sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
	got, held, err := g.quotas.Lease(sctx, a.key, g.opt.Holder, limit, want, g.ttl)
	cancel()
	if err != nil {
		a.dry.Store(now + int64(g.opt.Interval))
		if tsubame.ErrorCode(err) != tsubame.EINVALID && want > 0 {
			a.unsure = true // units may have been granted
		}
		g.storeErrors.Add(1)
		g.warn("cannot lease budget from the store: line items spend what they hold, then stop", a, err)
		return false
	}
	g.reconcile(a, got, held)
	if cur := a.cfg.Load(); cur != cfg && cur.limit < cfg.limit {
		a.drain() // the limit was lowered while the store granted under the old one
	}
	if cfg.drop > 0 && held > 0 && a.dropAt.Load() != cfg.drop {
		g.expire(ctx, a, cfg.drop)
	}
	if held > 0 {
		a.exp.Store(now + int64(g.ttl))
		a.spendBy.Store(now + int64(g.opt.Lease))
	}
	if got < want {
		a.dry.Store(now + int64(g.opt.Interval)) // the limit or the pacing holds it back
	}
	return true
}

// expire tells the store when it may drop a's key (a day's, once the day
// and LedgerOptions.KeepDaily are over), after a lease made the key: once
// per key, retried at the next lease when it fails.
func (g *Ledger) expire(ctx context.Context, a *account, at int64) {
	sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
	err := g.quotas.Expire(sctx, a.key, time.Unix(0, at))
	cancel()
	if err != nil {
		g.storeErrors.Add(1)
		g.warn("cannot tell the store when a day's budget key may go: it is kept, and asked again at the next lease", a, err)
		return
	}
	a.dropAt.Store(at)
}

// catchUp bounds plan, the pacing's target for a at now, when a is behind
// it: at its first lease of each hour (or of a new setting) the ledger
// reads what the store has committed (every node's), and from then on a
// may commit at most the more of CatchUp percent of what the plan adds,
// and what is left of its limit spread over the rest of its period by the
// same weights (re-paced): so a short gap is caught up within hours, not in
// a burst, and a long one (an outage, a line item added or resumed late)
// is spread over what is left of the period, never stranded. Not bounded:
// a limit behind its plan by less than half an hour of it (the leases'
// churn), asap, an unbounded period, an hour whose read failed, a renewal
// (want 0), and a limit an auction's bids take from (account.bids: its
// bids hold their price until they lose, so what it commits runs behind
// its plan by design). The bound is never below what was committed.
func (g *Ledger) catchUp(ctx context.Context, a *account, cfg *accountCfg, now, plan, want int64) int64 {
	if want <= 0 || g.opt.CatchUp < 0 || a.bids.Load() || cfg.pacer.mode == tsubame.PacingASAP || cfg.start == math.MinInt64 ||
		cfg.end == math.MaxInt64 || now >= cfg.end || now < cfg.start {
		return plan
	}
	hour := floorDiv(now, int64(time.Hour))
	if a.cuHour != hour || a.cuCfg != cfg {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		settled, outstanding, err := g.quotas.Committed(sctx, a.key)
		cancel()
		if err != nil {
			g.storeErrors.Add(1)
			return plan
		}
		var c curve
		a.cuHour, a.cuCfg, a.cuAt, a.cuBase, a.cuPlan = hour, cfg, now, settled+outstanding, plan
		a.cuNext = cfg.pacer.target(&c, cfg.limit, cfg.start, cfg.end, min(now+int64(time.Hour), cfg.end))
		a.cuCurve = curve{}
	}
	if 2*(a.cuPlan-a.cuBase) <= a.cuNext-a.cuPlan || a.cuBase >= cfg.limit {
		return plan
	}
	grow := max(plan-a.cuPlan, 0)
	if grow > math.MaxInt64/int64(g.opt.CatchUp) {
		return plan
	}
	// What is left, re-paced over the rest of the period from the read.
	repaced := cfg.pacer.target(&a.cuCurve, cfg.limit-a.cuBase, a.cuAt, cfg.end, now)
	bound := a.cuBase + max((grow*int64(g.opt.CatchUp)+99)/100, repaced)
	return min(plan, bound) // bound is at least cuBase: never below what was committed
}

// reconcile takes the store's word that this node holds held units of
// a's key after it granted got. No release is pending here but one the
// store refused (resync), which it did not apply.
//
// Less than the node counts on (a.leased): the store no longer holds part
// of the lease (forget). More: when a Lease's answer was lost, its grant
// landed and is the node's to spend; otherwise the store holds units the
// node gave back (a release a failover forgot) or no longer counts as its
// own (a lease it lost): they back nothing the node may spend, and are
// released as spent, never spent again.
func (g *Ledger) reconcile(a *account, got, held int64) {
	switch known := held - got; {
	case known < a.leased:
		g.forget(a, a.leased-known)
	case known > a.leased && a.unsure:
		a.hand.Add((known - a.leased) * a.scale)
		a.leased = known
	case known > a.leased:
		a.used.Add((known - a.leased) * a.scale)
		a.leased = known
	}
	a.unsure, a.resync = false, false
	a.leased += got
	a.hand.Add(got * a.scale)
}

// forget drops missing units of a's lease that the store no longer holds
// for this node: its lease expired (the store counted all of it as spent)
// or a failover lost the writes that granted them.
//
// What the node was giving back, then what its hand holds, go first:
// nothing of those was spent. When they are not enough, the rest were
// reserved or spent: the lease's open reservations are let go (a new
// generation: how they end no longer counts here), and all the store
// still holds of the lease is released as spent. So the store never
// counts a unit twice and the node never spends one twice; what was spent
// of units the store forgot is spent past the limit, at most what the
// forgotten writes granted (Counts.Forgotten).
func (g *Ledger) forget(a *account, missing int64) {
	g.lost.Add(1)
	g.forgotten.Add(uint64(missing))
	a.leased -= missing
	rest := missing
	p := a.pending
	if p != nil {
		n := min(p.unused, rest)
		p.unused -= n
		rest -= n
	}
	a.mu.Lock()
	for _, h := range [...]*atomic.Int64{&a.drained, &a.hand} { // what was being given back first
		if n := h.Load(); n >= rest*a.scale {
			h.Store(n - rest*a.scale)
			rest = 0
		} else {
			h.Store(0)
			rest -= n / a.scale
		}
	}
	if rest > 0 {
		a.gen++
	}
	a.mu.Unlock()
	if rest > 0 {
		a.used.Store(0)
		a.carry = 0
		p = &release{used: a.leased}
	}
	a.pending = nil
	if p != nil && (p.used > 0 || p.unused > 0) {
		// Amounts changed: a new id. The old one was never applied (the
		// store refused it, or no release was pending).
		a.seq++
		p.id = g.releaseID(a)
		a.pending = p
	}
	if a.leased == 0 {
		a.exp.Store(0)
	}
	if g.log != nil {
		g.log.Warn("budget lease partly lost: the store no longer holds units this node counted on (its lease expired, or a failover lost writes)",
			"key", a.key, "units", missing, "reserved_or_spent", rest)
	}
}

// target is how many local units a's hand should hold: twice what the
// last intervals asked for (on a kick, or twice what this one asked for so
// far if more: a burst is topped up as it grows, not an interval later),
// and at least two of its largest takes, but no more than a 64th of its
// limit (or one take), so that a node does not sit on what others could
// spend; and its headroom more, with a bid's whole price for the next bid
// held by a share. A period that is over needs its headroom only.
func (a *account) target(cfg *accountCfg, now int64, tick bool) int64 {
	if now >= cfg.end || cfg.limit == 0 {
		// Bids held by a share may still be billed past their pools (a
		// period's last, an adopted server's): their headroom stays.
		return a.headroom()
	}
	unit := a.unit.Load()
	t := 2 * a.rate.Load() // a kick: this interval's demand so far
	if tick {
		a.recent = (a.recent + a.rate.Swap(0)) / 2
		t = 0
	}
	t = max(t, 2*a.recent, 2*unit)
	if room := a.headroom(); room > 0 {
		// And what one more bid held by a share adds to it, at most its
		// whole price.
		return min(t, a.ceiling(cfg)) + room + unit
	}
	return min(t, a.ceiling(cfg))
}

// ceiling is the most a's hand holds: a 64th of its limit, or one take.
func (a *account) ceiling(cfg *accountCfg) int64 {
	return max(a.unit.Load(), cfg.limit/64*a.scale) // limit*scale could pass MaxInt64
}

// release gives the store a.pending: settled units and unused ones. False
// when the lease was lost or the store did not answer (retried with the
// same id next round).
func (g *Ledger) release(ctx context.Context, a *account) bool {
	p := a.pending
	sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
	err := g.quotas.Release(sctx, a.key, g.opt.Holder, p.id, p.used, p.unused)
	cancel()
	switch code := tsubame.ErrorCode(err); {
	case err == nil:
		a.leased -= p.used + p.unused
		a.pending = nil
		if a.leased == 0 {
			a.exp.Store(0)
		}
		return true
	case code == tsubame.ECONFLICT || code == tsubame.EINVALID:
		// The store holds less of the lease than the release gives back:
		// it expired there, or a failover lost writes. The next round asks
		// what it holds first.
		a.resync = true
		g.warn("the store refused a budget release as more than it holds of this node's lease", a, err)
		return false
	default:
		g.storeErrors.Add(1)
		g.warn("cannot give settled and unused budget back to the store (retried)", a, err)
		return false
	}
}

// releaseID names a's release number a.seq: unique to this ledger and
// account object, since the store keeps a holder's last ids and an
// account retired and made again starts over.
func (g *Ledger) releaseID(a *account) string {
	return "r" + strconv.FormatUint(a.nonce, 36) + "." + strconv.FormatUint(a.seq, 36)
}

func (g *Ledger) warn(msg string, a *account, err error) {
	if g.log != nil {
		g.log.Warn(msg, "key", a.key, "err", err)
	}
}

// retire drops the accounts of days that are over once nothing of them is
// held, leased or open.
func (g *Ledger) retire() {
	now := g.opt.Now().UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, a := range g.accounts {
		if cfg := a.cfg.Load(); now >= cfg.end && cfg.end != math.MaxInt64 &&
			a.leased == 0 && a.pending == nil && a.holds.Load() == 0 && a.pooled.Load() <= 0 && a.hand.Load() == 0 && a.drained.Load() == 0 && a.used.Load() == 0 &&
			a.debt.Load() == 0 && a.debit == nil {
			delete(g.accounts, k)
		}
	}
}

// settleDue applies the outcomes recorded for this node, then gives back
// what deadlines release. A deadline releases only once the whole queue
// was read after it passed: an outcome recorded before it always counts.
func (g *Ledger) settleDue(ctx context.Context) {
	now := g.opt.Now().UnixNano()
	if g.collect(ctx) {
		g.collected = now
	}
	var out [64]expired
	for _, e := range g.holds.expire(g.collected, out[:0]) {
		g.expired.Add(uint64(e.n))
		for j := range e.r.n {
			s := e.r.slots[j]
			s.acct.pool(-e.units[j]-e.used[j], -e.n, &e.r, j)
			s.acct.settle(e.used[j], e.r.gens[j])
			s.acct.repay(e.units[j], e.r.gens[j])
			s.acct.holds.Add(-e.n - e.kept)
		}
		if e.kept > 0 {
			g.keptWon.Add(uint64(e.kept))
			g.kept.add(e.k, e.kept)
		}
	}
	g.kept.sweep(now)
}

// collectRounds bounds the batches one settleDue reads: a queue longer
// than that is read on at the next round.
const collectRounds = 16

// collect reads the outcome queue and applies it, and reports whether it
// read it all.
func (g *Ledger) collect(ctx context.Context) bool {
	if g.outcomes == nil {
		return true
	}
	if g.unacked > 0 {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		err := g.outcomes.Ack(sctx, g.opt.Holder, g.unacked)
		cancel()
		if err != nil {
			g.storeErrors.Add(1)
			return false
		}
		g.unacked = 0
	}
	for range collectRounds {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		batch, err := g.outcomes.Collect(sctx, g.opt.Holder, tsubame.MaxOutcomesBatch)
		cancel()
		if err != nil {
			g.storeErrors.Add(1)
			if g.log != nil {
				g.log.Warn("cannot read the outcomes of bids: their money stays held (retried)", "err", err)
			}
			return false
		}
		for i := range batch {
			g.Apply(&batch[i])
		}
		if len(batch) == 0 {
			return true
		}
		sctx, cancel = context.WithTimeout(ctx, g.opt.Timeout)
		err = g.outcomes.Ack(sctx, g.opt.Holder, len(batch))
		cancel()
		if err != nil {
			// Applied and not acked: the next Collect returns them again.
			// They must not be applied twice, so the loop waits for the
			// store and skips them then (acked counts what was applied).
			g.storeErrors.Add(1)
			g.unacked = len(batch)
			if g.log != nil {
				g.log.Warn("cannot acknowledge the outcomes of bids (retried)", "err", err)
			}
			return false
		}
		if len(batch) < tsubame.MaxOutcomesBatch {
			return true
		}
	}
	return false
}

// Apply settles one outcome of a bid this node holds the money of: a loss
// gives its hold back, a win keeps it held until its bill, a bill spends
// it at the bill's price (the rest of what it held given back). A bill of
// no hold — its deadline passed, the loss came first, or the node that
// bid has restarted — is late: what it costs is taken from this node's
// hand of its line item's accounts where there is one (spent past the
// pacing, within the limit), and counted as overage where there is not.
// It is the loop's, and exported for simulations.
func (g *Ledger) Apply(o *tsubame.Outcome) {
	k := bucketKey{o.LineItem, o.Due}
	switch o.Kind {
	case tsubame.OutcomeWin:
		if o.Before == 0 && g.holds.win(k) {
			g.won.Add(1)
		}
	case tsubame.OutcomeLoss:
		if o.Before != 0 {
			return // it won or was billed: its hold stays for its bill
		}
		if d, ok := g.holds.draw(k, false, false, 0); ok {
			g.lostBids.Add(1)
			g.spend(&d, nil)
		}
	case tsubame.OutcomeBill:
		if !o.Before.Has(tsubame.OutcomeLoss) {
			if d, ok := g.holds.draw(k, o.Before.Has(tsubame.OutcomeWin), true, int64(o.Price)); ok {
				g.billed.Add(1)
				price := int64(o.Price)
				g.spend(&d, &price)
				return
			}
			if g.kept.take(k) {
				// Spent at its end already (reservation.keepWon).
				g.late.Add(1)
				g.keptBilled.Add(1)
				return
			}
		}
		g.debitLate(o)
	}
}

// spend settles what one bid drew from its bucket: billed at *price (a
// CPM in micro-units: as many thousandths of a micro-unit an
// impression), each account spends the bid's cost (an impression
// account its unit, a spend account the price) and gives the rest back;
// lost (price nil), it gives all back. A bill whose cost its bucket's
// pool did not cover (a bid held by a share) spends the rest from the
// hand, past the pacing, or where the hand cannot, debits it past the
// leases (overage).
func (g *Ledger) spend(d *drawn, price *int64) {
	r := &d.r
	short := false
	for j := range r.n {
		s, gen := r.slots[j], r.gens[j]
		back := d.got[j] + d.rest[j]
		s.acct.pool(-back, -1, r, j)
		if price != nil {
			cost := r.cost(j, *price)
			used := min(cost, d.got[j])
			s.acct.settle(used, gen)
			back -= used
			if rest := cost - used; rest > 0 {
				// Past the bucket's holds: from the hand, else owed to
				// the pools of the line item's other bids (repay).
				short = true
				if g2, ok := s.acct.takeAny(rest); ok {
					s.acct.settle(rest, g2)
				} else {
					s.acct.owed.Add(rest)
				}
			}
		}
		if back > 0 {
			s.acct.repay(back, gen)
		}
		s.acct.holds.Add(-1)
	}
	if short {
		g.pastHold.Add(1)
	}
}

// debitLate spends a bill that no hold covers, from the hands of its line
// item's accounts — its totals, and its daily ones of the day the bill
// comes (its bid's day may be over: a daily budget counts spend by the
// day it is known, as its report does) — or where a hand cannot cover it,
// by a debit in the store past the leases: it was paid, and the limits
// must count it. Overage counts the bills a hand could not cover.
func (g *Ledger) debitLate(o *tsubame.Outcome) {
	if g.parent != nil {
		// A stopped server's bid: the line item's accounts are the
		// server's that took it over.
		g.parent.debitLate(o)
		return
	}
	g.late.Add(1)
	v, ok := g.lines.Load(o.LineItem)
	if !ok {
		g.overage.Add(1) // a line item this server no longer serves
		return
	}
	st := v.(*lineState)
	now := g.opt.Now()
	d := st.day.Load()
	if d == nil || now.UnixNano() < d.start || now.UnixNano() >= d.end {
		d = g.newDay(st, now)
	}
	over := false
	for _, s := range [...]slot{st.total[0], st.total[1], d.slots[0], d.slots[1]} {
		if s.acct == nil {
			continue
		}
		units := s.units
		if s.acct.spends() {
			units = max(int64(o.Price), 0)
		}
		if gen, ok := s.acct.takeAny(units); ok {
			s.acct.settle(units, gen)
		} else {
			s.acct.debt.Add(units) // debited in the store at the next round
			over = true
		}
	}
	if over {
		g.overage.Add(1)
	}
}

// Close gives every lease back: the hand's units as unused, everything
// else (settled, and reservations still open: they may yet be shown) as
// spent. Run must have returned and no decision may be made after it; a
// release the store does not take leaves that lease to expire, when the
// store settles all of it.
func (g *Ledger) Close(ctx context.Context) error {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	g.stopped.Store(true)
	g.mu.Lock()
	for _, a := range g.accounts { // no decision waits on a closed ledger
		a.woken()
	}
	g.mu.Unlock()
	g.settleDue(ctx) // what can be given back is, before the rest counts as spent
	// With handovers, the leases keep what the open holds stand on, and
	// the holds go to another server (handover.go).
	var buckets []handedBucket
	var held map[*account]int64
	if g.opt.Handovers != nil {
		buckets, held = g.holds.snapshot()
	}
	g.mu.Lock()
	accts := make([]*account, 0, len(g.accounts))
	for _, a := range g.accounts {
		accts = append(accts, a)
	}
	children := g.children
	g.mu.Unlock()
	var failed []string
	for _, a := range accts {
		a.debt.Add(a.owed.Swap(0)) // what the pools were to pay: the pools go back unused
		if debt := a.debt.Swap(0); debt > 0 && a.debit == nil {
			a.seq++
			a.debit = &release{id: g.releaseID(a), used: (debt + a.scale - 1) / a.scale}
		}
		if d := a.debit; d != nil {
			sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
			err := g.quotas.Debit(sctx, a.key, g.opt.Holder, d.id, d.used)
			cancel()
			if err != nil {
				failed = append(failed, a.key)
			} else {
				a.debit = nil
			}
		}
		if a.pending != nil {
			p := a.pending
			sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
			err := g.quotas.Release(sctx, a.key, g.opt.Holder, p.id, p.used, p.unused)
			cancel()
			if err != nil {
				failed = append(failed, a.key)
				continue
			}
			a.leased -= p.used + p.unused
			a.pending = nil
		}
		a.mu.Lock()
		a.gen++
		hand := a.hand.Swap(0) + a.drained.Swap(0)
		a.exp.Store(0)
		a.mu.Unlock()
		// What the handed-over holds stand on, and the headroom their
		// bills past the pools spend (the next server's hand).
		keep := min((held[a]+a.headroom()+a.scale-1)/a.scale, a.leased)
		if a.leased == keep {
			continue
		}
		unused := min(hand/a.scale, a.leased-keep)
		a.seq++
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		err := g.quotas.Release(sctx, a.key, g.opt.Holder, g.releaseID(a), a.leased-keep-unused, unused)
		cancel()
		if err != nil && tsubame.ErrorCode(err) != tsubame.ECONFLICT {
			failed = append(failed, a.key)
			continue
		}
		a.leased = keep
	}
	var kept []handedKept
	if g.opt.Handovers != nil {
		kept = g.kept.snapshot()
	}
	if len(buckets) > 0 || len(kept) > 0 {
		g.handOver(ctx, buckets, kept)
	}
	for _, c := range children {
		if err := c.Close(ctx); err != nil {
			failed = append(failed, "(adopted) "+err.Error())
		}
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		return tsubame.Errorf(tsubame.EUNAVAILABLE, "cannot give back the budget leases of %d keys (they count as spent when they expire): %v", len(failed), failed[:min(len(failed), 10)])
	}
	return nil
}

// Counts are a ledger's counters, for metrics.
type Counts struct {
	// Holds are the bids (and decisions) whose money is held, in Buckets
	// (a line item's holds ending together) of about HoldBytes in
	// all, the oldest made OldestHold ago; Accounts the counters this node
	// keeps a share of.
	Holds, Buckets, HoldBytes int64
	OldestHold                time.Duration
	Accounts                  int
	// Billed, Lost and Expired count the holds that ended: spent by a bill,
	// given back by a loss notice, given back at a deadline (not won in
	// the win window, or won and not billed by the end of the
	// reservation). Won counts those that won on the way.
	Billed, Won, Lost, Expired uint64
	// Late counts bills of no hold (past their deadline, after a loss, or
	// of a process since restarted), spent from the hand; PastHold the
	// bills of bids held by a share (decision.Request.HoldShare) that
	// cost more than their bucket's holds had left, the rest spent from
	// the hand; Overage the bills of either kind a hand could not cover,
	// debited in the store past the leases.
	Late, PastHold, Overage uint64
	// Kept counts the won bids spent at the end of their reservation with
	// no bill (decision.Request.KeepWon), KeptBilled the late bills that
	// came for them (counted in Late too; not spent again).
	Kept, KeptBilled uint64
	// Waited counts the decisions that found their hand empty and waited
	// for its top-up (LedgerOptions.Wait) until the loop answered,
	// WaitsTimedOut those whose wait ran out first; Warmed the accounts
	// leased for before their first decision (Warm).
	Waited, WaitsTimedOut, Warmed uint64
	// HandedOver counts the buckets of holds this server handed over when
	// it stopped; Adopted the stopped servers' handovers it settles now.
	HandedOver uint64
	Adopted    int
	// StoreErrors counts the store calls that failed; LeasesLost the
	// times the store held less of a lease than the node counted on (the
	// lease ended before it was renewed or given back, and the store
	// counted it as spent; or a failover lost writes), and Forgotten the
	// store units it no longer held then.
	StoreErrors, LeasesLost, Forgotten uint64
}

// Counts reports the ledger's counters. It takes no lock of the loop.
func (g *Ledger) Counts() Counts {
	g.mu.Lock()
	n := len(g.accounts)
	g.mu.Unlock()
	holds, buckets, oldest := g.holds.counts()
	g.mu.Lock()
	children := g.children
	g.mu.Unlock()
	for _, c := range children { // adopted holds are this server's to settle
		h, b, o := c.holds.counts()
		holds, buckets = holds+h, buckets+b
		if o > 0 && (oldest == 0 || o < oldest) {
			oldest = o
		}
	}
	var age time.Duration
	if oldest > 0 {
		age = max(g.opt.Now().Sub(time.Unix(0, oldest)), 0)
	}
	return Counts{Holds: holds, Buckets: buckets, HoldBytes: buckets * bucketBytes, OldestHold: age, Accounts: n, Billed: g.billed.Load(), Won: g.won.Load(),
		Lost: g.lostBids.Load(), Expired: g.expired.Load(), Late: g.late.Load(), PastHold: g.pastHold.Load(), Overage: g.overage.Load(),
		Kept: g.keptWon.Load(), KeptBilled: g.keptBilled.Load(),
		Waited: g.waited.Load(), WaitsTimedOut: g.waitsTimedOut.Load(), Warmed: g.warmed.Load(),
		HandedOver: g.handedOver.Load(), Adopted: len(children),
		StoreErrors: g.storeErrors.Load(), LeasesLost: g.lost.Load(), Forgotten: g.forgotten.Load()}
}

// AccountStats is one account as this node holds it.
type AccountStats struct {
	Key string
	// Limit and Target are in the store's units (impressions, or
	// micro-units of spend): the limit, and what pacing allows to be
	// committed by now.
	Limit, Target int64
	// Leased is this node's lease; Hand what of it is not taken, in the
	// store's units (rounded down); Holds the reservations open.
	Leased, Hand, Holds int64
}

// Stats reports every account this node keeps, by key.
func (g *Ledger) Stats() []AccountStats {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	g.mu.Lock()
	accts := make([]*account, 0, len(g.accounts))
	for _, a := range g.accounts {
		accts = append(accts, a)
	}
	g.mu.Unlock()
	now := g.opt.Now().UnixNano()
	out := make([]AccountStats, 0, len(accts))
	for _, a := range accts {
		cfg := a.cfg.Load()
		c := a.curve
		out = append(out, AccountStats{Key: a.key, Limit: cfg.limit, Target: cfg.pacer.target(&c, cfg.limit, cfg.start, cfg.end, now),
			Leased: a.leased, Hand: a.hand.Load() / a.scale, Holds: a.holds.Load()})
	}
	slices.SortFunc(out, func(x, y AccountStats) int { return cmp.Compare(x.Key, y.Key) })
	return out
}

// Warm leases, ahead of their first decision, for the line items of ix
// with an impression limit or a budget that serve now, are new in ix (not
// in prev, the index it replaces, or in it before their flight started;
// nil: all) and whose accounts this ledger never warmed nor leased for: at
// most Warm accounts (LedgerOptions), those of the line items with the
// most traffic learned first when there are more,
// within the store Timeout, each up to the most a hand holds (a 64th of
// its limit; the store grants no more than its pacing allows). So a fresh
// node, a new line item or a new flight is served from its first request
// instead of passing it over while the loop asks. A hand warmed and not
// asked for is given back over the next rounds. It returns the accounts
// leased for.
func (g *Ledger) Warm(ctx context.Context, ix, prev *decision.Index) int {
	if g.opt.Warm <= 0 {
		return 0
	}
	now := g.opt.Now()
	nowNs := now.UnixNano()
	type candidate struct {
		l       *decision.Line
		traffic float64 // what the server learned of its requests a day
	}
	var cands []candidate
	for l := range ix.Fresh(prev) {
		if !l.Limited {
			continue
		}
		if start, end := l.Flight(); nowNs < start || nowNs >= end {
			continue
		}
		if prev != nil {
			// Only a line item new in ix, or whose flight started since
			// prev was compiled: the others were warmed then, or were
			// passed over for the bound and lease on their first decision.
			if p, ok := prev.LineByID(l.ID); ok {
				if start, _ := p.Flight(); start <= prev.Compiled().UnixNano() {
					continue
				}
			}
		}
		cands = append(cands, candidate{l, max(g.traffic.daily(keyLineImp(l.ID)), g.traffic.daily(keyCampaignSpend(l.Campaign)))})
	}
	if len(cands) > g.opt.Warm {
		// More than the bound: those that had the most traffic first
		// (after a restart, from the traffic file), then in index order.
		slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.traffic, a.traffic) })
	}
	var fresh []*account
	seen := map[*account]bool{}
	for _, c := range cands {
		if len(fresh) >= g.opt.Warm {
			break
		}
		l := c.l
		st := g.state(l)
		d := st.day.Load()
		if d == nil || nowNs < d.start || nowNs >= d.end {
			d = g.newDay(st, now)
		}
		for _, s := range [...]slot{st.total[0], st.total[1], d.slots[0], d.slots[1]} {
			a := s.acct
			if a == nil || seen[a] || a.warmed.Load() || a.exp.Load() != 0 || a.hand.Load() != 0 || a.holds.Load() != 0 {
				continue
			}
			seen[a] = true
			a.warmed.Store(true) // once: an account the store refused is not asked again at every compile
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
	defer cancel()
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if g.closed {
		return 0
	}
	for _, a := range fresh {
		cfg := a.cfg.Load()
		// As if the last intervals had asked for the whole ceiling: the
		// hand's target is its most, and it decays as demand does not come.
		a.recent = max(a.recent, a.ceiling(cfg)/2)
		a.asked = g.opt.Now().UnixNano() // a warmed hand keeps its lease Idle for a first decision
	}
	g.steps(ctx, fresh, false)
	n := 0
	for _, a := range fresh {
		if a.hand.Load() > 0 {
			n++
		}
	}
	g.warmed.Add(uint64(n))
	return n
}

// Plan is what the pacing lets l's daily impression limit and its
// campaign's daily budget (spend in micro-units) have committed by now
// within the day of now, as this node plans them: by the traffic it
// learned (traffic.go), unless hour weights say otherwise. -1 where there
// is no such limit.
func (g *Ledger) Plan(l *decision.Line, now time.Time) (imp, spend int64) {
	st := g.state(l)
	nowNs := now.UnixNano()
	d := st.day.Load()
	if d == nil || nowNs < d.start || nowNs >= d.end {
		d = g.newDay(st, now)
	}
	out := [2]int64{-1, -1}
	for i, s := range d.slots {
		if s.acct == nil {
			continue
		}
		cfg := s.acct.cfg.Load()
		var c curve
		out[i] = cfg.pacer.target(&c, cfg.limit, cfg.start, cfg.end, nowNs)
	}
	return out[0], out[1]
}
