// Package tsubame holds the domain of the Tsubame ad delivery server: the
// Placement, the Store that keeps placements, the campaign model
// (advertisers, campaigns, creatives, line items, Money) and the
// CampaignStore that keeps it, and the error kinds every adapter maps to its
// own transport. It imports nothing but the standard
// library; the adapters live in internal/ and only cmd/tsubame wires them.
//
// It imports no package of this module (stdlib only); everything else depends on it.
package tsubame

import (
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on placement data. They bound what one request or one import line can
// make the server hold in memory and write to a response.
const (
	MaxIDLength  = 128  // bytes in a placement id
	MaxURLs      = 64   // ad tag URLs per placement
	MaxURLLength = 2048 // bytes per ad tag URL
	MaxDeps      = 32   // dependency keys per placement
	MaxDepLength = 128  // bytes per dependency key
	MaxNameLen   = 256  // bytes in a placement name
)

// Placement is one ad slot: an id and the ordered ad tag URLs served for it.
type Placement struct {
	// ID identifies the placement in requests (?id=...). See ValidID.
	ID string `json:"id"`
	// URLs are the ad tag URLs, in the order they are served.
	URLs []string `json:"urls"`
	// Name is an optional human-readable label.
	Name string `json:"name,omitempty"`
	// Deps are optional dependency keys (e.g. "campaign:42"): invalidating a
	// key drops every cached placement that declared it.
	Deps []string `json:"deps,omitempty"`
	// UpdatedAt is set by the store on every write.
	UpdatedAt time.Time `json:"updated_at"`
}

// Clone returns a deep copy of p.
func (p *Placement) Clone() *Placement {
	if p == nil {
		return nil
	}
	c := *p
	c.URLs = slices.Clone(p.URLs)
	c.Deps = slices.Clone(p.Deps)
	return &c
}

// Validate reports the first rule p breaks, as an EINVALID *Error.
func (p *Placement) Validate() error {
	if err := ValidID(p.ID); err != nil {
		return err
	}
	if len(p.URLs) == 0 {
		return Errorf(EINVALID, "placement %q has no urls", p.ID)
	}
	if len(p.URLs) > MaxURLs {
		return Errorf(EINVALID, "placement %q has %d urls, more than the limit of %d", p.ID, len(p.URLs), MaxURLs)
	}
	for i, u := range p.URLs {
		if err := validURL(u); err != nil {
			return Errorf(EINVALID, "placement %q url %d: %s", p.ID, i+1, err.Error())
		}
	}
	if len(p.Name) > MaxNameLen || !printable(p.Name, true) {
		return Errorf(EINVALID, "placement %q: name must be at most %d printable characters", p.ID, MaxNameLen)
	}
	if len(p.Deps) > MaxDeps {
		return Errorf(EINVALID, "placement %q has %d deps, more than the limit of %d", p.ID, len(p.Deps), MaxDeps)
	}
	for _, d := range p.Deps {
		if d == "" || len(d) > MaxDepLength || !printable(d, false) {
			return Errorf(EINVALID, "placement %q: dependency key %q must be 1 to %d printable characters without spaces", p.ID, d, MaxDepLength)
		}
	}
	return nil
}

// ValidID reports whether id may name a placement: 1 to MaxIDLength bytes of
// ASCII letters, digits and "-_.:@". The set is narrow on purpose: ids travel
// in query strings, log lines and admin URLs, and need no escaping in any.
func ValidID(id string) error {
	if id == "" {
		return Errorf(EINVALID, "missing placement id")
	}
	if len(id) > MaxIDLength {
		return Errorf(EINVALID, "placement id longer than %d bytes", MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		if !IDChar(id[i]) {
			return Errorf(EINVALID, "placement id may contain only letters, digits and -_.:@")
		}
	}
	return nil
}

// IDChar reports whether c may appear in a placement id: a letter, a
// digit or one of -_.:@.
func IDChar(c byte) bool { return idChars[c] }

// idChars is IDChar's table: one load a byte where the comparisons took up
// to ten (every id of every token signed and verified, every request's
// placement).
var idChars = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@", byte(c)) >= 0
	}
	return
}()

func validURL(s string) error {
	if len(s) > MaxURLLength {
		return Errorf(EINVALID, "longer than %d bytes", MaxURLLength)
	}
	if !printable(s, false) {
		return Errorf(EINVALID, "contains spaces or control characters")
	}
	u, err := url.Parse(s)
	if err != nil {
		return Errorf(EINVALID, "not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return Errorf(EINVALID, "must be an absolute http or https URL")
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters
// (and without spaces unless spaces is set).
func printable(s string, spaces bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return false
		}
		if r == ' ' && !spaces {
			return false
		}
	}
	return true
}
