package ssp

import (
	"encoding/json"
	"net/url"
	"sort"
	"strings"

	"tsubame/internal/privacy"
)

// sellers is the IAB sellers.json file (version 1.0) of a configuration.
type sellers struct {
	ContactEmail string   `json:"contact_email,omitempty"`
	Version      string   `json:"version"`
	Sellers      []seller `json:"sellers"`
}

type seller struct {
	SellerID   string `json:"seller_id"`
	Name       string `json:"name,omitempty"`
	Domain     string `json:"domain,omitempty"`
	SellerType string `json:"seller_type"`
}

// sellersJSON builds cfg's /sellers.json: one entry per publisher, in
// seller id order.
func sellersJSON(cfg *Config) []byte {
	f := sellers{ContactEmail: cfg.Seller.ContactEmail, Version: "1.0", Sellers: []seller{}}
	for _, p := range cfg.Publishers {
		f.Sellers = append(f.Sellers, seller{SellerID: p.SellerID, Name: p.Name, Domain: p.Domain, SellerType: sellerType(p)})
	}
	sort.Slice(f.Sellers, func(i, j int) bool { return f.Sellers[i].SellerID < f.Sellers[j].SellerID })
	b, _ := json.MarshalIndent(f, "", "  ") // strings only: it cannot fail
	return append(b, '\n')
}

func sellerType(p Publisher) string {
	if p.Type == "" {
		return "PUBLISHER"
	}
	return p.Type
}

// SellersJSON is the seller's /sellers.json (IAB Tech Lab sellers.json
// 1.0): its publishers, and nil when it has none.
func (a *Auctioneer) SellersJSON() []byte { return a.st.Load().sellers }

// AdsTxtLine is the line a publisher adds to its ads.txt (or app-ads.txt)
// for this seller.
type AdsTxtLine struct {
	Publisher string // the publisher's key
	Domain    string // the publisher's domain, whose ads.txt it goes in
	Line      string // "<seller domain>, <seller id>, DIRECT"
}

// AdsTxt returns each publisher's ads.txt line, by publisher key: DIRECT
// for a publisher selling its own inventory, RESELLER for an
// intermediary's.
func AdsTxt(cfg *Config) []AdsTxtLine {
	var out []AdsTxtLine
	for _, key := range sortedKeys(cfg.Publishers) {
		p := cfg.Publishers[key]
		rel := "DIRECT"
		if p.Type == "INTERMEDIARY" {
			rel = "RESELLER"
		}
		out = append(out, AdsTxtLine{Publisher: key, Domain: p.Domain, Line: cfg.Seller.Domain + ", " + p.SellerID + ", " + rel})
	}
	return out
}

// Sync is a partner's user sync.
type Sync struct {
	Partner string
	URL     string
}

// Syncs returns the user syncs of the partners that have one, are on and
// are not refused consent by sg (where the GDPR applies: see
// Partner.GVLID), in name order, {redirect} in each replaced by setuid
// (this server's /setuid URL up to the partner's uid, escaped as a query
// value) for the partner.
func (a *Auctioneer) Syncs(sg *privacy.Signals, setuid func(partner string) string) []Sync {
	st := a.st.Load()
	var out []Sync
	for _, name := range sortedKeys(st.partners) {
		p := st.partners[name]
		if p.cfg.Sync == "" || !p.cfg.On() || p.refused(sg) {
			continue
		}
		u := p.cfg.Sync
		if strings.Contains(u, "{redirect}") {
			u = strings.ReplaceAll(u, "{redirect}", url.QueryEscape(setuid(name)))
		}
		out = append(out, Sync{Partner: name, URL: u})
	}
	return out
}

// HasSync reports whether partner is on and has a user sync: whether
// /setuid stores an id for it.
func (a *Auctioneer) HasSync(partner string) bool {
	p := a.st.Load().partners[partner]
	return p != nil && p.cfg.Sync != "" && p.cfg.On()
}

// Refused reports whether sg, where the GDPR applies, withhold consent
// from partner (see Partner.GVLID): /setuid keeps no id for it then.
func (a *Auctioneer) Refused(partner string, sg *privacy.Signals) bool {
	p := a.st.Load().partners[partner]
	return p == nil || p.refused(sg)
}
