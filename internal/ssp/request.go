package ssp

import (
	"bytes"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"

	"tsubame"
	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
)

// deviceTypes maps targeting's device types to OpenRTB's (AdCOM Device
// Types): 2 personal computer, 4 phone, 5 tablet, 3 connected TV.
var deviceTypes = map[string]openrtb.Int{"desktop": 2, "mobile": 4, "tablet": 5, "tv": 3}

// hpOne is a supply chain node's hp: this server is in the flow of
// payment.
var hpOne = openrtb.Int(1)

// bidRequest builds the OpenRTB 2.6 bid request opp makes for partner p:
// the one impression of the placement (its formats and sizes narrowed by
// the request, the floor in the partner's currency grossed up by its bid
// adjustment, the deals on offer), site or app, device, user only when
// the privacy signals allow it for this partner (p.private), regs, source with tid and the supply chain
// this server's node is appended to, tmax (the time left until the
// partner is cut off) and the blocks.
func (a *Auctioneer) bidRequest(st *state, pl *placement, opp *Opportunity, p *partner, rates *tsubame.Rates, tmax time.Duration) *openrtb.BidRequest {
	private := p.private(opp)
	r := &openrtb.BidRequest{ID: opp.ID, AT: 1, TMax: openrtb.Int(max(tmax.Milliseconds(), 1)), Cur: []string{p.currency},
		BCat: pl.cfg.BCat, BAdv: pl.cfg.BAdv}
	if st.cfg.Auction == SecondPrice {
		r.AT = 2
	}
	if opp.Test {
		r.Test = 1
	}
	imp := openrtb.Imp{ID: impID, TagID: pl.id, BidFloorCur: p.currency}
	if opp.Secure {
		imp.Secure = openrtb.FlagOn
	}
	imp.BidFloor = openrtb.Price(a.partnerFloor(pl.floor, p, rates))
	wantBanner := pl.banner && opp.Format != tsubame.FormatVideo
	wantVideo := pl.video && opp.Format != tsubame.FormatBanner
	if wantBanner {
		b := &openrtb.Banner{}
		for _, f := range pl.sizes {
			if opp.W > 0 && opp.H > 0 && (int(f.W) != opp.W || int(f.H) != opp.H) {
				continue
			}
			b.Format = append(b.Format, f)
		}
		if len(b.Format) > 0 {
			b.W, b.H = b.Format[0].W, b.Format[0].H
			imp.Banner = b
		}
	}
	if wantVideo {
		v := pl.cfg.Video
		vid := &openrtb.Video{MIMEs: v.MIMEs, MinDuration: openrtb.Int(v.MinDuration), MaxDuration: openrtb.Int(v.MaxDuration),
			W: openrtb.Int(v.W), H: openrtb.Int(v.H), Plcmt: openrtb.Int(v.Plcmt)}
		for _, pr := range v.Protocols {
			vid.Protocols = append(vid.Protocols, openrtb.Int(pr))
		}
		imp.Video = vid
	}
	if len(pl.dealIDs) > 0 {
		pmp := &openrtb.Pmp{}
		for _, id := range pl.dealIDs {
			if !p.offered(id) {
				continue
			}
			pmp.Deals = append(pmp.Deals, openrtb.Deal{ID: id, BidFloor: openrtb.Price(a.partnerFloor(max(pl.deals[id], pl.floor), p, rates)),
				BidFloorCur: p.currency})
		}
		if len(pmp.Deals) > 0 {
			imp.Pmp = pmp
		}
	}
	r.Imp = []openrtb.Imp{imp}

	pub := &openrtb.Publisher{ID: pl.publisher.SellerID, Name: openrtb.String(pl.publisher.Name),
		Domain: openrtb.String(pl.publisher.Domain)}
	if opp.App != "" {
		r.App = &openrtb.App{Bundle: opp.App, Publisher: pub}
	} else {
		r.Site = &openrtb.Site{Domain: opp.Site, Page: opp.Page, Ref: openrtb.String(opp.Ref), Publisher: pub}
	}

	d := &openrtb.Device{UA: opp.UA, DeviceType: deviceTypes[opp.Device], OS: openrtb.String(opp.OS),
		DNT: openrtb.Flag(opp.Signals.DNT), Language: openrtb.String(opp.Language)}
	if opp.IP.IsValid() {
		ip := opp.IP.Unmap()
		if private {
			ip = truncate(ip)
		}
		if ip.Is4() {
			d.IP = ip.String()
		} else {
			d.IPv6 = ip.String()
		}
	}
	if opp.Country != "" {
		g := &openrtb.Geo{}
		g.Country, _ = openrtb.Alpha3(opp.Country)
		if _, sub, ok := strings.Cut(opp.Region, "-"); ok {
			g.Region = sub
		}
		if g.Country != "" {
			d.Geo = g
		}
	}
	r.Device = d

	sg := opp.Signals
	u := &openrtb.User{}
	if !private {
		u.ID = openrtb.String(opp.User)
		u.BuyerUID = opp.BuyerUIDs[p.name]
	}
	if sg.GDPR != privacy.Absent && sg.Consent.Value != "" {
		u.Consent = openrtb.Text{Value: sg.Consent.Value}
	}
	if u.ID != "" || u.BuyerUID != "" || u.Consent.Value != "" {
		r.User = u
	}
	regs := &openrtb.Regs{COPPA: openrtb.Flag(sg.COPPA), GDPR: openrtb.Flag(sg.GDPR),
		USPrivacy: openrtb.Text{Value: sg.USPrivacy.Value}, GPP: openrtb.Text{Value: sg.GPP.Value}}
	if len(opp.GPPSID) > 0 {
		ids := make([]openrtb.Int, 0, len(opp.GPPSID))
		for _, id := range opp.GPPSID {
			ids = append(ids, openrtb.Int(id))
		}
		regs.GPPSID = openrtb.NewSections(ids...)
	}
	if regs.COPPA != openrtb.FlagAbsent || regs.GDPR != openrtb.FlagAbsent || regs.USPrivacy.Value != "" || regs.GPP.Value != "" ||
		regs.GPPSID.Flag != openrtb.FlagAbsent {
		r.Regs = regs
	}

	chain := &openrtb.SupplyChain{Ver: "1.0", Complete: 1}
	if opp.SChain != nil {
		chain.Ver, chain.Complete = opp.SChain.Ver, opp.SChain.Complete
		chain.Nodes = append(chain.Nodes, opp.SChain.Nodes...)
	}
	chain.Nodes = append(chain.Nodes, openrtb.SupplyChainNode{ASI: st.cfg.Seller.Domain, SID: pl.publisher.SellerID,
		RID: openrtb.String(opp.ID), HP: &hpOne})
	r.Source = &openrtb.Source{TID: openrtb.Text{Value: opp.ID}, SChain: chain}
	return r
}

// partnerFloor is floor (account currency, the value a bid must reach
// after the partner's bid adjustment) as the partner bids it: grossed up
// by the adjustment and converted, rounding up both times (a bid at the
// floor sent is never below the floor kept).
func (a *Auctioneer) partnerFloor(floor tsubame.Money, p *partner, rates *tsubame.Rates) tsubame.Money {
	if floor <= 0 {
		return 0
	}
	g := floor
	if p.adjust != adjustmentScale {
		g = tsubame.Money(mulDivUp(int64(floor), adjustmentScale, p.adjust))
	}
	out, ok := rates.Convert(g, a.opt.Currency, p.currency)
	if !ok {
		return g
	}
	return out
}

// truncate keeps an address's network, not its host: IPv4's /24, IPv6's
// /48, as sent where a privacy signal rules the visitor out.
func truncate(ip netip.Addr) netip.Addr {
	bitsKept := 24
	if !ip.Is4() {
		bitsKept = 48
	}
	p, err := ip.Prefix(bitsKept)
	if err != nil {
		return netip.Addr{}
	}
	return p.Addr()
}

var gzips = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}

// request encodes opp's bid request for p, with the 2.5 extensions when
// p reads 2.5, gzipped when p takes it: its tmax is the time left until p
// is cut off.
func (a *Auctioneer) request(st *state, pl *placement, opp *Opportunity, p *partner, rates *tsubame.Rates, tmax time.Duration) ([]byte, error) {
	encode := openrtb.AppendRequest
	if p.cfg.OpenRTB == OpenRTB25 {
		encode = openrtb.AppendRequest25
	}
	body := encode(make([]byte, 0, 2048), a.bidRequest(st, pl, opp, p, rates, tmax))
	if !p.cfg.Gzip {
		return body, nil
	}
	var buf bytes.Buffer
	zw := gzips.Get().(*gzip.Writer)
	defer gzips.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
