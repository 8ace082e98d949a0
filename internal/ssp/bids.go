package ssp

import (
	"context"
	"math/bits"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/openrtb"
)

// OpenRTB 2.6 loss reason codes (list 5.25) the auction sends in lurl's
// ${AUCTION_LOSS}.
const (
	LossWon             = 0
	LossInternal        = 1
	LossExpired         = 2   // the impression opportunity expired
	LossInvalidResponse = 3   // invalid bid response
	LossInvalidDeal     = 4   // a deal id not on offer
	LossInvalidAuction  = 5   // another auction's or imp's id
	LossBadAdomain      = 6   // invalid advertiser domain
	LossNoMarkup        = 7   // missing markup
	LossNoPrice         = 9   // missing bid price
	LossBelowFloor      = 100 // below the auction floor
	LossBelowDealFloor  = 101 // below the deal floor
	LossOutbid          = 102 // lost to a higher bid
	LossSize            = 203 // size not allowed
	LossFormat          = 204 // incorrect creative format
	LossAdvertiser      = 205 // advertiser exclusions
	LossNotSecure       = 207 // not secure
	LossCategory        = 209 // category exclusions
)

// MaxMarkup bounds a bid's markup (adm, or the body its nurl answers).
const MaxMarkup = 256 << 10

// maxNoticeURL bounds a bid's nurl, burl and lurl.
const maxNoticeURL = 2048

// MaxBillURL bounds a winning bid's burl, macros substituted: the sold
// impression's tracking URL carries it (track.MaxClickLen).
const MaxBillURL = 1024

// read validates the bids of one answer and returns them, each valid one
// with Loss -1 and its value, each invalid one with its loss code and
// reason.
func (a *Auctioneer) read(st *state, pl *placement, opp *Opportunity, ans answer, rates *tsubame.Rates) []*Bid {
	p := ans.partner
	cur := ans.resp.Cur
	if cur == "" {
		cur = DefaultCurrency
	}
	var out []*Bid
	for i := range ans.resp.SeatBid {
		sb := &ans.resp.SeatBid[i]
		for j := range sb.Bid {
			b := &Bid{Partner: p.name, Seat: sb.Seat, Bid: sb.Bid[j], Cur: cur, Loss: -1, adjust: p.adjust, from: p}
			if ans.resp.ID != opp.ID {
				b.Loss, b.Reason = LossInvalidAuction, "auction_id"
			} else {
				a.check(pl, opp, b, rates)
			}
			if b.Loss >= 0 {
				p.stats.Invalid.Add(1)
			}
			out = append(out, b)
		}
	}
	return out
}

// check validates b against the impression offered and values it.
func (a *Auctioneer) check(pl *placement, opp *Opportunity, b *Bid, rates *tsubame.Rates) {
	drop := func(loss int, reason string) { b.Loss, b.Reason = loss, reason }
	price := tsubame.Money(b.Price)
	switch {
	case b.ImpID != impID:
		drop(LossInvalidResponse, "imp_id")
		return
	case price <= 0:
		drop(LossNoPrice, "price")
		return
	case b.AdM == "" && b.NURL == "":
		drop(LossNoMarkup, "no_markup")
		return
	case len(b.AdM) > MaxMarkup:
		drop(LossInvalidResponse, "markup_too_large")
		return
	case !noticeURL(b.NURL) || !noticeURL(b.BURL) || !noticeURL(b.LURL):
		drop(LossInvalidResponse, "notice_url")
		return
	}
	if !tsubame.ValidCurrency(b.Cur) || !rates.Has(b.Cur) {
		drop(LossInvalidResponse, "currency")
		return
	}
	v, _ := rates.ValueInAccount(price, b.Cur)
	if v > tsubame.MaxCPM {
		drop(LossInvalidResponse, "price_too_high")
		return
	}
	b.Value = adjust(v, b.adjust)
	if b.AdM != "" && !a.checkMarkup(pl, opp, b, b.AdM) {
		return
	}
	if b.AdM == "" && b.W != 0 && !pl.fits(int(b.W), int(b.H), opp) {
		drop(LossSize, "size")
		return
	}
	if len(pl.cfg.BAdv) > 0 && len(b.ADomain) == 0 {
		drop(LossBadAdomain, "no_adomain")
		return
	}
	for _, d := range b.ADomain {
		if blockedDomain(pl.cfg.BAdv, d) {
			drop(LossAdvertiser, "adomain_blocked")
			return
		}
	}
	for _, c := range b.Cat {
		if blockedCategory(pl.cfg.BCat, c) {
			drop(LossCategory, "category_blocked")
			return
		}
	}
	floor, floorLoss := pl.floor, LossBelowFloor
	if b.DealID != "" {
		f, ok := pl.deals[b.DealID]
		if !ok || !b.from.offered(b.DealID) {
			drop(LossInvalidDeal, "deal")
			return
		}
		floor, floorLoss = max(f, pl.floor), LossBelowDealFloor
	}
	if b.Value < floor || b.Value == 0 {
		drop(floorLoss, "below_floor")
	}
}

// checkMarkup checks markup (the bid's adm, or what its nurl answered)
// against the impression: a VAST document (with an InLine or Wrapper ad
// the impression URL can be added to) only for video, and only with mtype
// 0 or 2; anything else only for a banner, with mtype 0 or 1, of a size
// offered (the one asked when the bid names none); nothing over http on a
// secure page. It drops b and reports false when it does not fit.
func (a *Auctioneer) checkMarkup(pl *placement, opp *Opportunity, b *Bid, markup string) bool {
	drop := func(loss int, reason string) bool { b.Loss, b.Reason = loss, reason; return false }
	video := looksLikeVAST(markup)
	switch {
	case b.MType != 0 && b.MType != openrtb.MTypeBanner && b.MType != openrtb.MTypeVideo,
		video && b.MType == openrtb.MTypeBanner, !video && b.MType == openrtb.MTypeVideo:
		return drop(LossFormat, "format")
	case video && (!pl.video || opp.Format == tsubame.FormatBanner), !video && (!pl.banner || opp.Format == tsubame.FormatVideo):
		return drop(LossFormat, "format")
	case video && !hasAd(markup):
		return drop(LossFormat, "vast_without_ad")
	case opp.Secure && insecure(markup):
		return drop(LossNotSecure, "not_secure")
	}
	if !video {
		if b.W == 0 && b.H == 0 {
			w, h, ok := pl.onlySize(opp)
			if !ok {
				return drop(LossSize, "no_size")
			}
			b.W, b.H = openrtb.Int(w), openrtb.Int(h)
		}
		if !pl.fits(int(b.W), int(b.H), opp) {
			return drop(LossSize, "size")
		}
	}
	return true
}

// onlySize is the banner size an impression asks when it asks one alone.
func (pl *placement) onlySize(opp *Opportunity) (w, h int, ok bool) {
	if opp.W > 0 && opp.H > 0 {
		return opp.W, opp.H, true
	}
	if len(pl.sizes) == 1 {
		return int(pl.sizes[0].W), int(pl.sizes[0].H), true
	}
	return 0, 0, false
}

// hasAd reports whether a VAST document has an InLine or Wrapper ad.
func hasAd(doc string) bool {
	return strings.Contains(doc, "<InLine") || strings.Contains(doc, "<Wrapper")
}

// fits reports whether a banner of w×h may fill the placement for opp.
func (pl *placement) fits(w, h int, opp *Opportunity) bool {
	if opp.W > 0 && opp.H > 0 {
		return w == opp.W && h == opp.H
	}
	for _, f := range pl.sizes {
		if int(f.W) == w && int(f.H) == h {
			return true
		}
	}
	return false
}

// adjust applies a bid adjustment (parts per million), rounding down.
func adjust(v tsubame.Money, ppm int64) tsubame.Money {
	if ppm == adjustmentScale {
		return v
	}
	return tsubame.Money(mulDiv(int64(v), ppm, adjustmentScale))
}

// gross undoes a bid adjustment: what a partner pays for a price of p
// after it, rounding down (never more than it bid).
func gross(p tsubame.Money, ppm int64) tsubame.Money {
	if ppm == adjustmentScale {
		return p
	}
	return tsubame.Money(mulDiv(int64(p), adjustmentScale, ppm))
}

// mulDiv is a*b/c rounded down, for amounts that fit (MaxCPM times a
// factor of at most 10 million parts per million fits in 128 bits and,
// divided, in 64).
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, 1<<63-1))
}

// mulDivUp is a*b/c rounded up.
func mulDivUp(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, rem := bits.Div64(hi, lo, uint64(c))
	if rem > 0 {
		q++
	}
	return int64(min(q, 1<<63-1))
}

func noticeURL(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxNoticeURL || !(strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://")) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '"' || c == '<' || c == '>' {
			return false
		}
	}
	// Macros are substituted before it is parsed again: parse it with
	// them as they are, which url.Parse takes.
	u, err := url.Parse(s)
	return err == nil && u.Host != ""
}

func looksLikeVAST(adm string) bool {
	s := strings.TrimSpace(adm)
	if strings.HasPrefix(s, "<?xml") {
		if i := strings.Index(s, "?>"); i > 0 {
			s = strings.TrimSpace(s[i+2:])
		}
	}
	return strings.HasPrefix(s, "<VAST")
}

// insecure reports whether markup loads anything over http.
func insecure(adm string) bool {
	return strings.Contains(adm, "http://") || strings.Contains(adm, "http:\\/\\/")
}

func blockedDomain(blocks []string, d string) bool {
	d = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(d, "https://"), "http://"))
	d = strings.TrimPrefix(d, "www.")
	for _, b := range blocks {
		if d == b || strings.HasSuffix(d, "."+b) {
			return true
		}
	}
	return false
}

// blockedCategory reports whether cat is blocked: named, or under a
// blocked top-level category (IAB7 blocks IAB7-1).
func blockedCategory(blocks []string, cat string) bool {
	for _, b := range blocks {
		if cat == b || strings.HasPrefix(cat, b+"-") {
			return true
		}
	}
	return false
}

// settle ranks the valid bids and the direct line item, takes the
// winner, prices it, and lists the notices Commit queues. fetchBy bounds
// the fetch of a winning bid's markup from its nurl.
func (a *Auctioneer) settle(fetchBy context.Context, st *state, pl *placement, opp *Opportunity, line *decision.Line, take func() bool,
	res *Result, rates *tsubame.Rates) {
	var valid []*Bid
	for _, b := range res.Bids {
		if b.Loss < 0 {
			valid = append(valid, b)
		}
	}
	// Highest value first; ties by partner name then bid id, so that an
	// auction's outcome does not hang on the order answers came in.
	slices.SortStableFunc(valid, func(x, y *Bid) int {
		if x.Value != y.Value {
			if x.Value > y.Value {
				return -1
			}
			return 1
		}
		if c := strings.Compare(x.Partner, y.Partner); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	// A direct line item competes by its CPM whatever the floor: floors
	// are the buyers'; the publisher's own sale fills the slot when no
	// bid beats it.
	directCPM := tsubame.Money(-1)
	if line != nil {
		directCPM = line.CPM
	}
	for len(valid) > 0 || directCPM >= 0 {
		// The direct line item wins a tie: it is the publisher's own sale.
		if directCPM >= 0 && (len(valid) == 0 || directCPM >= valid[0].Value) {
			if take() {
				res.DirectWon, res.Price = true, directCPM
				for _, b := range valid {
					b.Loss, b.Reason = LossOutbid, "outbid"
				}
				break
			}
			directCPM = -1 // spent meanwhile: the next best wins
			continue
		}
		w := valid[0]
		valid = valid[1:]
		floor := pl.floor
		if w.DealID != "" {
			floor = max(floor, pl.deals[w.DealID])
		}
		second := floor
		if len(valid) > 0 {
			second = max(second, valid[0].Value)
		}
		if directCPM >= 0 {
			second = max(second, directCPM)
		}
		price := w.Value
		gc := tsubame.Money(w.Price) // first price: what it bid, exactly
		if st.cfg.Auction == SecondPrice {
			price = min(w.Value, second+st.step)
			g := gross(price, w.adjust)
			gc, _ = rates.ToCurrency(g, w.Cur)
			gc = min(gc, tsubame.Money(w.Price))
		}
		markup := w.AdM
		if markup == "" {
			if opp.Test {
				w.Loss, w.Reason = LossNoMarkup, "test_without_markup" // a test auction calls no notice
				continue
			}
			m, ok := a.fetchMarkup(fetchBy, w, opp, gc)
			if !ok {
				w.Loss, w.Reason = LossNoMarkup, "nurl_markup"
				continue
			}
			if !a.checkMarkup(pl, opp, w, m) {
				continue
			}
			markup = m
			w.NURL = "" // called: its markup came from it
		}
		bill := substitute(w.BURL, opp, w, gc, LossWon)
		if len(bill) > MaxBillURL || !noticeURL(bill) {
			w.Loss, w.Reason = LossInvalidResponse, "burl"
			continue
		}
		w.Loss = LossWon
		res.Sold, res.Price, res.Gross, res.BillURL = w, price, gc, bill
		res.Markup = substitute(markup, opp, w, gc, LossWon)
		for _, b := range valid {
			b.Loss, b.Reason = LossOutbid, "outbid"
		}
		break
	}
	if opp.Test {
		return // a test auction calls no notice
	}
	// The winner's nurl; each partner's lurl once, its best bid's (a
	// response of 64 bids sends one loss notice, not 64).
	lost := map[string]bool{}
	for _, b := range res.Bids {
		switch {
		case b == res.Sold:
			if b.NURL != "" {
				res.wins = append(res.wins, substitute(b.NURL, opp, b, res.Gross, LossWon))
			}
		case b.LURL != "" && b.Loss >= 0 && !lost[b.Partner] && (res.Sold == nil || b.Partner != res.Sold.Partner):
			lost[b.Partner] = true
			res.losses = append(res.losses, substitute(b.LURL, opp, b, 0, b.Loss))
		}
	}
}

// fetchMarkup gets a winning bid's markup from its nurl, within ctx.
func (a *Auctioneer) fetchMarkup(ctx context.Context, b *Bid, opp *Opportunity, price tsubame.Money) (string, bool) {
	if ctx.Err() != nil {
		return "", false
	}
	body, err := a.notices.fetch(ctx, substitute(b.NURL, opp, b, price, LossWon))
	if err != nil || len(strings.TrimSpace(string(body))) == 0 {
		return "", false
	}
	return string(body), true
}

// substitute replaces the OpenRTB auction macros in s: price is the
// clearing price in the bid's currency (0: not known, for a loss), loss
// the loss reason.
func substitute(s string, opp *Opportunity, b *Bid, price tsubame.Money, loss int) string {
	const prefix = "${AUCTION_"
	i := strings.Index(s, prefix)
	if i < 0 {
		return s
	}
	// By hand: a strings.Replacer built per call was 3 % of an auction's
	// CPU (perf, make bench-ssp).
	out := make([]byte, 0, len(s)+64)
	for i >= 0 {
		out = append(out, s[:i]...)
		s = s[i:]
		end := strings.IndexByte(s, '}')
		if end < 0 {
			break
		}
		name := s[len(prefix):end]
		switch name {
		case "ID":
			out = append(out, url.QueryEscape(opp.ID)...)
		case "BID_ID":
			out = append(out, url.QueryEscape(b.ID)...)
		case "IMP_ID":
			out = append(out, url.QueryEscape(b.ImpID)...)
		case "SEAT_ID":
			out = append(out, url.QueryEscape(b.Seat)...)
		case "AD_ID":
			out = append(out, url.QueryEscape(b.AdID)...)
		case "PRICE":
			if price > 0 {
				out = openrtb.Price(price).AppendDecimal(out)
			}
		case "CURRENCY":
			out = append(out, url.QueryEscape(b.Cur)...)
		case "LOSS":
			out = strconv.AppendInt(out, int64(loss), 10)
		case "MBR", "MIN_TO_WIN":
		case "IMP_TS":
			out = strconv.AppendInt(out, opp.Start.UnixMilli(), 10)
		default:
			out = append(out, s[:end+1]...) // not a macro of ours: left as it is
		}
		s = s[end+1:]
		i = strings.Index(s, prefix)
	}
	return string(append(out, s...))
}

// impID is the one impression an auction's request offers.
const impID = "1"
