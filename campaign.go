package tsubame

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The campaign model: advertisers own campaigns and creatives; a campaign's
// line items say which of the advertiser's creatives serve where, at what
// price and how often. The JSON shape of these types is the import file's
// (tsubame campaigns import), so field names are the file's.

// Defaults of the model.
const (
	DefaultCurrency = "USD"        // the account currency when a set names none
	DefaultTimezone = "Asia/Tokyo" // a campaign's time zone when it names none
)

// Limits on campaign data: they bound what one import can make every node
// hold in memory.
const (
	// MaxObjectIDLength bounds the id of an advertiser, campaign, creative
	// or line item: every tracking URL carries three of them, signed.
	MaxObjectIDLength = 64
	// MaxClickLength bounds a creative's click URL: its click tracking URL
	// carries it, signed.
	MaxClickLength       = 1024
	MinPriority          = 1      // the first priority served
	MaxPriority          = 16     // the last priority served
	MaxListValues        = 10_000 // values in one targeting list, creatives or deals of a line item
	MaxValueLength       = 256    // bytes in one targeting value, app id, MIME type or name
	MaxKeyValueKeys      = 64     // keys in one keyvalues map
	MaxFrequencyCaps     = 8      // frequency caps per line item
	MaxFrequencyWindow   = 366 * 24 * time.Hour
	MaxHTMLLength        = 64 << 10 // bytes of a banner's HTML
	MaxCreativeDimension = 10_000   // pixels of a creative's width or height
	MaxVideoDuration     = 3600     // seconds of a video creative
	MaxReasonLength      = 1024     // bytes of why a creative was rejected
)

// MaxCPM is the largest price of a thousand impressions: 1,000,000 units of
// the account's currency, 1,000 an impression, above any real price in any
// currency (a premium CPM in rupiah or dong is a few hundred thousand).
// Reports add spend up in thousandths of a micro-unit (an impression's
// CPM in micro-units) in 64-bit integers, which hold 9,223,372,036 units:
// 9.2 million impressions at MaxCPM, and more than a budget may be
// (MaxQuotaUnits micro-units, 9,007,199,254). A CPM up to the int64
// maximum made two impressions overflow a report into a negative spend.
const MaxCPM Money = 1_000_000 * MicrosPerUnit

// Advertiser is whoever pays: campaigns and creatives belong to one.
type Advertiser struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Domains are the advertiser's landing-page domains (OpenRTB's adomain),
	// lower-case, for publishers' block lists.
	Domains []string `json:"domains,omitempty"`
	// Status is active (the default) or archived: none of an archived
	// advertiser's campaigns serves, whatever their own status, until it
	// is active again.
	Status string `json:"status,omitempty"`
}

// Campaign is an advertiser's flight: a time window, a budget and how to
// spend it.
type Campaign struct {
	ID string `json:"id"`
	// Name is a display name, for people (optional).
	Name       string `json:"name,omitempty"`
	Advertiser string `json:"advertiser"`
	// Start and End bound delivery (End excluded); a zero time is no bound.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Timezone is an IANA name ("Asia/Tokyo", the default when empty): the
	// day of daily budgets and limits, and of hour and weekday targeting.
	Timezone string `json:"timezone,omitempty"`
	Budget   Budget `json:"budget,omitzero"`
	Pacing   Pacing `json:"pacing,omitzero"`
	// Status is active (the default), paused or archived: a paused or
	// archived campaign's line items serve nothing, whatever their own
	// status, until it is active again. An archived campaign is one done
	// with, which lists leave out unless asked.
	Status string `json:"status,omitempty"`
}

// Budget caps a campaign's spend; left out (zero), no cap.
type Budget struct {
	Total Money `json:"total,omitzero"`
	Daily Money `json:"daily,omitzero"`
	// written0 marks an amount written as 0 (budgetTotal0, budgetDaily0),
	// which Validate refuses: it would read as no cap at all.
	written0 uint8
}

const (
	budgetTotal0 = 1 << iota
	budgetDaily0
)

// UnmarshalJSON reads a budget field by field, in order, noting an amount
// written as 0; a field it does not take is refused, as the campaign
// set's are. Its errors are FieldErrors.
func (b *Budget) UnmarshalJSON(data []byte) error {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*b = Budget{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		raw := in[k]
		var m *Money
		var flag uint8
		switch k {
		case "total":
			m, flag = &b.Total, budgetTotal0
		case "daily":
			m, flag = &b.Daily, budgetDaily0
		default:
			return &FieldError{Field: clip(k, 64), Raw: raw, Err: errUnknownField}
		}
		if err := json.Unmarshal(raw, m); err != nil {
			return &FieldError{Field: k, Raw: raw, Err: err}
		}
		if *m == 0 && string(raw) != "null" {
			b.written0 |= flag
		}
	}
	return nil
}

// FieldError is what one field of an object that decodes itself (Budget)
// did wrong, for decoders that name problems by path.
type FieldError struct {
	Field string
	Raw   []byte // the field's JSON
	Err   error
}

func (e *FieldError) Error() string {
	return "json: field " + e.Field + ": " + strings.TrimPrefix(e.Err.Error(), "json: ")
}

func (e *FieldError) Unwrap() error { return e.Err }

var errUnknownField = errors.New("unknown field")

// Pacing modes: how a campaign spreads its daily budget over the day.
const (
	PacingASAP        = "asap"        // spend as fast as requests come
	PacingEven        = "even"        // spread evenly over the day (the default)
	PacingFrontloaded = "frontloaded" // spend more early in the day
)

// Pacing is a mode and, optionally, 24 weights shaping the day (hour 0
// first, in the campaign's time zone). It is written as a bare mode
// ("even") or as {"mode": "even", "hour_weights": [...]}.
type Pacing struct {
	Mode        string `json:"mode,omitempty"`
	HourWeights []int  `json:"hour_weights,omitempty"`
}

// MarshalJSON writes a bare mode when there are no hour weights.
func (p Pacing) MarshalJSON() ([]byte, error) {
	if len(p.HourWeights) == 0 {
		return json.Marshal(p.Mode)
	}
	type plain Pacing
	return json.Marshal(plain(p))
}

// UnmarshalJSON reads a bare mode or an object.
func (p *Pacing) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		*p = Pacing{}
		return json.Unmarshal(b, &p.Mode)
	}
	type plain Pacing
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Pacing(v)
	return nil
}

// Creative formats.
const (
	FormatBanner = "banner" // an image or HTML of w×h pixels
	FormatVideo  = "video"  // a media file answered as VAST
)

// Creative statuses: only approved creatives serve.
const (
	StatusApproved = "approved"
	StatusPending  = "pending" // the default: a new creative waits for review
	StatusRejected = "rejected"
)

// Creative is what is shown: a banner (an image URL or HTML) or a video.
type Creative struct {
	ID string `json:"id"`
	// Name is a display name, for people (optional).
	Name       string `json:"name,omitempty"`
	Advertiser string `json:"advertiser"`
	Format     string `json:"format"`
	W          int    `json:"w"`
	H          int    `json:"h"`
	// Image or HTML: a banner has exactly one.
	Image string `json:"image,omitempty"`
	HTML  string `json:"html,omitempty"`
	// Duration (seconds), MIMEs and Media describe a video.
	Duration int      `json:"duration,omitempty"`
	MIMEs    []string `json:"mimes,omitempty"`
	Media    string   `json:"media,omitempty"`
	// Click is where a click on the creative leads.
	Click string `json:"click"`
	// Categories are IAB content categories ("IAB1", "IAB19-29").
	Categories []string `json:"categories,omitempty"`
	// App is the store id (bundle) of the app the creative promotes, for
	// an app-install ad, as OpenRTB writes it (an Android package name, or
	// an iOS App Store id's digits): an auction's bapp blocks it, and its
	// bids name it.
	App string `json:"app,omitempty"`
	// Status is approved, pending (the default) or rejected.
	Status string `json:"status,omitempty"`
	// Reason is why the creative was rejected, for the advertiser to fix
	// it: written by a rejection, cleared by an approval.
	Reason string `json:"reason,omitempty"`
	// Archived takes the creative out of service whatever its review,
	// which it keeps: an archived approved creative serves again once
	// restored. The review's status stays apart from it so that archiving
	// loses nothing.
	Archived bool `json:"archived,omitempty"`
}

// Line item, campaign and advertiser statuses: a paused line item (or
// every line item of a paused campaign) keeps its place and settings in
// the set but serves nothing until it is active again. An archived line
// item, campaign or advertiser is one done with: it (every line item of
// it) serves nothing either, and lists leave it out unless asked. An
// advertiser is active or archived, never paused.
const (
	StatusActive   = "active" // the default
	StatusPaused   = "paused" // line items and campaigns
	StatusArchived = "archived"
)

// LineItem says which of a campaign's creatives serve where, when, at what
// price and how often.
type LineItem struct {
	ID string `json:"id"`
	// Name is a display name, for people (optional).
	Name     string `json:"name,omitempty"`
	Campaign string `json:"campaign"`
	// Status is active (the default), paused or archived.
	Status string `json:"status,omitempty"`
	// Priority 1 (first) to 16: a lower priority serves only when no line
	// item of a higher one qualifies.
	Priority int `json:"priority"`
	// Weight shares a priority among the line items that qualify.
	Weight int `json:"weight"`
	// CPM is the price of 1,000 impressions.
	CPM Money `json:"cpm"`
	// Creatives are ids of creatives of the campaign's advertiser.
	Creatives []string `json:"creatives"`
	// Start and End narrow the campaign's window; zero is no bound.
	Start     time.Time      `json:"start,omitzero"`
	End       time.Time      `json:"end,omitzero"`
	Limits    Limits         `json:"limits,omitzero"`
	Frequency []FrequencyCap `json:"frequency,omitempty"`
	// Deals, when given, restrict the line item to bids on these deal ids.
	Deals     []string  `json:"deals,omitempty"`
	Targeting Targeting `json:"targeting,omitzero"`
}

// Limits cap a line item's delivery; zero means no cap.
type Limits struct {
	Impressions ImpressionLimits `json:"impressions,omitzero"`
}

// ImpressionLimits count impressions in all and per day (in the campaign's
// time zone); zero means no cap.
type ImpressionLimits struct {
	Total int64 `json:"total,omitzero"`
	Daily int64 `json:"daily,omitzero"`
}

// FrequencyCap allows a visitor Impressions of the line item per window.
type FrequencyCap struct {
	Impressions int64    `json:"impressions"`
	Per         Duration `json:"per"`
}

// Weekdays, as written in targeting.
var Weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Devices, as written in targeting.
var Devices = []string{"desktop", "mobile", "tablet", "tv"}

// Criteria select requests. Each list is any-of (a request matches when
// one value does); an empty list matches every request.
type Criteria struct {
	Placements []string `json:"placements,omitempty"`
	// Sites are domains: a site matches itself and its subdomains.
	Sites []string `json:"sites,omitempty"`
	Apps  []string `json:"apps,omitempty"`
	// Countries are ISO 3166-1 alpha-2 codes ("JP"), regions ISO 3166-2
	// codes ("JP-13").
	Countries []string `json:"countries,omitempty"`
	Regions   []string `json:"regions,omitempty"`
	Devices   []string `json:"devices,omitempty"`
	OS        []string `json:"os,omitempty"`
	Browsers  []string `json:"browsers,omitempty"`
	// Hours and Weekdays are in the campaign's time zone.
	Hours    *HourRange `json:"hours,omitempty"`
	Weekdays []string   `json:"weekdays,omitempty"`
	// KeyValues match the request's kv.KEY=VALUE parameters: every key
	// listed must match one of its values.
	KeyValues map[string][]string `json:"keyvalues,omitempty"`
}

// HourRange is the hours From (0-23) up to To (1-24, excluded). A range
// with From > To wraps midnight: {22, 6} is 22:00 to 06:00.
type HourRange struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// Targeting is what a request must match (the criteria) and must not
// (Exclude: a request matching any value of any list there is left out).
type Targeting struct {
	Criteria
	Exclude *Criteria `json:"exclude,omitempty"`
}

// CampaignSet is every campaign object of one account: the import file,
// and what CampaignStore.Snapshot returns.
type CampaignSet struct {
	// Currency is the ISO 4217 code of every amount (DefaultCurrency when empty).
	Currency    string        `json:"currency,omitempty"`
	Advertisers []*Advertiser `json:"advertisers"`
	Campaigns   []*Campaign   `json:"campaigns"`
	Creatives   []*Creative   `json:"creatives"`
	LineItems   []*LineItem   `json:"line_items"`
}

// CampaignKind names one kind of campaign object.
type CampaignKind uint8

// The kinds of campaign object.
const (
	KindAdvertiser CampaignKind = iota + 1
	KindCampaign
	KindCreative
	KindLineItem
)

// CampaignKinds lists every kind, in the order references point (an
// advertiser before what belongs to it).
var CampaignKinds = []CampaignKind{KindAdvertiser, KindCampaign, KindCreative, KindLineItem}

var kindNames = [...][2]string{
	KindAdvertiser: {"advertiser", "advertisers"},
	KindCampaign:   {"campaign", "campaigns"},
	KindCreative:   {"creative", "creatives"},
	KindLineItem:   {"line_item", "line_items"},
}

// String returns the kind's singular name ("line_item").
func (k CampaignKind) String() string {
	if k.Valid() {
		return kindNames[k][0]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Plural returns the kind's name in the import file ("line_items").
func (k CampaignKind) Plural() string {
	if k.Valid() {
		return kindNames[k][1]
	}
	return k.String()
}

// Valid reports whether k is one of the kinds.
func (k CampaignKind) Valid() bool { return k >= KindAdvertiser && k <= KindLineItem }

// CampaignObject is an *Advertiser, *Campaign, *Creative or *LineItem.
// Kind may be called on a nil pointer.
type CampaignObject interface {
	Kind() CampaignKind
	ObjectID() string
	cloneObject() CampaignObject
	check(v *checker, at string)
}

// Kind returns KindAdvertiser.
func (*Advertiser) Kind() CampaignKind { return KindAdvertiser }

// Kind returns KindCampaign.
func (*Campaign) Kind() CampaignKind { return KindCampaign }

// Kind returns KindCreative.
func (*Creative) Kind() CampaignKind { return KindCreative }

// Kind returns KindLineItem.
func (*LineItem) Kind() CampaignKind { return KindLineItem }

// ObjectID returns a.ID.
func (a *Advertiser) ObjectID() string { return a.ID }

// ObjectID returns c.ID.
func (c *Campaign) ObjectID() string { return c.ID }

// ObjectID returns c.ID.
func (c *Creative) ObjectID() string { return c.ID }

// ObjectID returns l.ID.
func (l *LineItem) ObjectID() string { return l.ID }

// NewCampaignObject returns a new, empty object of kind k (to decode into),
// or nil for an unknown kind.
func NewCampaignObject(k CampaignKind) CampaignObject {
	switch k {
	case KindAdvertiser:
		return &Advertiser{}
	case KindCampaign:
		return &Campaign{}
	case KindCreative:
		return &Creative{}
	case KindLineItem:
		return &LineItem{}
	}
	return nil
}

// CloneCampaignObject returns a deep copy of o.
func CloneCampaignObject(o CampaignObject) CampaignObject { return o.cloneObject() }

func (a *Advertiser) cloneObject() CampaignObject { return a.Clone() }
func (c *Campaign) cloneObject() CampaignObject   { return c.Clone() }
func (c *Creative) cloneObject() CampaignObject   { return c.Clone() }
func (l *LineItem) cloneObject() CampaignObject   { return l.Clone() }

// Clone returns a deep copy of a.
func (a *Advertiser) Clone() *Advertiser {
	c := *a
	c.Domains = slices.Clone(a.Domains)
	return &c
}

// Clone returns a deep copy of c.
func (c *Campaign) Clone() *Campaign {
	d := *c
	d.Pacing.HourWeights = slices.Clone(c.Pacing.HourWeights)
	return &d
}

// Clone returns a deep copy of c.
func (c *Creative) Clone() *Creative {
	d := *c
	d.MIMEs = slices.Clone(c.MIMEs)
	d.Categories = slices.Clone(c.Categories)
	return &d
}

// Clone returns a deep copy of l.
func (l *LineItem) Clone() *LineItem {
	c := *l
	c.Creatives = slices.Clone(l.Creatives)
	c.Frequency = slices.Clone(l.Frequency)
	c.Deals = slices.Clone(l.Deals)
	c.Targeting.Criteria = l.Targeting.Criteria.clone()
	if l.Targeting.Exclude != nil {
		x := l.Targeting.Exclude.clone()
		c.Targeting.Exclude = &x
	}
	return &c
}

func (c Criteria) clone() Criteria {
	d := c
	for _, l := range []*[]string{&d.Placements, &d.Sites, &d.Apps, &d.Countries, &d.Regions, &d.Devices, &d.OS, &d.Browsers, &d.Weekdays} {
		*l = slices.Clone(*l)
	}
	if c.Hours != nil {
		h := *c.Hours
		d.Hours = &h
	}
	if c.KeyValues != nil {
		d.KeyValues = make(map[string][]string, len(c.KeyValues))
		for k, v := range c.KeyValues {
			d.KeyValues[k] = slices.Clone(v)
		}
	}
	return d
}

// Clone returns a deep copy of s.
func (s *CampaignSet) Clone() *CampaignSet {
	c := &CampaignSet{Currency: s.Currency}
	c.Advertisers = cloneAll(s.Advertisers, (*Advertiser).Clone)
	c.Campaigns = cloneAll(s.Campaigns, (*Campaign).Clone)
	c.Creatives = cloneAll(s.Creatives, (*Creative).Clone)
	c.LineItems = cloneAll(s.LineItems, (*LineItem).Clone)
	return c
}

func cloneAll[T any](in []*T, clone func(*T) *T) []*T {
	if in == nil {
		return nil
	}
	out := make([]*T, len(in))
	for i, v := range in {
		if v != nil {
			out[i] = clone(v)
		}
	}
	return out
}

// Location returns the campaign's time zone (DefaultTimezone when empty).
func (c *Campaign) Location() (*time.Location, error) {
	tz := c.Timezone
	if tz == "" {
		tz = DefaultTimezone
	}
	return loadLocation(tz)
}

// Objects returns the set's objects of kind k, in the set's order. They are
// the set's own, not copies.
func (s *CampaignSet) Objects(k CampaignKind) []CampaignObject {
	switch k {
	case KindAdvertiser:
		return objects(s.Advertisers)
	case KindCampaign:
		return objects(s.Campaigns)
	case KindCreative:
		return objects(s.Creatives)
	case KindLineItem:
		return objects(s.LineItems)
	}
	return nil
}

func objects[T any, P interface {
	*T
	CampaignObject
}](in []*T) []CampaignObject {
	out := make([]CampaignObject, 0, len(in))
	for _, v := range in {
		if v != nil {
			out = append(out, P(v))
		}
	}
	return out
}

// Object returns the set's own object of kind k with the given id, or nil.
// It reads the set's list of that kind through, allocating nothing: a
// caller looking up many ids in a large set uses ObjectIndex instead.
func (s *CampaignSet) Object(k CampaignKind, id string) CampaignObject {
	switch k {
	case KindAdvertiser:
		return find(s.Advertisers, id)
	case KindCampaign:
		return find(s.Campaigns, id)
	case KindCreative:
		return find(s.Creatives, id)
	case KindLineItem:
		return find(s.LineItems, id)
	}
	return nil
}

func find[T any, P interface {
	*T
	CampaignObject
}](in []*T, id string) CampaignObject {
	for _, v := range in {
		if v != nil && P(v).ObjectID() == id {
			return P(v)
		}
	}
	return nil
}

// ObjectKey names one object of a set: its kind and id.
type ObjectKey struct {
	Kind CampaignKind
	ID   string
}

// ObjectIndex returns the set's objects by kind and id, for many lookups
// (the last of two with one id, as Validate refuses such a set anyway).
func (s *CampaignSet) ObjectIndex() map[ObjectKey]CampaignObject {
	m := make(map[ObjectKey]CampaignObject, s.Len())
	for _, k := range CampaignKinds {
		for _, o := range s.Objects(k) {
			m[ObjectKey{k, o.ObjectID()}] = o
		}
	}
	return m
}

// Len returns the number of objects of every kind.
func (s *CampaignSet) Len() int {
	return len(s.Advertisers) + len(s.Campaigns) + len(s.Creatives) + len(s.LineItems)
}

// Sort orders each kind's objects by id (byte order), as stores list them.
func (s *CampaignSet) Sort() {
	byID := func(a, b CampaignObject) int { return strings.Compare(a.ObjectID(), b.ObjectID()) }
	slices.SortFunc(s.Advertisers, func(a, b *Advertiser) int { return byID(a, b) })
	slices.SortFunc(s.Campaigns, func(a, b *Campaign) int { return byID(a, b) })
	slices.SortFunc(s.Creatives, func(a, b *Creative) int { return byID(a, b) })
	slices.SortFunc(s.LineItems, func(a, b *LineItem) int { return byID(a, b) })
}

// Put adds a copy of o to the set, or replaces the object of its kind with
// its id, if the result is valid: o's own fields, and every reference in
// the set (a campaign moved to another advertiser must leave its line
// items' creatives with their advertiser). On error the set is unchanged;
// the error is EINVALID and lists every problem.
func (s *CampaignSet) Put(o CampaignObject) error {
	if o == nil || isNil(o) {
		return Errorf(EINVALID, "no campaign object given")
	}
	// Its fields and the set's references at once, each object named by
	// its kind and id (not by where it sits in the set).
	v := &checker{byName: true}
	o.check(v, objectName(o.Kind(), o.ObjectID()))
	next := *s // a shallow copy: only the changed kind's slice is rebuilt
	c := o.cloneObject()
	switch c := c.(type) {
	case *Advertiser:
		next.Advertisers = upsert(s.Advertisers, c)
	case *Campaign:
		next.Campaigns = upsert(s.Campaigns, c)
	case *Creative:
		next.Creatives = upsert(s.Creatives, c)
	case *LineItem:
		next.LineItems = upsert(s.LineItems, c)
	}
	next.checkRefs(v)
	if err := v.err(); err != nil {
		return err
	}
	*s = next
	return nil
}

func isNil(o CampaignObject) bool {
	switch o := o.(type) {
	case *Advertiser:
		return o == nil
	case *Campaign:
		return o == nil
	case *Creative:
		return o == nil
	case *LineItem:
		return o == nil
	}
	return true
}

func upsert[T any, P interface {
	*T
	CampaignObject
}](in []*T, v *T) []*T {
	out := slices.Clone(in)
	for i, o := range out {
		if o != nil && P(o).ObjectID() == P(v).ObjectID() {
			out[i] = v
			return out
		}
	}
	return append(out, v)
}

// Delete removes the object of kind k with the given id: ENOTFOUND when
// there is none, ECONFLICT (naming them) while other objects refer to it.
func (s *CampaignSet) Delete(k CampaignKind, id string) error {
	if s.Object(k, id) == nil {
		return Errorf(ENOTFOUND, "%s %q not found", k, id)
	}
	var users []string
	use := func(o CampaignObject) { users = append(users, fmt.Sprintf("%s %q", o.Kind(), o.ObjectID())) }
	switch k {
	case KindAdvertiser:
		for _, c := range s.Campaigns {
			if c != nil && c.Advertiser == id {
				use(c)
			}
		}
		for _, c := range s.Creatives {
			if c != nil && c.Advertiser == id {
				use(c)
			}
		}
	case KindCampaign:
		for _, l := range s.LineItems {
			if l != nil && l.Campaign == id {
				use(l)
			}
		}
	case KindCreative:
		for _, l := range s.LineItems {
			if l != nil && slices.Contains(l.Creatives, id) {
				use(l)
			}
		}
	}
	if len(users) > 0 {
		const show = 10
		more := ""
		if len(users) > show {
			more = fmt.Sprintf(" and %d more", len(users)-show)
			users = users[:show]
		}
		return Errorf(ECONFLICT, "%s %q is used by %s%s", k, id, strings.Join(users, ", "), more)
	}
	switch k {
	case KindAdvertiser:
		s.Advertisers = remove(s.Advertisers, id)
	case KindCampaign:
		s.Campaigns = remove(s.Campaigns, id)
	case KindCreative:
		s.Creatives = remove(s.Creatives, id)
	case KindLineItem:
		s.LineItems = remove(s.LineItems, id)
	}
	return nil
}

func remove[T any, P interface {
	*T
	CampaignObject
}](in []*T, id string) []*T {
	return slices.DeleteFunc(slices.Clone(in), func(o *T) bool { return o != nil && P(o).ObjectID() == id })
}

// Problem is one rule an input breaks: where, as a path into the import
// file (`line_items[3] (id "li-9").cpm`), and what.
type Problem struct {
	Path    string
	Message string
}

// Problems are every rule an input breaks, in the input's order.
type Problems []Problem

// Error lists the problems one per line, after their count when there are
// several.
func (ps Problems) Error() string {
	var b strings.Builder
	if len(ps) > 1 {
		fmt.Fprintf(&b, "%d problems:\n", len(ps))
	}
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Path)
		b.WriteString(": ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// ProblemsOf returns the problems listed in err (from Validate or Put), or nil.
func ProblemsOf(err error) Problems {
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	return nil
}

// checker collects problems.
type checker struct {
	ps Problems
	// byName names objects by kind and id (line_item "li-7"), rather than
	// by their place in the set (line_items[3] (id "li-7")), which a file's
	// lines are found by.
	byName bool
	// probe tells only whether there is a problem: its paths are dropped
	// (Validate checks an object with a problem again under its path), so
	// a path under another is not built (join).
	probe bool
}

// join is the path of field under at, or "" for a probe: a valid object's
// nested paths (a line item's targeting, each list in it) cost nothing.
func (v *checker) join(at, field string) string {
	if v.probe {
		return ""
	}
	return at + field
}

// item is the path of the object of kind k at index i with the given id.
func (v *checker) item(k CampaignKind, i int, id string) string {
	if v.byName {
		return objectName(k, id)
	}
	return itemPath(k, i, id)
}

// objectName is how a problem names an object by its kind and id.
func objectName(k CampaignKind, id string) string {
	return fmt.Sprintf("%s %q", k, clip(id, MaxIDLength))
}

// ObjectProblems are the rules o's own fields break (its references are a
// set's to check), each path under at ("" for paths from the object, such
// as targeting.countries[0]).
func ObjectProblems(o CampaignObject, at string) Problems {
	v := &checker{}
	o.check(v, at)
	for i, p := range v.ps {
		v.ps[i].Path = strings.TrimPrefix(p.Path, ".") // at "": ".cpm" is cpm
	}
	return v.ps
}

func (v *checker) add(path, format string, args ...any) {
	v.ps = append(v.ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns nil or an EINVALID *Error whose message (client-safe: it
// quotes the input only) lists every problem and whose cause is Problems.
func (v *checker) err() error {
	if len(v.ps) == 0 {
		return nil
	}
	ps := slices.Clone(v.ps)
	return &Error{Code: EINVALID, Message: ps.Error(), Err: ps}
}

// Validate reports every rule the set breaks, each naming the item and the
// field, as one EINVALID error whose cause is Problems: each object's own
// fields, unique ids per kind, and references (a campaign's and a
// creative's advertiser, a line item's campaign and creatives, which must
// belong to the campaign's advertiser).
func (s *CampaignSet) Validate() error {
	v := &checker{}
	if s.Currency != "" && !isUpperCode(s.Currency, 3) {
		v.add("currency", "%q is not an ISO 4217 code (three capital letters, such as USD or JPY)", clip(s.Currency, 40))
	}
	probe := &checker{probe: true} // one for the set: a call through the interface moves it to the heap
	for _, k := range CampaignKinds {
		var list []CampaignObject
		switch k {
		case KindAdvertiser:
			list = withNils(s.Advertisers)
		case KindCampaign:
			list = withNils(s.Campaigns)
		case KindCreative:
			list = withNils(s.Creatives)
		case KindLineItem:
			list = withNils(s.LineItems)
		}
		seen := make(map[string]int, len(list))
		for i, o := range list {
			if o == nil {
				v.add(fmt.Sprintf("%s[%d]", k.Plural(), i), "empty")
				continue
			}
			// Checked first by the probe, which builds no path: a valid
			// object (nearly all of a million) costs none; one with
			// problems is checked again under its.
			probe.ps = probe.ps[:0]
			if o.check(probe, ""); len(probe.ps) > 0 {
				o.check(v, itemPath(k, i, o.ObjectID()))
			}
			if j, dup := seen[o.ObjectID()]; dup && o.ObjectID() != "" {
				v.add(itemPath(k, i, o.ObjectID())+".id", "the same id as %s[%d]", k.Plural(), j)
			} else {
				seen[o.ObjectID()] = i
			}
		}
	}
	s.checkRefs(v)
	return v.err()
}

func withNils[T any, P interface {
	*T
	CampaignObject
}](in []*T) []CampaignObject {
	out := make([]CampaignObject, len(in))
	for i, v := range in {
		if v != nil {
			out[i] = P(v)
		}
	}
	return out
}

func itemPath(k CampaignKind, i int, id string) string {
	return fmt.Sprintf("%s[%d] (id %q)", k.Plural(), i, clip(id, MaxIDLength))
}

// ValidateRefs reports every reference of the set that points nowhere, or
// to another advertiser's creative, naming objects by kind and id (one
// EINVALID error): Validate's reference checks alone, for a set whose
// objects were each checked already (a checked set with checked writes
// applied: a rebased import).
func (s *CampaignSet) ValidateRefs() error {
	v := &checker{byName: true}
	s.checkRefs(v)
	return v.err()
}

// checkRefs reports every reference of the set that points nowhere.
func (s *CampaignSet) checkRefs(v *checker) {
	adv := map[string]bool{}
	for _, a := range s.Advertisers {
		if a != nil {
			adv[a.ID] = true
		}
	}
	camp := map[string]*Campaign{}
	for i, c := range s.Campaigns {
		if c == nil {
			continue
		}
		camp[c.ID] = c
		if c.Advertiser != "" && !adv[c.Advertiser] {
			v.add(v.item(KindCampaign, i, c.ID)+".advertiser", "advertiser %q does not exist", c.Advertiser)
		}
	}
	cre := map[string]*Creative{}
	for i, c := range s.Creatives {
		if c == nil {
			continue
		}
		cre[c.ID] = c
		if c.Advertiser != "" && !adv[c.Advertiser] {
			v.add(v.item(KindCreative, i, c.ID)+".advertiser", "advertiser %q does not exist", c.Advertiser)
		}
	}
	for i, l := range s.LineItems {
		if l == nil {
			continue
		}
		at := func() string { return v.item(KindLineItem, i, l.ID) } // on a problem only
		c := camp[l.Campaign]
		if c == nil && l.Campaign != "" {
			v.add(at()+".campaign", "campaign %q does not exist", l.Campaign)
		}
		for j, id := range l.Creatives {
			cr := cre[id]
			switch {
			case id == "":
			case cr == nil:
				v.add(fmt.Sprintf("%s.creatives[%d]", at(), j), "creative %q does not exist", id)
			case c != nil && cr.Advertiser != c.Advertiser:
				v.add(fmt.Sprintf("%s.creatives[%d]", at(), j), "creative %q belongs to advertiser %q, not to the campaign's advertiser %q", id, cr.Advertiser, c.Advertiser)
			}
		}
	}
}

// Validate reports every rule a breaks (its own fields; references are the
// set's to check), as one EINVALID error.
func (a *Advertiser) Validate() error { return validateOne(a) }

// Validate reports every rule c breaks, as one EINVALID error.
func (c *Campaign) Validate() error { return validateOne(c) }

// Validate reports every rule c breaks, as one EINVALID error.
func (c *Creative) Validate() error { return validateOne(c) }

// Validate reports every rule l breaks, as one EINVALID error.
func (l *LineItem) Validate() error { return validateOne(l) }

func validateOne(o CampaignObject) error {
	v := &checker{}
	o.check(v, objectName(o.Kind(), o.ObjectID()))
	return v.err()
}

func (a *Advertiser) check(v *checker, at string) {
	checkID(v, at+".id", a.ID)
	if a.Name == "" || len(a.Name) > MaxNameLen || !printable(a.Name, true) {
		v.add(at+".name", "must be 1 to %d printable characters", MaxNameLen)
	}
	checkList(v, at+".domains", a.Domains, checkDomain)
	switch a.Status {
	case "", StatusActive, StatusArchived:
	default:
		v.add(at+".status", "%q is not one of active, archived", clip(a.Status, 40))
	}
}

// Archived reports whether a is archived.
func (a *Advertiser) Archived() bool { return a.Status == StatusArchived }

// checkName checks an optional display name: empty, or up to MaxNameLen
// bytes of printable text (an advertiser's is required: see its check).
func checkName(v *checker, at, name string) {
	if len(name) > MaxNameLen || !printable(name, true) {
		v.add(at, "must be at most %d printable characters", MaxNameLen)
	}
}

// Paused reports whether c is paused.
func (c *Campaign) Paused() bool { return c.Status == StatusPaused }

// Archived reports whether c is archived.
func (c *Campaign) Archived() bool { return c.Status == StatusArchived }

func (c *Campaign) check(v *checker, at string) {
	checkID(v, at+".id", c.ID)
	checkName(v, at+".name", c.Name)
	checkRef(v, at+".advertiser", c.Advertiser)
	switch c.Status {
	case "", StatusActive, StatusPaused, StatusArchived:
	default:
		v.add(at+".status", "%q is not one of active, paused, archived", clip(c.Status, 40))
	}
	checkWindow(v, at, c.Start, c.End)
	if _, err := c.Location(); err != nil {
		v.add(at+".timezone", "%q is not a known IANA time zone (such as Asia/Tokyo or UTC)", clip(c.Timezone, 64))
	}
	b := c.Budget
	for _, z := range []struct {
		flag  uint8
		field string
	}{{budgetTotal0, "total"}, {budgetDaily0, "daily"}} {
		if b.written0&z.flag != 0 {
			v.add(at+".budget."+z.field, "0 is no budget: for no cap, leave %s out; to stop spending, pause the campaign", z.field)
		}
	}
	if b.Total < 0 {
		v.add(at+".budget.total", "must not be negative")
	}
	if b.Daily < 0 {
		v.add(at+".budget.daily", "must not be negative")
	}
	if b.Total > 0 && b.Daily > b.Total {
		v.add(at+".budget.daily", "%s is more than the total budget %s", b.Daily, b.Total)
	}
	for _, x := range []struct {
		path string
		m    Money
	}{{".budget.total", b.Total}, {".budget.daily", b.Daily}} {
		if x.m > MaxQuotaUnits {
			v.add(at+x.path, "%s is more than a budget may be (%s: budgets are counted exactly, in micro-units, up to 2^53-1)", x.m, Money(MaxQuotaUnits))
		}
	}
	switch c.Pacing.Mode {
	case "", PacingEven, PacingFrontloaded:
	case PacingASAP:
		if len(c.Pacing.HourWeights) > 0 {
			v.add(at+".pacing.hour_weights", "asap pacing takes no hour weights")
		}
	default:
		v.add(at+".pacing.mode", "%q is not one of asap, even, frontloaded", clip(c.Pacing.Mode, 40))
	}
	if w := c.Pacing.HourWeights; len(w) > 0 {
		sum := 0
		for i, x := range w {
			if x < 0 || x > 1000 {
				v.add(fmt.Sprintf("%s.pacing.hour_weights[%d]", at, i), "must be 0 to 1000")
			}
			sum += x
		}
		if len(w) != 24 {
			v.add(at+".pacing.hour_weights", "has %d weights, want 24 (hour 0 to 23)", len(w))
		} else if sum == 0 {
			v.add(at+".pacing.hour_weights", "are all zero")
		}
	}
}

// The controls a creative's html and a reason may hold: dropped before
// their check for printable text (built once: a Replacer's build is the
// larger part of its first Replace).
var (
	htmlControls   = strings.NewReplacer("\n", "", "\t", "", "\r", "")
	reasonControls = strings.NewReplacer("\n", "", "\t", "")
)

func (c *Creative) check(v *checker, at string) {
	checkID(v, at+".id", c.ID)
	checkName(v, at+".name", c.Name)
	checkRef(v, at+".advertiser", c.Advertiser)
	if c.W <= 0 || c.W > MaxCreativeDimension {
		v.add(at+".w", "must be 1 to %d pixels", MaxCreativeDimension)
	}
	if c.H <= 0 || c.H > MaxCreativeDimension {
		v.add(at+".h", "must be 1 to %d pixels", MaxCreativeDimension)
	}
	switch c.Format {
	case FormatBanner:
		switch {
		case c.Image == "" && c.HTML == "":
			v.add(at, "a banner needs an image URL or html")
		case c.Image != "" && c.HTML != "":
			v.add(at, "a banner has an image URL or html, not both")
		}
		if c.Image != "" {
			checkURL(v, at+".image", c.Image, MaxURLLength)
		}
		if len(c.HTML) > MaxHTMLLength || !printable(htmlControls.Replace(c.HTML), true) {
			v.add(at+".html", "must be at most %d bytes of text", MaxHTMLLength)
		}
		if c.Duration != 0 || len(c.MIMEs) > 0 || c.Media != "" {
			v.add(at, "duration, mimes and media are for video creatives")
		}
	case FormatVideo:
		if c.Duration <= 0 || c.Duration > MaxVideoDuration {
			v.add(at+".duration", "must be 1 to %d seconds", MaxVideoDuration)
		}
		if len(c.MIMEs) == 0 {
			v.add(at+".mimes", "a video needs its MIME types (such as video/mp4)")
		}
		checkList(v, at+".mimes", c.MIMEs, checkMIME)
		if c.Media == "" {
			v.add(at+".media", "a video needs its media URL")
		} else {
			checkURL(v, at+".media", c.Media, MaxURLLength)
		}
		if c.Image != "" || c.HTML != "" {
			v.add(at, "image and html are for banners")
		}
	default:
		v.add(at+".format", "%q is not one of banner, video", clip(c.Format, 40))
	}
	switch {
	case c.Click == "":
		v.add(at+".click", "missing: the URL a click leads to")
	case len(c.Click) > MaxClickLength:
		v.add(at+".click", "longer than %d bytes (its click tracking URL carries it)", MaxClickLength)
	default:
		checkURL(v, at+".click", c.Click, MaxClickLength)
	}
	checkList(v, at+".categories", c.Categories, checkCategory)
	if c.App != "" {
		if msg := checkToken(c.App); msg != "" {
			v.add(at+".app", "%s", msg)
		}
	}
	switch c.Status {
	case "", StatusApproved, StatusPending, StatusRejected:
	default:
		v.add(at+".status", "%q is not one of approved, pending, rejected", clip(c.Status, 40))
	}
	if len(c.Reason) > MaxReasonLength || !printable(reasonControls.Replace(c.Reason), true) {
		v.add(at+".reason", "must be at most %d bytes of text", MaxReasonLength)
	}
}

// Paused reports whether l is paused.
func (l *LineItem) Paused() bool { return l.Status == StatusPaused }

// Archived reports whether l is archived.
func (l *LineItem) Archived() bool { return l.Status == StatusArchived }

func (l *LineItem) check(v *checker, at string) {
	checkID(v, at+".id", l.ID)
	checkName(v, at+".name", l.Name)
	checkRef(v, at+".campaign", l.Campaign)
	switch l.Status {
	case "", StatusActive, StatusPaused, StatusArchived:
	default:
		v.add(at+".status", "%q is not one of active, paused, archived", clip(l.Status, 40))
	}
	if l.Priority < MinPriority || l.Priority > MaxPriority {
		v.add(at+".priority", "must be %d to %d, not %d", MinPriority, MaxPriority, l.Priority)
	}
	if l.Weight <= 0 || l.Weight > 1_000_000 {
		v.add(at+".weight", "must be 1 to 1000000, not %d", l.Weight)
	}
	if l.CPM < 0 {
		v.add(at+".cpm", "must not be negative")
	}
	if l.CPM > MaxCPM {
		v.add(at+".cpm", "%s is more than a CPM may be (%s: reports add spend up exactly, in 64-bit integers)", l.CPM, MaxCPM)
	}
	if len(l.Creatives) == 0 {
		v.add(at+".creatives", "a line item needs at least one creative")
	}
	checkList(v, at+".creatives", l.Creatives, validObjectID)
	checkDuplicates(v, at+".creatives", l.Creatives)
	checkWindow(v, at, l.Start, l.End)
	im := l.Limits.Impressions
	if im.Total < 0 {
		v.add(at+".limits.impressions.total", "must not be negative")
	}
	if im.Daily < 0 {
		v.add(at+".limits.impressions.daily", "must not be negative")
	}
	if im.Total > 0 && im.Daily > im.Total {
		v.add(at+".limits.impressions.daily", "%d is more than the total %d", im.Daily, im.Total)
	}
	if im.Total > MaxQuotaUnits || im.Daily > MaxQuotaUnits {
		v.add(at+".limits.impressions", "more than %d impressions, the most a limit counts", int64(MaxQuotaUnits))
	}
	if len(l.Frequency) > MaxFrequencyCaps {
		v.add(at+".frequency", "has %d caps, more than %d", len(l.Frequency), MaxFrequencyCaps)
	}
	for i, f := range l.Frequency {
		fat := ""
		if !v.probe {
			fat = fmt.Sprintf("%s.frequency[%d]", at, i)
		}
		if f.Impressions <= 0 {
			v.add(fat+".impressions", "must be positive")
		}
		if d := time.Duration(f.Per); d < time.Second || d > MaxFrequencyWindow || d%time.Second != 0 {
			v.add(fat+".per", "must be whole seconds from 1s to %s", Duration(MaxFrequencyWindow))
		}
	}
	checkList(v, at+".deals", l.Deals, validObjectID)
	checkDuplicates(v, at+".deals", l.Deals)
	l.Targeting.Criteria.check(v, v.join(at, ".targeting"))
	if x := l.Targeting.Exclude; x != nil {
		x.check(v, v.join(at, ".targeting.exclude"))
	}
}

func (c *Criteria) check(v *checker, at string) {
	checkList(v, at+".placements", c.Placements, func(s string) string {
		if err := ValidID(s); err != nil {
			return ErrorMessage(err)
		}
		return ""
	})
	checkList(v, at+".sites", c.Sites, checkDomain)
	checkList(v, at+".apps", c.Apps, checkToken)
	checkList(v, at+".countries", c.Countries, func(s string) string {
		if !isUpperCode(s, 2) {
			return "not an ISO 3166-1 alpha-2 code (two capital letters, such as JP)"
		}
		return ""
	})
	checkList(v, at+".regions", c.Regions, func(s string) string {
		if len(s) < 4 || len(s) > 6 || s[2] != '-' || !isUpperCode(s[:2], 2) || !isUpperAlnum(s[3:]) {
			return "not an ISO 3166-2 code (such as JP-13)"
		}
		return ""
	})
	checkList(v, at+".devices", c.Devices, oneOf(Devices))
	checkList(v, at+".os", c.OS, checkUAName)
	checkList(v, at+".browsers", c.Browsers, checkUAName)
	if h := c.Hours; h != nil {
		if h.From < 0 || h.From > 23 {
			v.add(at+".hours.from", "must be 0 to 23")
		}
		if h.To < 1 || h.To > 24 {
			v.add(at+".hours.to", "must be 1 to 24")
		}
		if h.From == h.To {
			v.add(at+".hours", "from and to are the same hour: an empty range")
		}
	}
	checkList(v, at+".weekdays", c.Weekdays, oneOf(Weekdays))
	checkDuplicates(v, at+".weekdays", c.Weekdays)
	if len(c.KeyValues) > MaxKeyValueKeys {
		v.add(at+".keyvalues", "has %d keys, more than %d", len(c.KeyValues), MaxKeyValueKeys)
	}
	keys := make([]string, 0, len(c.KeyValues))
	for k := range c.KeyValues {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kat := ""
		if !v.probe {
			kat = fmt.Sprintf("%s.keyvalues[%q]", at, clip(k, 64))
		}
		if !validKey(k) {
			v.add(kat, "a key is 1 to 64 letters, digits and -_.")
		}
		if len(c.KeyValues[k]) == 0 {
			v.add(kat, "lists no value")
		}
		checkList(v, kat, c.KeyValues[k], checkToken)
	}
}

func checkID(v *checker, path, id string) {
	if err := validObjectID(id); err != "" {
		v.add(path, "%s", err)
	}
}

// checkRef checks the form of a reference; the set checks its target.
func checkRef(v *checker, path, id string) {
	if id == "" {
		v.add(path, "missing")
		return
	}
	checkID(v, path, id)
}

func validObjectID(id string) string {
	if id == "" {
		return "missing id"
	}
	if len(id) > MaxObjectIDLength {
		return fmt.Sprintf("an id is at most %d bytes", MaxObjectIDLength)
	}
	for i := 0; i < len(id); i++ {
		if !IDChar(id[i]) {
			return "an id may contain only letters, digits and -_.:@"
		}
	}
	return ""
}

func checkWindow(v *checker, at string, start, end time.Time) {
	if !start.IsZero() && !end.IsZero() && !start.Before(end) {
		v.add(at+".end", "must be after start (%s)", start.Format(time.RFC3339))
	}
}

// checkURL checks a creative's URL by the rule signing applies
// (CheckWebURL).
func checkURL(v *checker, path, u string, maxLen int) {
	if err := CheckWebURL(u, maxLen); err != nil {
		v.add(path, "%s", ErrorMessage(err))
	}
}

// checkList checks every value of a list with check (which returns "" for
// a good value) and the list's length.
func checkList(v *checker, path string, list []string, check func(string) string) {
	if len(list) > MaxListValues {
		v.add(path, "has %d values, more than %d", len(list), MaxListValues)
		return
	}
	for i, s := range list {
		if msg := check(s); msg != "" {
			v.add(fmt.Sprintf("%s[%d]", path, i), "%q: %s", clip(s, 64), msg)
		}
	}
}

func checkDuplicates(v *checker, path string, list []string) {
	seen := make(map[string]int, len(list))
	for i, s := range list {
		if j, dup := seen[s]; dup {
			v.add(fmt.Sprintf("%s[%d]", path, i), "%q is listed twice (also at [%d])", clip(s, 64), j)
			continue
		}
		seen[s] = i
	}
}

func oneOf(allowed []string) func(string) string {
	return func(s string) string {
		if slices.Contains(allowed, s) {
			return ""
		}
		return "not one of " + strings.Join(allowed, ", ")
	}
}

// checkDomain accepts a lower-case host name (letters, digits, hyphens,
// dots between labels).
func checkDomain(s string) string {
	const msg = "not a lower-case domain name (such as example.com)"
	if s == "" || len(s) > 253 {
		return msg
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return msg
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return msg
			}
		}
	}
	return ""
}

// checkToken accepts 1 to MaxValueLength printable characters without spaces.
func checkToken(s string) string {
	if s == "" || len(s) > MaxValueLength || !printable(s, false) {
		return fmt.Sprintf("must be 1 to %d printable characters without spaces", MaxValueLength)
	}
	return ""
}

// checkUAName accepts an OS or browser as the User-Agent parser names
// them: a lower-case word of letters and digits ("ios", "chrome"; the list
// is in docs/ads.md), so that "iOS" is refused rather than never matched.
func checkUAName(s string) string {
	if s == "" || len(s) > 32 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return "must be a lower-case name of letters and digits, as the User-Agent parser gives it (ios, android, chrome, safari: docs/ads.md lists them)"
	}
	return ""
}

func checkMIME(s string) string {
	typ, sub, ok := strings.Cut(s, "/")
	if !ok || !validKey(typ) || !validKey(strings.ReplaceAll(sub, "+", "")) {
		return "not a MIME type (such as video/mp4)"
	}
	return ""
}

// checkCategory accepts IAB content taxonomy 1.0 codes: IAB1 to IAB26,
// optionally with a subcategory (IAB19-29).
func checkCategory(s string) string {
	const msg = "not an IAB category (such as IAB1 or IAB19-29)"
	rest, ok := strings.CutPrefix(s, "IAB")
	if !ok {
		return msg
	}
	top, sub, hasSub := strings.Cut(rest, "-")
	if !digits(top, 2) || hasSub && !digits(sub, 3) {
		return msg
	}
	if n, _ := strconv.Atoi(top); n > 26 {
		return msg
	}
	return ""
}

func digits(s string, max int) bool {
	if s == "" || len(s) > max || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func validKey(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func isUpperCode(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < n; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func isUpperAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if !(s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
			return false
		}
	}
	return s != ""
}
