package openrtb

import "encoding/json"

// The bid request objects of OpenRTB 2.6 (section 3.2), with the fields a
// bidder that decides by placement, site or app, device, geography,
// visitor, deals and blocks reads; a field not here is skipped when a
// request is decoded. Names are the specification's; each object keeps its
// ext as raw JSON. Integers are Int and amounts Price: exchanges send both
// as numbers or as strings.

// BidRequest is the top-level object (3.2.1).
type BidRequest struct {
	ID     string          `json:"id"`
	Imp    []Imp           `json:"imp"`
	Site   *Site           `json:"site,omitempty"`
	App    *App            `json:"app,omitempty"`
	Device *Device         `json:"device,omitempty"`
	User   *User           `json:"user,omitempty"`
	Test   Int             `json:"test,omitempty"`
	AT     Int             `json:"at,omitempty"`
	TMax   Int             `json:"tmax,omitempty"`
	WSeat  []string        `json:"wseat,omitempty"`
	BSeat  []string        `json:"bseat,omitempty"`
	Cur    []string        `json:"cur,omitempty"`
	BCat   []string        `json:"bcat,omitempty"`
	BAdv   []string        `json:"badv,omitempty"`
	BApp   []string        `json:"bapp,omitempty"`
	Source *Source         `json:"source,omitempty"`
	Regs   *Regs           `json:"regs,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Source is the inventory's source upstream of the exchange (3.2.2).
type Source struct {
	FD     Int             `json:"fd,omitempty"`
	TID    string          `json:"tid,omitempty"`
	SChain *SupplyChain    `json:"schain,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Regs are the regulations in force (3.2.3). GDPR is a pointer: omitted
// means unknown.
type Regs struct {
	COPPA     Int             `json:"coppa,omitempty"`
	GDPR      *Int            `json:"gdpr,omitempty"`
	USPrivacy string          `json:"us_privacy,omitempty"`
	GPP       string          `json:"gpp,omitempty"`
	GPPSID    []Int           `json:"gpp_sid,omitempty"`
	Ext       json.RawMessage `json:"ext,omitempty"`
}

// Imp is one impression offered (3.2.4).
type Imp struct {
	ID          string          `json:"id"`
	Banner      *Banner         `json:"banner,omitempty"`
	Video       *Video          `json:"video,omitempty"`
	Audio       json.RawMessage `json:"audio,omitempty"`
	Native      json.RawMessage `json:"native,omitempty"`
	Pmp         *Pmp            `json:"pmp,omitempty"`
	TagID       string          `json:"tagid,omitempty"`
	Instl       Int             `json:"instl,omitempty"`
	BidFloor    Price           `json:"bidfloor,omitempty"`
	BidFloorCur string          `json:"bidfloorcur,omitempty"`
	Secure      *Int            `json:"secure,omitempty"`
	Exp         Int             `json:"exp,omitempty"`
	Ext         json.RawMessage `json:"ext,omitempty"`
}

// Banner is a banner impression (3.2.6).
type Banner struct {
	Format []Format        `json:"format,omitempty"`
	W      Int             `json:"w,omitempty"`
	H      Int             `json:"h,omitempty"`
	BType  []Int           `json:"btype,omitempty"`
	BAttr  []Int           `json:"battr,omitempty"`
	Pos    Int             `json:"pos,omitempty"`
	MIMEs  []string        `json:"mimes,omitempty"`
	API    []Int           `json:"api,omitempty"`
	ID     string          `json:"id,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Format is a banner size (3.2.10).
type Format struct {
	W      Int             `json:"w,omitempty"`
	H      Int             `json:"h,omitempty"`
	WRatio Int             `json:"wratio,omitempty"`
	HRatio Int             `json:"hratio,omitempty"`
	WMin   Int             `json:"wmin,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Video is a video impression (3.2.7).
type Video struct {
	MIMEs       []string        `json:"mimes,omitempty"`
	MinDuration Int             `json:"minduration,omitempty"`
	MaxDuration Int             `json:"maxduration,omitempty"`
	RqdDurs     []Int           `json:"rqddurs,omitempty"`
	StartDelay  *Int            `json:"startdelay,omitempty"`
	Protocols   []Int           `json:"protocols,omitempty"`
	W           Int             `json:"w,omitempty"`
	H           Int             `json:"h,omitempty"`
	Plcmt       Int             `json:"plcmt,omitempty"`
	Linearity   Int             `json:"linearity,omitempty"`
	Skip        *Int            `json:"skip,omitempty"`
	BAttr       []Int           `json:"battr,omitempty"`
	Pos         Int             `json:"pos,omitempty"`
	API         []Int           `json:"api,omitempty"`
	Ext         json.RawMessage `json:"ext,omitempty"`
}

// Pmp is the private marketplace of an impression (3.2.11).
type Pmp struct {
	PrivateAuction Int             `json:"private_auction,omitempty"`
	Deals          []Deal          `json:"deals,omitempty"`
	Ext            json.RawMessage `json:"ext,omitempty"`
}

// Deal is one deal on offer (3.2.12). BidFloorCur does not inherit the
// impression's: empty is USD.
type Deal struct {
	ID          string          `json:"id"`
	BidFloor    Price           `json:"bidfloor,omitempty"`
	BidFloorCur string          `json:"bidfloorcur,omitempty"`
	AT          Int             `json:"at,omitempty"`
	WSeat       []string        `json:"wseat,omitempty"`
	WADomain    []string        `json:"wadomain,omitempty"`
	Ext         json.RawMessage `json:"ext,omitempty"`
}

// Site is the publisher's website (3.2.13).
type Site struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Domain    string          `json:"domain,omitempty"`
	Cat       []string        `json:"cat,omitempty"`
	Page      string          `json:"page,omitempty"`
	Ref       string          `json:"ref,omitempty"`
	Publisher *Publisher      `json:"publisher,omitempty"`
	Keywords  string          `json:"keywords,omitempty"`
	Ext       json.RawMessage `json:"ext,omitempty"`
}

// App is the publisher's app (3.2.14).
type App struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Bundle    string          `json:"bundle,omitempty"`
	Domain    string          `json:"domain,omitempty"`
	StoreURL  string          `json:"storeurl,omitempty"`
	Cat       []string        `json:"cat,omitempty"`
	Publisher *Publisher      `json:"publisher,omitempty"`
	Ext       json.RawMessage `json:"ext,omitempty"`
}

// Publisher is the seller of a site or app (3.2.15).
type Publisher struct {
	ID     string          `json:"id,omitempty"`
	Name   string          `json:"name,omitempty"`
	Domain string          `json:"domain,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}

// Device is the user's device (3.2.18).
type Device struct {
	UA         string          `json:"ua,omitempty"`
	Geo        *Geo            `json:"geo,omitempty"`
	DNT        Int             `json:"dnt,omitempty"`
	LMT        Int             `json:"lmt,omitempty"`
	IP         string          `json:"ip,omitempty"`
	IPv6       string          `json:"ipv6,omitempty"`
	DeviceType Int             `json:"devicetype,omitempty"`
	Make       string          `json:"make,omitempty"`
	Model      string          `json:"model,omitempty"`
	OS         string          `json:"os,omitempty"`
	OSV        string          `json:"osv,omitempty"`
	Language   string          `json:"language,omitempty"`
	IFA        string          `json:"ifa,omitempty"`
	Ext        json.RawMessage `json:"ext,omitempty"`
}

// Geo is a location (3.2.19). Country is ISO-3166-1 alpha-3.
type Geo struct {
	Type      Int             `json:"type,omitempty"`
	Country   string          `json:"country,omitempty"`
	Region    string          `json:"region,omitempty"`
	City      string          `json:"city,omitempty"`
	Zip       string          `json:"zip,omitempty"`
	UTCOffset Int             `json:"utcoffset,omitempty"`
	Ext       json.RawMessage `json:"ext,omitempty"`
}

// User is the human using the device (3.2.20).
type User struct {
	ID       string          `json:"id,omitempty"`
	BuyerUID string          `json:"buyeruid,omitempty"`
	Consent  string          `json:"consent,omitempty"`
	Geo      *Geo            `json:"geo,omitempty"`
	Ext      json.RawMessage `json:"ext,omitempty"`
}

// SupplyChain is the chain of sellers of the inventory (3.2.25).
type SupplyChain struct {
	Complete Int               `json:"complete"`
	Nodes    []SupplyChainNode `json:"nodes"`
	Ver      string            `json:"ver"`
	Ext      json.RawMessage   `json:"ext,omitempty"`
}

// SupplyChainNode is one seller of a SupplyChain (3.2.26).
type SupplyChainNode struct {
	ASI    string          `json:"asi"`
	SID    string          `json:"sid"`
	RID    string          `json:"rid,omitempty"`
	Name   string          `json:"name,omitempty"`
	Domain string          `json:"domain,omitempty"`
	HP     *Int            `json:"hp,omitempty"`
	Ext    json.RawMessage `json:"ext,omitempty"`
}
