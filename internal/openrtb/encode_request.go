package openrtb

import (
	"encoding/json"
	"strconv"

	"tsubame/internal/render"
)

// AppendRequest appends r as JSON, for a seller sending it to a buyer:
// byte for byte what encoding/json's Marshal writes for it
// (TestAppendRequest holds them equal, fuzzed too), in one pass into dst,
// allocating nothing when dst has room (BenchmarkAppendRequest). Fields
// are written in the order of the types, empty ones left out as their
// tags say; strings are escaped as encoding/json does ('<', '>' and '&'
// included); amounts are exact decimals (Price.AppendDecimal); privacy
// signals are written as privacy.go says (an unreadable Flag as 1, an
// unreadable Text or Sections not at all). An ext is written compacted,
// as Marshal writes a json.RawMessage; one that is not valid JSON, on
// which Marshal fails, is left out.
func AppendRequest(dst []byte, r *BidRequest) []byte { return appendRequest(dst, r, false) }

// AppendRequest25 is AppendRequest for a buyer that reads OpenRTB 2.5:
// the fields 2.6 took out of the extensions are also written where 2.5
// readers look for them (as Prebid Server does for such bidders), beside
// their 2.6 places, which a 2.5 reader ignores: regs.ext.gdpr,
// regs.ext.us_privacy, regs.ext.gpp and regs.ext.gpp_sid, user.ext.consent,
// and source.ext.schain. An object with an ext of its own keeps it as it is.
func AppendRequest25(dst []byte, r *BidRequest) []byte { return appendRequest(dst, r, true) }

func appendRequest(dst []byte, r *BidRequest, v25 bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = render.AppendJSONString(dst, r.ID)
	dst = append(dst, `,"imp":`...)
	if r.Imp == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Imp {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendImp(dst, &r.Imp[i])
		}
		dst = append(dst, ']')
	}
	if r.Site != nil {
		dst = appendSite(append(dst, `,"site":`...), r.Site)
	}
	if r.App != nil {
		dst = appendApp(append(dst, `,"app":`...), r.App)
	}
	if r.Device != nil {
		dst = appendDevice(append(dst, `,"device":`...), r.Device)
	}
	if r.User != nil {
		dst = appendUser(append(dst, `,"user":`...), r.User, v25)
	}
	dst = appendInt(dst, `,"test":`, r.Test)
	dst = appendInt(dst, `,"at":`, r.AT)
	dst = appendInt(dst, `,"tmax":`, r.TMax)
	dst = appendStrings(dst, `,"wseat":`, r.WSeat)
	dst = appendStrings(dst, `,"bseat":`, r.BSeat)
	dst = appendStrings(dst, `,"cur":`, r.Cur)
	dst = appendStrings(dst, `,"bcat":`, r.BCat)
	dst = appendStrings(dst, `,"badv":`, r.BAdv)
	dst = appendStrings(dst, `,"bapp":`, r.BApp)
	if r.Source != nil {
		dst = appendSource(append(dst, `,"source":`...), r.Source, v25)
	}
	if r.Regs != nil {
		dst = appendRegs(append(dst, `,"regs":`...), r.Regs, v25)
	}
	return append(dst, '}')
}

// The objects whose fields may all be left out are written field by
// field, each after a comma, between openObject and closeObject, which
// takes the first field's comma back out.

func openObject(dst []byte) ([]byte, int) { return append(dst, '{'), len(dst) }

func closeObject(dst []byte, start int) []byte {
	if len(dst) > start+1 && dst[start+1] == ',' {
		dst = append(dst[:start+1], dst[start+2:]...)
	}
	return append(dst, '}')
}

func appendImp(dst []byte, m *Imp) []byte {
	dst = append(dst, `{"id":`...)
	dst = render.AppendJSONString(dst, m.ID)
	if m.Banner != nil {
		dst = appendBanner(append(dst, `,"banner":`...), m.Banner)
	}
	if m.Video != nil {
		dst = appendVideo(append(dst, `,"video":`...), m.Video)
	}
	if m.Pmp != nil {
		dst = appendPmp(append(dst, `,"pmp":`...), m.Pmp)
	}
	dst = appendInt(dst, `,"instl":`, m.Instl)
	dst = appendString(dst, `,"tagid":`, m.TagID)
	dst = appendPrice(dst, `,"bidfloor":`, m.BidFloor)
	dst = appendString(dst, `,"bidfloorcur":`, m.BidFloorCur)
	dst = appendFlag(dst, `,"secure":`, m.Secure)
	dst = appendInt(dst, `,"exp":`, m.Exp)
	return append(dst, '}')
}

func appendBanner(dst []byte, b *Banner) []byte {
	dst, start := openObject(dst)
	if len(b.Format) > 0 {
		dst = append(dst, `,"format":[`...)
		for i := range b.Format {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendFormat(dst, &b.Format[i])
		}
		dst = append(dst, ']')
	}
	dst = appendInt(dst, `,"w":`, b.W)
	dst = appendInt(dst, `,"h":`, b.H)
	return closeObject(dst, start)
}

func appendFormat(dst []byte, f *Format) []byte {
	dst, start := openObject(dst)
	dst = appendInt(dst, `,"w":`, f.W)
	dst = appendInt(dst, `,"h":`, f.H)
	return closeObject(dst, start)
}

func appendVideo(dst []byte, v *Video) []byte {
	dst, start := openObject(dst)
	dst = appendStrings(dst, `,"mimes":`, v.MIMEs)
	dst = appendInt(dst, `,"minduration":`, v.MinDuration)
	dst = appendInt(dst, `,"maxduration":`, v.MaxDuration)
	dst = appendInts(dst, `,"protocols":`, v.Protocols)
	dst = appendInt(dst, `,"w":`, v.W)
	dst = appendInt(dst, `,"h":`, v.H)
	dst = appendInt(dst, `,"plcmt":`, v.Plcmt)
	dst = appendInt(dst, `,"linearity":`, v.Linearity)
	return closeObject(dst, start)
}

func appendPmp(dst []byte, p *Pmp) []byte {
	dst, start := openObject(dst)
	dst = appendInt(dst, `,"private_auction":`, p.PrivateAuction)
	if len(p.Deals) > 0 {
		dst = append(dst, `,"deals":[`...)
		for i := range p.Deals {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendDeal(dst, &p.Deals[i])
		}
		dst = append(dst, ']')
	}
	return closeObject(dst, start)
}

func appendDeal(dst []byte, d *Deal) []byte {
	dst = append(dst, `{"id":`...)
	dst = render.AppendJSONString(dst, d.ID)
	dst = appendPrice(dst, `,"bidfloor":`, d.BidFloor)
	dst = appendString(dst, `,"bidfloorcur":`, d.BidFloorCur)
	dst = appendStrings(dst, `,"wseat":`, d.WSeat)
	return append(dst, '}')
}

func appendSite(dst []byte, s *Site) []byte {
	dst, start := openObject(dst)
	dst = appendString(dst, `,"id":`, string(s.ID))
	dst = appendString(dst, `,"name":`, string(s.Name))
	dst = appendString(dst, `,"domain":`, s.Domain)
	dst = appendString(dst, `,"page":`, s.Page)
	dst = appendString(dst, `,"ref":`, string(s.Ref))
	if s.Publisher != nil {
		dst = appendPublisher(append(dst, `,"publisher":`...), s.Publisher)
	}
	return closeObject(dst, start)
}

func appendApp(dst []byte, a *App) []byte {
	dst, start := openObject(dst)
	dst = appendString(dst, `,"id":`, string(a.ID))
	dst = appendString(dst, `,"name":`, string(a.Name))
	dst = appendString(dst, `,"bundle":`, a.Bundle)
	dst = appendString(dst, `,"domain":`, string(a.Domain))
	dst = appendString(dst, `,"storeurl":`, string(a.StoreURL))
	if a.Publisher != nil {
		dst = appendPublisher(append(dst, `,"publisher":`...), a.Publisher)
	}
	return closeObject(dst, start)
}

func appendPublisher(dst []byte, p *Publisher) []byte {
	dst, start := openObject(dst)
	dst = appendString(dst, `,"id":`, p.ID)
	dst = appendString(dst, `,"name":`, string(p.Name))
	dst = appendString(dst, `,"domain":`, string(p.Domain))
	return closeObject(dst, start)
}

func appendDevice(dst []byte, d *Device) []byte {
	dst, start := openObject(dst)
	dst = appendString(dst, `,"ua":`, d.UA)
	if d.Geo != nil {
		g, gstart := openObject(append(dst, `,"geo":`...))
		g = appendString(g, `,"country":`, d.Geo.Country)
		g = appendString(g, `,"region":`, d.Geo.Region)
		dst = closeObject(g, gstart)
	}
	dst = appendFlag(dst, `,"dnt":`, d.DNT)
	dst = appendFlag(dst, `,"lmt":`, d.LMT)
	dst = appendString(dst, `,"ip":`, d.IP)
	dst = appendString(dst, `,"ipv6":`, d.IPv6)
	dst = appendInt(dst, `,"devicetype":`, d.DeviceType)
	dst = appendString(dst, `,"os":`, string(d.OS))
	dst = appendString(dst, `,"language":`, string(d.Language))
	dst = appendString(dst, `,"ifa":`, d.IFA)
	return closeObject(dst, start)
}

func appendUser(dst []byte, u *User, v25 bool) []byte {
	dst, start := openObject(dst)
	dst = appendString(dst, `,"id":`, string(u.ID))
	dst = appendString(dst, `,"buyeruid":`, u.BuyerUID)
	dst = appendString(dst, `,"consent":`, u.Consent.Value)
	if v25 && len(u.Ext) == 0 && u.Consent.Value != "" {
		dst = appendString(append(dst, `,"ext":{`...), `"consent":`, u.Consent.Value)
		return closeObject(append(dst, '}'), start)
	}
	dst = appendRaw(dst, `,"ext":`, u.Ext)
	return closeObject(dst, start)
}

func appendSource(dst []byte, s *Source, v25 bool) []byte {
	dst, start := openObject(dst)
	if s.FD != nil {
		dst = strconv.AppendInt(append(dst, `,"fd":`...), int64(*s.FD), 10)
	}
	dst = appendString(dst, `,"tid":`, s.TID.Value)
	if s.SChain != nil {
		dst = appendSChain(append(dst, `,"schain":`...), s.SChain)
	}
	if v25 && len(s.Ext) == 0 && s.SChain != nil {
		dst = appendSChain(append(dst, `,"ext":{"schain":`...), s.SChain)
		return closeObject(append(dst, '}'), start)
	}
	dst = appendRaw(dst, `,"ext":`, s.Ext)
	return closeObject(dst, start)
}

func appendSChain(dst []byte, c *SupplyChain) []byte {
	dst = strconv.AppendInt(append(dst, `{"complete":`...), int64(c.Complete), 10)
	dst = append(dst, `,"nodes":`...)
	if c.Nodes == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range c.Nodes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendNode(dst, &c.Nodes[i])
		}
		dst = append(dst, ']')
	}
	dst = render.AppendJSONString(append(dst, `,"ver":`...), string(c.Ver))
	return append(dst, '}')
}

func appendNode(dst []byte, n *SupplyChainNode) []byte {
	dst = append(dst, `{"asi":`...)
	dst = render.AppendJSONString(dst, n.ASI)
	dst = render.AppendJSONString(append(dst, `,"sid":`...), n.SID)
	dst = appendString(dst, `,"rid":`, string(n.RID))
	dst = appendString(dst, `,"name":`, string(n.Name))
	dst = appendString(dst, `,"domain":`, string(n.Domain))
	if n.HP != nil {
		dst = strconv.AppendInt(append(dst, `,"hp":`...), int64(*n.HP), 10)
	}
	return append(dst, '}')
}

func appendRegs(dst []byte, g *Regs, v25 bool) []byte {
	dst, start := openObject(dst)
	dst = appendFlag(dst, `,"coppa":`, g.COPPA)
	dst = appendRegsPrivacy(dst, g)
	if v25 && len(g.Ext) == 0 {
		ext := len(dst)
		dst, inner := openObject(append(dst, `,"ext":`...))
		dst = appendRegsPrivacy(dst, g)
		if len(dst) == inner+1 { // nothing to say
			dst = dst[:ext]
		} else {
			dst = closeObject(dst, inner)
		}
		return closeObject(dst, start)
	}
	dst = appendRaw(dst, `,"ext":`, g.Ext)
	return closeObject(dst, start)
}

// appendRegsPrivacy writes the privacy signals of regs but coppa: the
// fields 2.5 carried in regs.ext.
func appendRegsPrivacy(dst []byte, g *Regs) []byte {
	dst = appendFlag(dst, `,"gdpr":`, g.GDPR)
	dst = appendString(dst, `,"us_privacy":`, g.USPrivacy.Value)
	dst = appendString(dst, `,"gpp":`, g.GPP.Value)
	if !g.GPPSID.IsZero() {
		dst = g.GPPSID.appendJSON(append(dst, `,"gpp_sid":`...))
	}
	return dst
}

// appendPrice writes key and p unless p is 0 (omitempty).
func appendPrice(dst []byte, key string, p Price) []byte {
	if p == 0 {
		return dst
	}
	return p.AppendDecimal(append(dst, key...))
}

// appendFlag writes key and f unless f is FlagAbsent (omitzero).
func appendFlag(dst []byte, key string, f Flag) []byte {
	if f.IsZero() {
		return dst
	}
	return f.appendJSON(append(dst, key...))
}

// appendInts writes key and list unless list is empty (omitempty).
func appendInts(dst []byte, key string, list []Int) []byte {
	if len(list) == 0 {
		return dst
	}
	dst = append(append(dst, key...), '[')
	for i, n := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(n), 10)
	}
	return append(dst, ']')
}

// appendRaw writes key and raw, compacted as encoding/json writes a
// json.RawMessage, unless raw is empty (omitempty) or not valid JSON.
func appendRaw(dst []byte, key string, raw json.RawMessage) []byte {
	if len(raw) == 0 || !json.Valid(raw) {
		return dst
	}
	return appendCompact(append(dst, key...), raw)
}

// appendCompact appends valid JSON src without the spaces between its
// tokens, and with '<', '>', '&', U+2028 and U+2029 escaped, as
// encoding/json's Marshal writes a json.RawMessage.
func appendCompact(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	inString, escaped := false, false
	start := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			case c == '<' || c == '>' || c == '&':
				dst = append(dst, src[start:i]...)
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
				start = i + 1
			case c == 0xe2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xa8: // U+2028, U+2029
				dst = append(dst, src[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xf])
				i += 2
				start = i + 1
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}
