package config

import (
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"tsubame/internal/bidder"
)

// RTB configures the OpenRTB 2.6 bidder (internal/bidder).
type RTB struct {
	// Exchanges are the exchanges bid on, by name: POST /rtb/<name>. None:
	// the bidder's routes are not served.
	Exchanges map[string]RTBExchange `koanf:"exchanges"`
	// MaxBody bounds a bid request's body, after gunzip too.
	MaxBody ByteSize `koanf:"max_body"`
	// Timeout is a bid request's deadline when it has no tmax, and the
	// bound of its deadline (tmax less network_ms) when it has one.
	Timeout time.Duration `koanf:"timeout"`
	// Rates are the currencies bids may be made in besides the account
	// currency: how many units one unit of ads.currency buys, as decimal
	// strings (read exactly). Applied by a reload.
	Rates map[string]string `koanf:"rates"`
	// NoticeURL is the scheme and host of the win, billing and loss URLs;
	// empty takes ads.tracking.url (one of them is needed: exchanges call
	// the notices server to server).
	NoticeURL string `koanf:"notice_url"`
}

// RTBExchange is one exchange (rtb.exchanges.<name>).
type RTBExchange struct {
	// Seat is the seat this server bids as (a deal's wseat must name it).
	Seat string `koanf:"seat"`
	// TokenHeader and Token: when Token is set, a request without it in
	// TokenHeader is a 401.
	TokenHeader string `koanf:"token_header"`
	Token       string `koanf:"token" secret:"true"`
	// Sources are the addresses or CIDRs the exchange sends from; empty:
	// any.
	Sources []string `koanf:"sources"`
	// QPS bounds the requests answered a second (past it a bare 204); 0:
	// none.
	QPS int `koanf:"qps"`
	// NetworkMS is taken off tmax for the way back to the exchange.
	NetworkMS int `koanf:"network_ms"`
	// PriceEncoding is how the exchange writes the clearing price: plain
	// (the default; the only one read today).
	PriceEncoding string `koanf:"price_encoding"`
	// Reservation is how long a bid holds its price for its billing
	// notice: the exchange's billing delay (0: ads.reservation).
	Reservation time.Duration `koanf:"reservation"`
	// MarkupOnWin serves the markup on the win notice rather than in the
	// bid (adm).
	MarkupOnWin bool `koanf:"markup_on_win"`
	// BidEveryTID bids on every request of a transaction (source.tid),
	// not only on the first seen across nodes.
	BidEveryTID bool `koanf:"bid_every_tid"`
	// Shading is the share of the CPM a first-price bid is ("0.85"; empty:
	// no shading), ShadingStep how far over the floor it stays (empty:
	// bidder.DefaultShadingStep): bidder.ParseShading.
	Shading     string `koanf:"shading"`
	ShadingStep string `koanf:"shading_step"`
	// BillOn is the event that bills a bid (bidder.BillOns): burl (the
	// default), nurl, or markup (the impression the markup fires).
	BillOn string `koanf:"bill_on"`
	// WinWindow is how long a bid waits for its win notice before its
	// money comes back (bidder.ParseWinWindow): auto (measured), off, or
	// a duration.
	WinWindow string `koanf:"win_window"`
	// WinRateHolds is how a bid without a win window holds its price
	// until its reservation ends (bidder.WinRateHoldsValues): auto (the
	// default) a share, by the line item's measured win rate, while the
	// exchange sends no win or loss notices; on a share always; off all
	// of it.
	WinRateHolds string `koanf:"win_rate_holds"`
	// KeepWon is what becomes of a bid won and not billed by the end of
	// its reservation (bidder.KeepWonValues): auto (the default) spent
	// until the exchange is seen billing on time, then given back; on
	// spent; off given back.
	KeepWon string `koanf:"keep_won"`
}

// ExchangeReservation is the reservation of exchange e: its own, else
// ads.reservation.
func (c *Config) ExchangeReservation(e RTBExchange) time.Duration {
	if e.Reservation > 0 {
		return e.Reservation
	}
	return c.Ads.Reservation
}

// LongestReservation is the longest reservation of a decision or a bid:
// how long the budget ledger's leases must outlast.
func (c *Config) LongestReservation() time.Duration {
	longest := c.Ads.Reservation
	for _, e := range c.RTB.Exchanges {
		longest = max(longest, c.ExchangeReservation(e))
	}
	return longest
}

// RTBNoticeURL is rtb.notice_url, else ads.tracking.url.
func (c *Config) RTBNoticeURL() string {
	if c.RTB.NoticeURL != "" {
		return c.RTB.NoticeURL
	}
	return c.Ads.Tracking.URL
}

var exchangeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
var headerName = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

func (c *Config) validateRTB(p *problems) {
	r := c.RTB
	if r.MaxBody < 1<<10 || r.MaxBody > 16<<20 {
		p.add("rtb.max_body: must be between 1KiB and 16MiB (got %v)", r.MaxBody)
	}
	if r.Timeout < 10*time.Millisecond || r.Timeout > 10*time.Second {
		p.add("rtb.timeout: must be between 10ms and 10s (got %v)", r.Timeout)
	}
	names := make([]string, 0, len(r.Exchanges))
	for name := range r.Exchanges {
		names = append(names, name)
	}
	sort.Strings(names)
	for cur, rate := range r.Rates {
		if len(cur) != 3 || strings.ToUpper(cur) != cur || strings.Trim(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			p.add("rtb.rates.%s: not an ISO 4217 code (three capital letters)", cur)
		}
		if !decimalRate.MatchString(rate) || strings.Trim(rate, "0.") == "" {
			p.add("rtb.rates.%s: %q is not a positive decimal of up to 6 places (write it as a string: \"150.25\")", cur, rate)
		}
	}
	if len(names) == 0 {
		return
	}
	if !c.Ads.Enabled {
		p.add("rtb.exchanges: bidding needs ads.enabled: true (the line items it bids with)")
	}
	if u := c.RTBNoticeURL(); u == "" {
		p.add("rtb.notice_url: needed (or ads.tracking.url): exchanges call the notice URLs server to server")
	} else if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" ||
		(pu.Path != "" && pu.Path != "/") || pu.RawQuery != "" || pu.User != nil {
		p.add("rtb.notice_url: %q is not a scheme and host such as https://ads.example.com", u)
	}
	for _, name := range names {
		e := r.Exchanges[name]
		at := "rtb.exchanges." + name
		if !exchangeName.MatchString(name) {
			p.add("%s: a name is 1 to 64 letters, digits, '-' and '_' (it is the path /rtb/<name>)", at)
		}
		if e.Seat == "" || len(e.Seat) > 64 {
			p.add("%s.seat: the seat this server bids as, 1 to 64 bytes", at)
		}
		if e.Token != "" && !headerName.MatchString(e.TokenHeader) {
			p.add("%s.token_header: a header name is needed with a token", at)
		}
		if e.Token != "" && len(e.Token) < 16 {
			p.add("%s.token: at least 16 characters", at)
		}
		for _, s := range e.Sources {
			if _, err := netip.ParsePrefix(s); err != nil {
				if _, err := netip.ParseAddr(s); err != nil {
					p.add("%s.sources: %q is not an address or a CIDR", at, s)
				}
			}
		}
		if e.QPS < 0 || e.QPS > 1_000_000 {
			p.add("%s.qps: 0 (no bound) to 1000000", at)
		}
		if e.NetworkMS < 0 || e.NetworkMS > 10_000 {
			p.add("%s.network_ms: 0 to 10000", at)
		}
		if _, err := bidder.ParseShading(e.Shading, e.ShadingStep); err != nil {
			p.add("%s.%v", at, err)
		}
		if _, err := bidder.ParseWinWindow(e.WinWindow); err != nil {
			p.add("%s.%v", at, err)
		}
		if e.WinRateHolds != "" && !slices.Contains(bidder.WinRateHoldsValues, e.WinRateHolds) {
			p.add("%s.win_rate_holds: %q is not one of %s", at, e.WinRateHolds, strings.Join(bidder.WinRateHoldsValues, ", "))
		}
		if e.KeepWon != "" && !slices.Contains(bidder.KeepWonValues, e.KeepWon) {
			p.add("%s.keep_won: %q is not one of %s", at, e.KeepWon, strings.Join(bidder.KeepWonValues, ", "))
		}
		if e.BillOn != "" && !slices.Contains(bidder.BillOns, e.BillOn) {
			p.add("%s.bill_on: %q is not one of %s", at, e.BillOn, strings.Join(bidder.BillOns, ", "))
		}
		if e.PriceEncoding != "" && e.PriceEncoding != "plain" {
			p.add("%s.price_encoding: %q is not one this server reads (plain)", at, e.PriceEncoding)
		}
		if res := c.ExchangeReservation(e); res < time.Second || res+c.Ads.Budget.Grace+2*c.Ads.Budget.Interval > c.Ads.Tracking.TTL {
			p.add("%s.reservation: from 1s, and with ads.budget.grace and two ads.budget.interval within ads.tracking.ttl (%v)", at, c.Ads.Tracking.TTL)
		}
	}
	if c.LongestReservation()+c.Ads.Budget.Grace+c.Ads.Budget.Lease > 24*time.Hour {
		p.add("rtb.exchanges: the longest reservation, ads.budget.grace and ads.budget.lease add up to more than 24h, the longest lease a store keeps")
	}
}

var decimalRate = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,6})?$`)

// Sources parses e's sources (Validate has checked them).
func (e RTBExchange) SourcePrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range e.Sources {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}
