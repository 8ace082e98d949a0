package ssp

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
)

// Options configure an Auctioneer.
type Options struct {
	// Currency is the account currency (ads.currency): floors, direct
	// line items' CPMs and the revenue are in it.
	Currency string
	// Rates convert partners' currencies (rtb.rates).
	Rates *tsubame.Rates
	Log   *slog.Logger
	// JournalDir keeps the win and billing notices not yet called, in a
	// file of this process's (the data directory), so that none is lost
	// when the process dies; those of a dead process found there are
	// called. Empty: none (they live in memory only).
	JournalDir string
}

// Auctioneer runs the auctions of the placements it sells: one OpenRTB
// 2.6 bid request sent to every eligible partner at once, the bids
// validated and ranked against the direct line item, the notices called.
// Safe for concurrent use; Reload swaps its configuration.
type Auctioneer struct {
	opt     Options
	st      atomic.Pointer[state]
	rates   atomic.Pointer[tsubame.Rates]
	stats   sync.Map // partner name -> *PartnerStats, kept across reloads
	notices *notifier
}

// state is a configuration as auctions use it.
type state struct {
	cfg        Config
	partners   map[string]*partner
	placements map[string]*placement
	step       tsubame.Money
	sellers    []byte // /sellers.json; nil without publishers
}

// placement is a sold placement, parsed.
type placement struct {
	id        string
	cfg       Placement
	publisher Publisher
	floor     tsubame.Money
	tmax      time.Duration
	sizes     []openrtb.Format
	banner    bool
	video     bool
	partners  []*partner // sorted by name
	deals     map[string]tsubame.Money
	dealIDs   []string // sorted
}

// New returns an Auctioneer selling cfg's placements (Validate has passed).
func New(cfg Config, opt Options) (*Auctioneer, error) {
	if opt.Rates == nil {
		r, err := tsubame.NewRates(opt.Currency, nil)
		if err != nil {
			return nil, err
		}
		opt.Rates = r
	}
	a := &Auctioneer{opt: opt}
	a.rates.Store(opt.Rates)
	var err error
	if a.notices, err = newNotifier(cfg.Notices, opt.JournalDir, opt.Log); err != nil {
		return nil, err
	}
	if err := a.Reload(cfg, nil); err != nil {
		a.notices.close()
		return nil, err
	}
	return a, nil
}

// Reload applies cfg (and rates, when not nil) to the auctions that start
// from now on; those running finish on the configuration they began with.
func (a *Auctioneer) Reload(cfg Config, rates *tsubame.Rates) error {
	if rates != nil {
		a.rates.Store(rates)
	}
	if errs := cfg.Validate(Env{Currency: a.opt.Currency, AdsEnabled: true, HasRate: a.rates.Load().Has}); len(errs) > 0 {
		return tsubame.Errorf(tsubame.EINVALID, "%s", strings.Join(errs, "; "))
	}
	st := &state{cfg: cfg, partners: map[string]*partner{}, placements: map[string]*placement{}}
	st.step, _ = tsubame.ParseMoney(cfg.PriceStep)
	if len(cfg.Publishers) > 0 {
		st.sellers = sellersJSON(&cfg)
	}
	old := a.st.Load()
	kept := map[*http.Transport]bool{}
	for name, p := range cfg.Demand {
		v, _ := a.stats.LoadOrStore(name, new(PartnerStats))
		var prev *partner
		if old != nil {
			prev = old.partners[name]
		}
		st.partners[name] = newPartner(name, p, int64(cfg.MaxResponse), v.(*PartnerStats), a.opt.Log, cfg.LogEvery, prev)
		kept[st.partners[name].transport] = true
	}
	for id, pc := range cfg.Placements {
		pl := &placement{id: id, cfg: pc, publisher: cfg.Publishers[pc.Publisher], tmax: cmp.Or(pc.TMax, cfg.TMax),
			deals: map[string]tsubame.Money{}}
		pl.floor, _ = tsubame.ParseMoney(pc.Floor)
		pl.banner = len(pc.Formats) == 0 || slices.Contains(pc.Formats, "banner")
		pl.video = slices.Contains(pc.Formats, "video")
		for _, s := range pc.Sizes {
			w, h := parseSize(s)
			pl.sizes = append(pl.sizes, openrtb.Format{W: openrtb.Int(w), H: openrtb.Int(h)})
		}
		for deal, f := range pc.Deals {
			pl.deals[deal], _ = tsubame.ParseMoney(f)
			pl.dealIDs = append(pl.dealIDs, deal)
		}
		sort.Strings(pl.dealIDs)
		names := pc.Partners
		if len(names) == 0 {
			names = sortedKeys(cfg.Demand)
		}
		for _, n := range names {
			if p := st.partners[n]; p != nil && p.cfg.On() && (p.places == nil || p.places[id]) {
				pl.partners = append(pl.partners, p)
			}
		}
		slices.SortFunc(pl.partners, func(x, y *partner) int { return strings.Compare(x.name, y.name) })
		st.placements[id] = pl
	}
	if old := a.st.Swap(st); old != nil {
		// Idle connections of the old transports are closed once the
		// auctions on them are done with: a call in flight keeps its own.
		go func() {
			time.Sleep(cmp.Or(old.cfg.TMax, time.Second) * 4)
			for _, p := range old.partners {
				if !kept[p.transport] {
					p.close()
				}
			}
		}()
	}
	return nil
}

// Sells reports whether placement is sold in an auction.
func (a *Auctioneer) Sells(placement string) bool {
	_, ok := a.st.Load().placements[placement]
	return ok
}

// Guaranteed reports whether a direct line item of priority p wins
// outright (no auction is held).
func (a *Auctioneer) Guaranteed(p int) bool { return p <= a.st.Load().cfg.GuaranteedPriority }

// Stats returns each partner's counts, by name (those removed by a reload
// too: counts are kept since the start).
func (a *Auctioneer) Stats() map[string]*PartnerStats {
	out := map[string]*PartnerStats{}
	a.stats.Range(func(k, v any) bool {
		out[k.(string)] = v.(*PartnerStats)
		return true
	})
	return out
}

// Bill calls a sold impression's billing URL (Result.BillURL), once
// its impression is counted; it never blocks.
func (a *Auctioneer) Bill(u string) {
	if u != "" {
		a.notices.pushMoney(u)
	}
}

// NoticeStats are the notice calls made, failed and dropped (the queue
// full) since the start.
func (a *Auctioneer) NoticeStats() (sent, failed, dropped uint64) { return a.notices.stats() }

// Close stops the notice workers once the queued notices are called (or
// ctx ends) and closes the partners' idle connections.
func (a *Auctioneer) Close(ctx context.Context) {
	a.notices.drain(ctx)
	for _, p := range a.st.Load().partners {
		p.close()
	}
}

// Opportunity is an impression for sale: what the ad request says, parsed
// by the caller.
type Opportunity struct {
	// ID is the auction's id: the bid request's id and source.tid.
	ID        string
	Placement string
	// Site is the page's domain, Page its URL, Ref its referrer; App a
	// bundle when the request comes from an app.
	Site, Page, Ref string
	App             string
	UA              string
	IP              netip.Addr
	// Country is ISO 3166-1 alpha-2, Region ISO 3166-2 ("JP-13"), Device
	// one of tsubame.Devices, OS a lower-case token.
	Country, Region, Device, OS string
	// Language is the browser's, ISO 639-1 ("ja"), from Accept-Language.
	Language string
	// User is the visitor id: empty when a privacy signal rules it out
	// (Private), which also truncates the address sent.
	User    string
	Private bool
	// Signals are the request's privacy signals, GPPSID its gpp_sid.
	Signals privacy.Signals
	GPPSID  []int
	// SChain is the supply chain the request came with (nil: none).
	SChain *openrtb.SupplyChain
	// BuyerUIDs are the visitor's ids in partners' systems, by partner
	// (their user syncs'): each partner's request carries its own as
	// user.buyeruid. Nil when Private.
	BuyerUIDs map[string]string
	// Format, W and H narrow the placement's formats and sizes.
	Format string
	W, H   int
	Secure bool
	Test   bool
	// Start is when the request was read: the auction's tmax counts from
	// it.
	Start time.Time
}

// Direct is the direct line item that competes (Line nil: none): a
// decision made with decision.Request.Check, which has taken nothing.
type Direct struct {
	Line     *decision.Line
	Creative *tsubame.Creative
	// Take takes what serving it costs once it has won (Index.Take), its
	// store calls done by the auction's deadline: false when it no longer
	// can, and the auction goes to the next best.
	Take func(by time.Time) bool
}

// Bid is one bid of a partner, as the auction read it.
type Bid struct {
	Partner string
	Seat    string
	openrtb.Bid
	// Cur is the currency the partner bid in; Price (openrtb.Bid's) is in
	// it. Value is what the bid is worth in the account currency, after
	// the partner's bid adjustment: what it competes with.
	Cur   string
	Value tsubame.Money
	// Loss is its OpenRTB loss reason (LossWon for the winner); Reason
	// says why a filtered bid was dropped.
	Loss   int
	Reason string
	adjust int64
	from   *partner
}

// Call is one partner's part in an auction.
type Call struct {
	Partner string
	Outcome Outcome
	Status  int
	Latency time.Duration
	// Bids counts the bids it made, Best is the value of its best valid
	// one (account currency, adjusted); Invalid the bids dropped by
	// validation, Reason the first one's reason.
	Bids    int
	Best    tsubame.Money
	Invalid int
	Reason  string
}

// Result is an auction's outcome.
type Result struct {
	// Sold is the winning bid (nil: none won). DirectWon: the direct
	// line item won (and was taken).
	Sold      *Bid
	DirectWon bool
	// Price is what the winner pays, account currency: the placement's
	// revenue (a sold bid's after its partner's bid adjustment).
	Price tsubame.Money
	// Gross is what a sold bid's partner is charged, in its currency
	// (the ${AUCTION_PRICE} of its notices).
	Gross tsubame.Money
	// Markup is a sold bid's markup, macros substituted; BillURL its
	// burl (empty: none), to call once its impression is counted.
	Markup  string
	BillURL string
	// Guaranteed: the direct line item won outright; no partner was
	// asked. Unsold says why no partner was asked otherwise
	// ("site_not_publishers": the page's site is not the placement's
	// publisher's).
	Guaranteed bool
	Unsold     string
	// Calls are the partners' parts, in name order; Bids every bid read,
	// valid or not.
	Calls []Call
	Bids  []*Bid
	Floor tsubame.Money
	TMax  time.Duration
	// wins and losses are the notices Commit queues.
	wins, losses []string
	committed    bool
}

// Commit queues the notices of an auction whose result was served: the
// winner's nurl and each losing partner's lurl (a result that could not
// be served is not committed: no partner hears of it). Once.
func (a *Auctioneer) Commit(res *Result) {
	if res.committed {
		return
	}
	res.committed = true
	if res.Sold != nil {
		if v, ok := a.stats.Load(res.Sold.Partner); ok {
			v.(*PartnerStats).Wins.Add(1)
		}
	}
	for _, u := range res.wins {
		a.notices.pushMoney(u)
	}
	for _, u := range res.losses {
		a.notices.pushLoss(u)
	}
}

// Result.Unsold: the page's site is not one the placement's publisher
// sells on; the request's format or size is none the placement offers.
const (
	UnsoldSite   = "site_not_publishers"
	UnsoldFormat = "format_not_offered"
)

// offers reports whether the placement offers what opp asks: its format,
// and for a banner its size.
func (pl *placement) offers(opp *Opportunity) bool {
	video := pl.video && opp.Format != tsubame.FormatBanner
	if !pl.banner || opp.Format == tsubame.FormatVideo {
		return video
	}
	if opp.W > 0 && opp.H > 0 && !pl.fits(opp.W, opp.H, &Opportunity{}) {
		return video
	}
	return true
}

// Video reports whether a sold bid's markup is a VAST document.
func (r *Result) Video() bool {
	return r.Sold != nil && (r.Sold.MType == openrtb.MTypeVideo || looksLikeVAST(r.Markup))
}

// Asked, Answered and TimedOut count the calls.
func (r *Result) Asked() (asked, answered, timedOut int) {
	for _, c := range r.Calls {
		switch c.Outcome {
		case OutcomeThrottled, OutcomeClosed:
			continue
		case OutcomeBid, OutcomeNoBid:
			answered++
		case OutcomeTimeout:
			timedOut++
		}
		asked++
	}
	return asked, answered, timedOut
}

// Run holds the auction of opp against direct, and returns its outcome by
// the placement's deadline (tmax from opp.Start, less the margin): the
// partners that have not answered by then, less ssp.markup_time (kept for
// fetching a winner's markup from its nurl), are not waited for. ctx
// bounds it too. The notices it calls for (the winner's nurl, the losers'
// lurl) are queued by Commit, once the caller has served the result.
func (a *Auctioneer) Run(ctx context.Context, opp *Opportunity, direct Direct) *Result {
	st := a.st.Load()
	pl := st.placements[opp.Placement]
	res := &Result{}
	if pl == nil {
		return res
	}
	res.Floor, res.TMax = pl.floor, pl.tmax
	deadline := opp.Start.Add(pl.tmax - st.cfg.Margin)
	take := func() bool { return direct.Take == nil || direct.Take(deadline) }
	if direct.Line != nil && direct.Line.Priority <= st.cfg.GuaranteedPriority {
		res.Guaranteed = true
		res.DirectWon = take()
		if res.DirectWon {
			res.Price = direct.Line.CPM
			return res
		}
		direct = Direct{} // taken meanwhile: the partners are asked after all
		res.Guaranteed = false
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	callCtx, callCancel := context.WithDeadline(ctx, deadline.Add(-st.cfg.MarkupTime))
	defer callCancel()
	rates := a.rates.Load()
	var answers []answer
	switch {
	case opp.App == "" && !pl.publisher.sells(opp.Site):
		res.Unsold = UnsoldSite
	case !pl.offers(opp):
		res.Unsold = UnsoldFormat
	default:
		answers = a.ask(callCtx, st, pl, opp, rates)
	}
	for _, ans := range answers {
		c := Call{Partner: ans.partner.name, Outcome: ans.outcome, Status: ans.status, Latency: ans.latency}
		if ans.resp != nil {
			for _, bid := range a.read(st, pl, opp, ans, rates) {
				res.Bids = append(res.Bids, bid)
				c.Bids++
				if bid.Loss < 0 && bid.Value > c.Best {
					c.Best = bid.Value
				}
				if bid.Loss >= 0 {
					c.Invalid++
					if c.Reason == "" {
						c.Reason = bid.Reason
					}
				}
			}
		}
		res.Calls = append(res.Calls, c)
	}
	a.settle(ctx, st, pl, opp, direct.Line, take, res, rates)
	if opp.Test && res.Sold != nil {
		res.committed = true // a test auction counts no win and calls nothing
	}
	return res
}

// ask sends the bid request to every eligible partner at once and
// gathers their answers until ctx ends.
func (a *Auctioneer) ask(ctx context.Context, st *state, pl *placement, opp *Opportunity, rates *tsubame.Rates) []answer {
	type job struct {
		p    *partner
		body []byte
	}
	var jobs []job
	var out []answer
	cutoff, _ := ctx.Deadline()
	for _, p := range pl.partners {
		if !p.mayBid(pl.id, opp.Site) {
			continue
		}
		if !p.admit() {
			p.stats.Throttled.Add(1)
			out = append(out, answer{partner: p, outcome: OutcomeThrottled})
			continue
		}
		left := time.Until(cutoff)
		if p.cfg.Timeout > 0 {
			left = min(left, p.cfg.Timeout)
		}
		body, err := a.request(st, pl, opp, p, rates, left)
		if err != nil {
			p.inFlight.Add(-1)
			out = append(out, p.done(answer{partner: p, outcome: OutcomeError, err: err}, time.Now()))
			continue
		}
		jobs = append(jobs, job{p, body})
	}
	if len(jobs) == 0 {
		return out
	}
	ch := make(chan answer, len(jobs)) // buffered: a late call never blocks
	for _, j := range jobs {
		pctx, pcancel := ctx, context.CancelFunc(func() {})
		if j.p.cfg.Timeout > 0 {
			pctx, pcancel = context.WithTimeout(ctx, j.p.cfg.Timeout)
		}
		go func() {
			defer pcancel()
			ch <- j.p.call(pctx, j.body)
		}()
	}
	for range jobs {
		select {
		case ans := <-ch:
			out = append(out, ans)
		case <-ctx.Done():
			// The deadline: the calls still out are cancelled by the
			// caller's cancel and end on their own; their answers are
			// not waited for. Those already in are taken.
			for drained := false; !drained; {
				select {
				case ans := <-ch:
					out = append(out, ans)
				default:
					drained = true
				}
			}
			done := map[*partner]bool{}
			for _, o := range out {
				done[o.partner] = true
			}
			for _, j := range jobs {
				if !done[j.p] {
					out = append(out, answer{partner: j.p, outcome: OutcomeTimeout, latency: time.Since(opp.Start)})
				}
			}
			slices.SortFunc(out, func(x, y answer) int { return strings.Compare(x.partner.name, y.partner.name) })
			return out
		}
	}
	slices.SortFunc(out, func(x, y answer) int { return strings.Compare(x.partner.name, y.partner.name) })
	return out
}
