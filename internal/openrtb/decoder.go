package openrtb

import "encoding/json"

// Decoder decodes bid requests into memory it keeps from one request to
// the next: in steady state a request costs no allocation. A Decoder is
// used by one goroutine at a time; the request Decode returns, and every
// object, list and string in it, is its memory, valid until its next
// Decode: the strings are views of its own copy of the body (and of its
// buffer of unescaped strings), which the next Decode overwrites. A
// caller keeps none of it past that; what it keeps longer (a map key, a
// record in a store, a queued event) it copies first.
//
// It reads what encoding/json reads into BidRequest, with the types'
// UnmarshalJSON methods and Decode's 2.5 extensions, and refuses what it
// refuses (FuzzDecoderAgreesWithEncodingJSON): names matched regardless
// of ASCII case, the last of a repeated member counting, null leaving a
// string as it was, invalid UTF-8 read as U+FFFD. It was written because
// the decoders measured (goccy/go-json, the one before it, and those
// BenchmarkDecode names) allocate every string, pointer and list of a
// request: 24 to 47 allocations for the specification's examples, 109 for
// a real request.
type Decoder struct {
	s   scanner
	req BidRequest
	// body is the copy of the request's text its strings are views of;
	// esc holds its unescaped strings. Both are kept for the next request.
	body, esc []byte

	imps    []Imp
	banners []Banner
	videos  []Video
	pmps    []Pmp
	formats []Format
	deals   []Deal
	strs    []string
	ints    []Int
	nodes   []SupplyChainNode

	site   Site
	app    App
	device Device
	geo    Geo
	user   User
	source Source
	regs   Regs
	schain SupplyChain
	pubs   [2]Publisher
}

// maxKept bounds the elements a Decoder's lists keep between requests,
// and maxKeptBytes its body and escape buffers: a rare request of many
// or a large one does not hold its memory for good.
const (
	maxKept      = 256
	maxKeptBytes = 64 << 10
)

// Decode reads body as Decode does into the Decoder's memory.
func (d *Decoder) Decode(body []byte) (*BidRequest, error) {
	b := trimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return nil, errNotObject
	}
	d.reset()
	// The body is copied into the Decoder's own buffer, kept for the next
	// request: the caller's body may be reused as soon as Decode returns
	// (a server's request buffer), the strings must not move with it.
	if cap(d.body) < len(b) || cap(d.body) > maxKeptBytes {
		d.body = make([]byte, 0, len(b))
	}
	d.body = append(d.body[:0], b...)
	if cap(d.esc) > maxKeptBytes {
		d.esc = nil
	}
	d.s.reset(d.body)
	d.s.esc = d.esc[:0]
	r := &d.req
	// The escape buffer, the largest it grew to, is kept for the next
	// request, whatever this one's end.
	defer func() { d.esc = d.s.esc }()
	d.request(r)
	d.s.end()
	if d.s.err != nil {
		return nil, d.s.err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	d.fromExt(r)
	return r, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// isSpace is bytes.TrimSpace's ASCII white space: what Decode always
// trimmed.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// Clear drops what the Decoder holds of the last request, for a Decoder
// kept idle (pooled): its text is zeroed (an idle Decoder keeps no
// visitor's ids, address or consent), and buffers over maxKeptBytes are
// let go.
func (d *Decoder) Clear() {
	d.reset()
	d.s = scanner{}
	clear(d.body)
	clear(d.esc)
	if d.body = d.body[:0]; cap(d.body) > maxKeptBytes {
		d.body = nil
	}
	if d.esc = d.esc[:0]; cap(d.esc) > maxKeptBytes {
		d.esc = nil
	}
}

func (d *Decoder) reset() {
	d.req = BidRequest{}
	d.imps = clearList(d.imps)
	d.banners = clearList(d.banners)
	d.videos = clearList(d.videos)
	d.pmps = clearList(d.pmps)
	d.formats = clearList(d.formats)
	d.deals = clearList(d.deals)
	d.strs = clearList(d.strs)
	d.ints = clearList(d.ints)
	d.nodes = clearList(d.nodes)
	d.site, d.app, d.device, d.geo = Site{}, App{}, Device{}, Geo{}
	d.user, d.source, d.regs, d.schain = User{}, Source{}, Regs{}, SupplyChain{}
	d.pubs = [2]Publisher{}
}

// clearList empties l, zeroing what it held (no string of the last
// request stays reachable), or drops it when it grew past maxKept.
func clearList[T any](l []T) []T {
	if cap(l) > maxKept {
		return nil
	}
	clear(l)
	return l[:0]
}

func (d *Decoder) request(r *BidRequest) {
	s := &d.s
	var kb [32]byte
	if !s.open('{') {
		return
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.str(&r.ID)
		case "imp":
			d.imp(r)
		case "site":
			if d.object() {
				r.Site = &d.site
				d.siteObject(r.Site)
			} else {
				r.Site = nil
			}
		case "app":
			if d.object() {
				r.App = &d.app
				d.appObject(r.App)
			} else {
				r.App = nil
			}
		case "device":
			if d.object() {
				r.Device = &d.device
				d.deviceObject(r.Device)
			} else {
				r.Device = nil
			}
		case "user":
			if d.object() {
				r.User = &d.user
				d.userObject(r.User)
			} else {
				r.User = nil
			}
		case "test":
			d.int(&r.Test)
		case "at":
			d.int(&r.AT)
		case "tmax":
			d.int(&r.TMax)
		case "wseat":
			r.WSeat = d.strings()
		case "bseat":
			r.BSeat = d.strings()
		case "cur":
			r.Cur = d.strings()
		case "bcat":
			r.BCat = d.strings()
		case "badv":
			r.BAdv = d.strings()
		case "bapp":
			r.BApp = d.strings()
		case "source":
			if d.object() {
				r.Source = &d.source
				d.sourceObject(r.Source)
			} else {
				r.Source = nil
			}
		case "regs":
			if d.object() {
				r.Regs = &d.regs
				d.regsObject(r.Regs)
			} else {
				r.Regs = nil
			}
		default:
			s.skip()
		}
	}
}

// object reports whether an object is next, false for null (read); else
// it records a type error.
func (d *Decoder) object() bool {
	if d.s.null() {
		return false
	}
	if d.s.ws() != '{' {
		d.s.open('{') // the error
		return false
	}
	return true
}

// str reads a string into *v; null leaves it as it is.
func (d *Decoder) str(v *string) {
	if d.s.null() {
		return
	}
	if raw, esc, ok := d.s.quoted(); ok {
		*v = d.s.text(raw, esc)
	}
}

// loose reads a String: any other value is "".
func (d *Decoder) loose(v *String) {
	*v = ""
	if d.s.ws() != '"' {
		d.s.skip()
		return
	}
	if raw, esc, ok := d.s.quoted(); ok {
		*v = String(d.s.textAsWritten(raw, esc))
	}
}

// textValue reads a Text as Text.UnmarshalJSON does.
func (d *Decoder) textValue(v *Text) {
	*v = Text{}
	switch d.s.ws() {
	case '"':
		if raw, esc, ok := d.s.quoted(); ok {
			v.Value = d.s.textAsWritten(raw, esc)
		}
	case 'n':
		d.s.null()
	default:
		v.Unreadable = d.s.skip()
	}
}

func (d *Decoder) int(v *Int) {
	if raw := d.s.value(); raw != nil {
		_ = v.UnmarshalJSON(raw) // never fails
	}
}

// intPtr reads a *Int: null is nil.
func (d *Decoder) intPtr(v **Int) {
	if d.s.null() {
		*v = nil
		return
	}
	var n Int
	d.int(&n)
	if d.s.err == nil {
		d.ints = append(d.ints, n)
		*v = &d.ints[len(d.ints)-1]
	}
}

func (d *Decoder) price(v *Price) {
	if raw := d.s.value(); raw != nil {
		if err := v.UnmarshalJSON(raw); err != nil {
			d.s.fail(err)
		}
	}
}

func (d *Decoder) flag(v *Flag) {
	if raw := d.s.value(); raw != nil {
		*v = readFlag(raw)
	}
}

func (d *Decoder) sections(v *Sections) {
	if raw := d.s.value(); raw != nil {
		*v = readSections(raw, &d.ints)
	}
}

func (d *Decoder) raw(v *json.RawMessage) {
	if raw := d.s.value(); raw != nil {
		*v = raw
	}
}

// strings reads a list of strings (a null element is ""); null is nil.
func (d *Decoder) strings() []string {
	s := &d.s
	if s.null() || !s.open('[') {
		return nil
	}
	from := len(d.strs)
	for n := 0; s.more(']', &n); {
		var v string
		d.str(&v)
		d.strs = append(d.strs, v)
	}
	return d.strs[from:len(d.strs):len(d.strs)]
}

func (d *Decoder) imp(r *BidRequest) {
	s := &d.s
	r.Imp = nil
	if s.null() || !s.open('[') {
		return
	}
	from := len(d.imps)
	for n := 0; s.more(']', &n); {
		d.imps = append(d.imps, Imp{})
		i := len(d.imps) - 1
		if s.null() {
			continue
		}
		d.impObject(&d.imps[i])
	}
	r.Imp = d.imps[from:len(d.imps):len(d.imps)]
}

func (d *Decoder) impObject(imp *Imp) {
	s := &d.s
	var kb [32]byte
	if !s.open('{') {
		return
	}
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.str(&imp.ID)
		case "banner":
			imp.Banner = nil
			if d.object() {
				d.banners = append(d.banners, Banner{})
				b := &d.banners[len(d.banners)-1]
				d.bannerObject(b)
				imp.Banner = b
			}
		case "video":
			imp.Video = nil
			if d.object() {
				d.videos = append(d.videos, Video{})
				v := &d.videos[len(d.videos)-1]
				d.videoObject(v)
				imp.Video = v
			}
		case "pmp":
			imp.Pmp = nil
			if d.object() {
				d.pmps = append(d.pmps, Pmp{})
				p := &d.pmps[len(d.pmps)-1]
				d.pmpObject(p)
				imp.Pmp = p
			}
		case "instl":
			d.int(&imp.Instl)
		case "tagid":
			d.str(&imp.TagID)
		case "bidfloor":
			d.price(&imp.BidFloor)
		case "bidfloorcur":
			d.str(&imp.BidFloorCur)
		case "secure":
			d.flag(&imp.Secure)
		case "exp":
			d.int(&imp.Exp)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) bannerObject(b *Banner) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "format":
			b.Format = d.formatList()
		case "w":
			d.int(&b.W)
		case "h":
			d.int(&b.H)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) formatList() []Format {
	s := &d.s
	if s.null() || !s.open('[') {
		return nil
	}
	from := len(d.formats)
	var kb [32]byte
	for n := 0; s.more(']', &n); {
		var f Format
		if !s.null() && s.open('{') {
			for m := 0; s.more('}', &m); {
				switch string(s.key(&kb)) {
				case "w":
					d.int(&f.W)
				case "h":
					d.int(&f.H)
				default:
					s.skip()
				}
			}
		}
		d.formats = append(d.formats, f)
	}
	return d.formats[from:len(d.formats):len(d.formats)]
}

func (d *Decoder) videoObject(v *Video) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "mimes":
			v.MIMEs = d.strings()
		case "minduration":
			d.int(&v.MinDuration)
		case "maxduration":
			d.int(&v.MaxDuration)
		case "protocols":
			v.Protocols = d.intList()
		case "w":
			d.int(&v.W)
		case "h":
			d.int(&v.H)
		case "plcmt":
			d.int(&v.Plcmt)
		case "linearity":
			d.int(&v.Linearity)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) intList() []Int {
	s := &d.s
	if s.null() || !s.open('[') {
		return nil
	}
	from := len(d.ints)
	for n := 0; s.more(']', &n); {
		var v Int
		d.int(&v)
		d.ints = append(d.ints, v)
	}
	return d.ints[from:len(d.ints):len(d.ints)]
}

func (d *Decoder) pmpObject(p *Pmp) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "private_auction":
			d.int(&p.PrivateAuction)
		case "deals":
			p.Deals = d.dealList()
		default:
			s.skip()
		}
	}
}

func (d *Decoder) dealList() []Deal {
	s := &d.s
	if s.null() || !s.open('[') {
		return nil
	}
	from := len(d.deals)
	var kb [32]byte
	for n := 0; s.more(']', &n); {
		var v Deal
		if !s.null() && s.open('{') {
			for m := 0; s.more('}', &m); {
				switch string(s.key(&kb)) {
				case "id":
					d.str(&v.ID)
				case "bidfloor":
					d.price(&v.BidFloor)
				case "bidfloorcur":
					d.str(&v.BidFloorCur)
				case "wseat":
					v.WSeat = d.strings()
				default:
					s.skip()
				}
			}
		}
		d.deals = append(d.deals, v)
	}
	return d.deals[from:len(d.deals):len(d.deals)]
}

func (d *Decoder) siteObject(v *Site) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.loose(&v.ID)
		case "name":
			d.loose(&v.Name)
		case "domain":
			d.str(&v.Domain)
		case "page":
			d.str(&v.Page)
		case "ref":
			d.loose(&v.Ref)
		case "publisher":
			v.Publisher = d.publisher(&d.pubs[0])
		default:
			s.skip()
		}
	}
}

func (d *Decoder) appObject(v *App) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.loose(&v.ID)
		case "name":
			d.loose(&v.Name)
		case "bundle":
			d.str(&v.Bundle)
		case "domain":
			d.loose(&v.Domain)
		case "storeurl":
			d.loose(&v.StoreURL)
		case "publisher":
			v.Publisher = d.publisher(&d.pubs[1])
		default:
			s.skip()
		}
	}
}

// publisher reads a publisher into p, which it returns; nil for null.
func (d *Decoder) publisher(p *Publisher) *Publisher {
	if !d.object() {
		return nil
	}
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.str(&p.ID)
		case "name":
			d.loose(&p.Name)
		case "domain":
			d.loose(&p.Domain)
		default:
			s.skip()
		}
	}
	return p
}

func (d *Decoder) deviceObject(v *Device) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "ua":
			d.str(&v.UA)
		case "geo":
			v.Geo = nil
			if d.object() {
				v.Geo = &d.geo
				d.geoObject(v.Geo)
			}
		case "dnt":
			d.flag(&v.DNT)
		case "lmt":
			d.flag(&v.LMT)
		case "ip":
			d.str(&v.IP)
		case "ipv6":
			d.str(&v.IPv6)
		case "devicetype":
			d.int(&v.DeviceType)
		case "os":
			d.loose(&v.OS)
		case "language":
			d.loose(&v.Language)
		case "ifa":
			d.str(&v.IFA)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) geoObject(v *Geo) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "country":
			d.str(&v.Country)
		case "region":
			d.str(&v.Region)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) userObject(v *User) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "id":
			d.loose(&v.ID)
		case "buyeruid":
			d.str(&v.BuyerUID)
		case "consent":
			d.textValue(&v.Consent)
		case "ext":
			d.raw(&v.Ext)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) sourceObject(v *Source) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "fd":
			d.intPtr(&v.FD)
		case "tid":
			d.textValue(&v.TID)
		case "schain":
			v.SChain = nil
			if d.object() {
				v.SChain = &d.schain
				d.schainObject(v.SChain)
			}
		case "ext":
			d.raw(&v.Ext)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) schainObject(v *SupplyChain) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "complete":
			d.int(&v.Complete)
		case "nodes":
			v.Nodes = d.nodeList()
		case "ver":
			d.loose(&v.Ver)
		default:
			s.skip()
		}
	}
}

func (d *Decoder) nodeList() []SupplyChainNode {
	s := &d.s
	if s.null() || !s.open('[') {
		return nil
	}
	from := len(d.nodes)
	var kb [32]byte
	for n := 0; s.more(']', &n); {
		var v SupplyChainNode
		if !s.null() && s.open('{') {
			for m := 0; s.more('}', &m); {
				switch string(s.key(&kb)) {
				case "asi":
					d.str(&v.ASI)
				case "sid":
					d.str(&v.SID)
				case "rid":
					d.loose(&v.RID)
				case "name":
					d.loose(&v.Name)
				case "domain":
					d.loose(&v.Domain)
				case "hp":
					d.intPtr(&v.HP)
				default:
					s.skip()
				}
			}
		}
		d.nodes = append(d.nodes, v)
	}
	return d.nodes[from:len(d.nodes):len(d.nodes)]
}

func (d *Decoder) regsObject(v *Regs) {
	s := &d.s
	var kb [32]byte
	s.open('{')
	for n := 0; s.more('}', &n); {
		switch string(s.key(&kb)) {
		case "coppa":
			d.flag(&v.COPPA)
		case "gdpr":
			d.flag(&v.GDPR)
		case "us_privacy":
			d.textValue(&v.USPrivacy)
		case "gpp":
			d.textValue(&v.GPP)
		case "gpp_sid":
			d.sections(&v.GPPSID)
		case "ext":
			d.raw(&v.Ext)
		default:
			s.skip()
		}
	}
}

// fromExt reads the fields OpenRTB 2.5 extensions carried, as
// BidRequest.fromExt does, from the extensions' text (checked already).
func (d *Decoder) fromExt(r *BidRequest) {
	if g := r.Regs; g != nil && len(g.Ext) > 0 {
		var gdpr Flag
		var usp, gpp Text
		var sid Sections
		s := d.sub(g.Ext)
		if !s.null() {
			if s.ws() != '{' {
				gdpr, sid = FlagUnreadable, Sections{Flag: FlagUnreadable}
				usp, gpp = Text{Unreadable: true}, Text{Unreadable: true}
			} else {
				var kb [32]byte
				s.open('{')
				for n := 0; s.more('}', &n); {
					switch string(s.key(&kb)) {
					case "gdpr":
						d.flag(&gdpr)
					case "us_privacy":
						d.textValue(&usp)
					case "gpp":
						d.textValue(&gpp)
					case "gpp_sid":
						d.sections(&sid)
					default:
						s.skip()
					}
				}
			}
		}
		g.GDPR = max(g.GDPR, gdpr)
		g.USPrivacy = g.USPrivacy.merge(usp)
		g.GPP = g.GPP.merge(gpp)
		g.GPPSID = g.GPPSID.merge(sid)
	}
	if u := r.User; u != nil && len(u.Ext) > 0 {
		var consent Text
		s := d.sub(u.Ext)
		if !s.null() {
			if s.ws() != '{' {
				consent = Text{Unreadable: true}
			} else {
				var kb [32]byte
				s.open('{')
				for n := 0; s.more('}', &n); {
					switch string(s.key(&kb)) {
					case "consent":
						d.textValue(&consent)
					default:
						s.skip()
					}
				}
			}
		}
		u.Consent = u.Consent.merge(consent)
	}
	if src := r.Source; src != nil && len(src.Ext) > 0 && src.SChain == nil {
		s := d.sub(src.Ext)
		if !s.null() && s.ws() == '{' {
			var kb [32]byte
			var sc *SupplyChain
			s.open('{')
			for n := 0; s.more('}', &n); {
				switch string(s.key(&kb)) {
				case "schain":
					sc = nil
					if d.object() {
						d.schain = SupplyChain{}
						d.schainObject(&d.schain)
						sc = &d.schain
					}
				default:
					s.skip()
				}
			}
			if s.err == nil { // a malformed extension is ignored
				src.SChain = sc
			}
		}
	}
	d.s.err = nil
}

// sub readies the scanner to read text, a part of the request's copy:
// its strings stay views of it.
func (d *Decoder) sub(text []byte) *scanner {
	esc := d.s.esc
	d.s.reset(text)
	d.s.esc = esc
	return &d.s
}
