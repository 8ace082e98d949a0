package tsubame

import (
	"context"
	"regexp"
	"time"
)

// Auditor is a store that tells what it keeps: `tsubame store audit`.
type Auditor interface {
	// Audit counts the store's keys (or records) by family, with their
	// size and how many never expire; with ExpirePastDays it also gives
	// the past days' budget keys still kept without a drop time one.
	Audit(ctx context.Context, opt AuditOptions) (*StoreAudit, error)
}

// AuditOptions configure an Audit.
type AuditOptions struct {
	// KeepDaily is ads.budget.keep_daily: a day's budget key older than
	// that (and two days, for every time zone) should have been dropped.
	// 0: days are kept forever, and none is stale.
	KeepDaily time.Duration
	// ExpirePastDays gives each stale day's key the drop time it would
	// have had (its date, two days, and KeepDaily, in UTC): at once, when
	// that has passed. Such keys were made before days' keys expired, or
	// their server could not tell the store.
	ExpirePastDays bool
	// Now is the clock (time.Now when zero).
	Now time.Time
}

// AuditFamily is one kind of data a store keeps.
type AuditFamily struct {
	Name string `json:"name"`
	Keys int64  `json:"keys"`
	// NoExpiry counts the keys that never expire.
	NoExpiry int64 `json:"no_expiry"`
	// Bytes is their size: the store's own figure where it has one, else
	// an estimate from a sample.
	Bytes int64  `json:"bytes"`
	What  string `json:"what"`
}

// StoreAudit is what a store keeps.
type StoreAudit struct {
	Store    string        `json:"store"`
	Families []AuditFamily `json:"families"`
	// StaleDays counts the days' budget keys past KeepDaily still kept
	// without a drop time; Expired, those ExpirePastDays gave one.
	StaleDays int64 `json:"stale_days"`
	Expired   int64 `json:"expired"`
}

// dayKey matches the key of a day's budget or limit (Quotas), its date
// the first group.
var dayKey = regexp.MustCompile(`/(\d{4}-\d{2}-\d{2})$`)

// QuotaKeyDay returns the date of a day's budget or limit key, and whether
// it is one (a total's key is not).
func QuotaKeyDay(key string) (time.Time, bool) {
	m := dayKey.FindStringSubmatch(key)
	if m == nil {
		return time.Time{}, false
	}
	d, err := time.Parse(time.DateOnly, m[1])
	return d, err == nil
}

// StaleDay reports whether a day's key of date should have been dropped by
// now with keep (ads.budget.keep_daily), and when it would have been: the
// end of its date in the furthest time zone (two days after its UTC
// midnight, to be safe) and keep.
func StaleDay(date time.Time, keep time.Duration, now time.Time) (drop time.Time, stale bool) {
	if keep <= 0 {
		return time.Time{}, false
	}
	drop = date.AddDate(0, 0, 2).Add(keep)
	return drop, now.After(drop)
}
