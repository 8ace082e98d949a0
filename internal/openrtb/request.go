package openrtb

import "encoding/json"

// The bid request objects of OpenRTB 2.6 (section 3.2), with the fields
// this bidder reads to decide by placement, site or app, device,
// geography, visitor, deals and blocks, and to log an auction's seller
// and supply chain. Every other field is skipped when a request is
// decoded, not copied: defining the whole of 2.6 made example 6.2.3 cost
// 52 allocations and 2,800 bytes, this 30 and 1,432 (BenchmarkDecode).
// Names are the specification's. Regs, User and Source keep their ext as
// raw JSON, where OpenRTB 2.5 carried gdpr, us_privacy, consent and
// schain. Integers are Int and amounts Price: exchanges send both as
// numbers or as strings. Privacy signals are Flag, Text and Sections
// (privacy.go): whatever their form, they decode, and what cannot be read
// says so. The string fields added for the sell side (site.ref,
// device.os, a supply chain node's rid, ...), which the bidder had always
// skipped, are String: a value of another type reads as empty, so that a
// request the bidder accepted before they were defined is accepted still.
// AppendRequest (encode_request.go) writes every object back as
// encoding/json would.

// BidRequest is the top-level object (3.2.1).
type BidRequest struct {
	ID     string   `json:"id"`
	Imp    []Imp    `json:"imp"`
	Site   *Site    `json:"site,omitempty"`
	App    *App     `json:"app,omitempty"`
	Device *Device  `json:"device,omitempty"`
	User   *User    `json:"user,omitempty"`
	Test   Int      `json:"test,omitempty"`
	AT     Int      `json:"at,omitempty"`
	TMax   Int      `json:"tmax,omitempty"`
	WSeat  []string `json:"wseat,omitempty"`
	BSeat  []string `json:"bseat,omitempty"`
	Cur    []string `json:"cur,omitempty"`
	BCat   []string `json:"bcat,omitempty"`
	BAdv   []string `json:"badv,omitempty"`
	BApp   []string `json:"bapp,omitempty"`
	Source *Source  `json:"source,omitempty"`
	Regs   *Regs    `json:"regs,omitempty"`
}

// Source is the inventory's source upstream of the exchange (3.2.2). TID
// is the transaction: one impression offered through several resellers
// (or exchanges) arrives as several requests with one tid. It is read as a
// Text (a tid that is not a string is Unreadable, and the request stands).
//
// FD is who makes the final sale decision: 0 the exchange, 1 the upstream
// source. It is a pointer because 0 is a value to send, not "unknown".
type Source struct {
	FD     *Int            `json:"fd,omitempty"`
	TID    Text            `json:"tid,omitzero"`
	SChain *SupplyChain    `json:"schain,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Regs are the regulations in force (3.2.3). GDPR absent means unknown.
// Decode merges into each field its 2.5 extension's (regs.ext.gdpr,
// regs.ext.us_privacy, and regs.ext.gpp and gpp_sid as Prebid sent them
// before 2.6), keeping the stricter. Encoded, a privacy signal is written
// as privacy.go says: an unreadable one as the strictest value that can be
// written, or left out where there is none.
type Regs struct {
	COPPA     Flag            `json:"coppa,omitzero"`
	GDPR      Flag            `json:"gdpr,omitzero"`
	USPrivacy Text            `json:"us_privacy,omitzero"`
	GPP       Text            `json:"gpp,omitzero"`
	GPPSID    Sections        `json:"gpp_sid,omitzero"`
	Ext       json.RawMessage `json:"ext,omitempty"`
}

// Imp is one impression offered (3.2.4). Secure is a Flag read as the
// privacy flags are: FlagOn, or a value that cannot be read, requires
// https creatives (Raised); absent (unknown) or 0 does not, as the
// specification says ("non-secure HTTP support can be assumed"). Instl is
// 1 for an interstitial or full-screen impression; Exp the seconds that
// may pass between the auction and the impression.
type Imp struct {
	ID          string  `json:"id"`
	Banner      *Banner `json:"banner,omitempty"`
	Video       *Video  `json:"video,omitempty"`
	Pmp         *Pmp    `json:"pmp,omitempty"`
	Instl       Int     `json:"instl,omitempty"`
	TagID       string  `json:"tagid,omitempty"`
	BidFloor    Price   `json:"bidfloor,omitempty"`
	BidFloorCur string  `json:"bidfloorcur,omitempty"`
	Secure      Flag    `json:"secure,omitzero"`
	Exp         Int     `json:"exp,omitempty"`
}

// Banner is a banner impression (3.2.6).
type Banner struct {
	Format []Format `json:"format,omitempty"`
	W      Int      `json:"w,omitempty"`
	H      Int      `json:"h,omitempty"`
}

// Format is a banner size (3.2.10).
type Format struct {
	W Int `json:"w,omitempty"`
	H Int `json:"h,omitempty"`
}

// Video is a video impression (3.2.7). Plcmt is the placement type
// (AdCOM's Plcmt Subtypes - Video), Linearity the linearity the VAST
// returned must have (AdCOM's Linearity Modes; absent allows any).
type Video struct {
	MIMEs       []string `json:"mimes,omitempty"`
	MinDuration Int      `json:"minduration,omitempty"`
	MaxDuration Int      `json:"maxduration,omitempty"`
	Protocols   []Int    `json:"protocols,omitempty"`
	W           Int      `json:"w,omitempty"`
	H           Int      `json:"h,omitempty"`
	Plcmt       Int      `json:"plcmt,omitempty"`
	Linearity   Int      `json:"linearity,omitempty"`
}

// Pmp is the private marketplace of an impression (3.2.11).
type Pmp struct {
	PrivateAuction Int    `json:"private_auction,omitempty"`
	Deals          []Deal `json:"deals,omitempty"`
}

// Deal is one deal on offer (3.2.12). BidFloorCur does not inherit the
// impression's: empty is USD.
type Deal struct {
	ID          string   `json:"id"`
	BidFloor    Price    `json:"bidfloor,omitempty"`
	BidFloorCur string   `json:"bidfloorcur,omitempty"`
	WSeat       []string `json:"wseat,omitempty"`
}

// Site is the publisher's website (3.2.13). Ref is the referrer of the
// page.
type Site struct {
	ID        String     `json:"id,omitempty"`
	Name      String     `json:"name,omitempty"`
	Domain    string     `json:"domain,omitempty"`
	Page      string     `json:"page,omitempty"`
	Ref       String     `json:"ref,omitempty"`
	Publisher *Publisher `json:"publisher,omitempty"`
}

// App is the publisher's app (3.2.14). StoreURL is its page in an app
// store.
type App struct {
	ID        String     `json:"id,omitempty"`
	Name      String     `json:"name,omitempty"`
	Bundle    string     `json:"bundle,omitempty"`
	Domain    String     `json:"domain,omitempty"`
	StoreURL  String     `json:"storeurl,omitempty"`
	Publisher *Publisher `json:"publisher,omitempty"`
}

// Publisher is the seller of a site or app (3.2.15).
type Publisher struct {
	ID     string `json:"id,omitempty"`
	Name   String `json:"name,omitempty"`
	Domain String `json:"domain,omitempty"`
}

// Device is the user's device (3.2.18). OS is its operating system
// ("iOS"), Language the browser's, ISO-639-1-alpha-2.
type Device struct {
	UA         string `json:"ua,omitempty"`
	Geo        *Geo   `json:"geo,omitempty"`
	DNT        Flag   `json:"dnt,omitzero"`
	LMT        Flag   `json:"lmt,omitzero"`
	IP         string `json:"ip,omitempty"`
	IPv6       string `json:"ipv6,omitempty"`
	DeviceType Int    `json:"devicetype,omitempty"`
	OS         String `json:"os,omitempty"`
	Language   String `json:"language,omitempty"`
	IFA        string `json:"ifa,omitempty"`
}

// Geo is a location (3.2.19). Country is ISO-3166-1 alpha-3.
type Geo struct {
	Country string `json:"country,omitempty"`
	Region  string `json:"region,omitempty"`
}

// User is the human using the device (3.2.20). Decode merges
// user.ext.consent (2.5) into Consent. ID is the exchange's id of the
// user, BuyerUID the buyer's.
type User struct {
	ID       String          `json:"id,omitempty"`
	BuyerUID string          `json:"buyeruid,omitempty"`
	Consent  Text            `json:"consent,omitzero"`
	Ext      json.RawMessage `json:"ext,omitempty"`
}

// SupplyChain is the chain of sellers of the inventory (3.2.25). Complete
// is 1 when the first node is the inventory's owner; Ver is the version of
// the SupplyChain specification, SupplyChainVersion. Nodes are in the
// order of the sale: the last is the seller sending the request, and a
// seller passing the inventory on appends its own node (supplychainobject.md).
// schain.go reads and writes the form it takes outside OpenRTB.
type SupplyChain struct {
	Complete Int               `json:"complete"`
	Nodes    []SupplyChainNode `json:"nodes"`
	Ver      String            `json:"ver"`
}

// SupplyChainNode is one seller of a SupplyChain (3.2.26): ASI the domain
// of the advertising system, SID the seller's account in it, RID the
// request's id as this seller issued it, Name and Domain the seller's
// (sent only when sellers.json does not have them), HP 1 when the node is
// in the flow of payment (always, in version 1.0).
type SupplyChainNode struct {
	ASI    string `json:"asi"`
	SID    string `json:"sid"`
	RID    String `json:"rid,omitempty"`
	Name   String `json:"name,omitempty"`
	Domain String `json:"domain,omitempty"`
	HP     *Int   `json:"hp,omitempty"`
}
