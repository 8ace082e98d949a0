package tsubame

import (
	"context"
	"slices"
	"time"
)

// Limits of a Quotas call's arguments.
const (
	// MaxQuotaKeyLength is the longest key Quotas accepts, in bytes.
	MaxQuotaKeyLength = 200
	// MaxQuotaHolderLength is the longest holder Quotas accepts, in bytes.
	MaxQuotaHolderLength = 64
	// MaxQuotaUnits is the largest limit, want, used or unused Quotas
	// accepts: 2^53-1, so that a store counting in doubles (Redis's Lua)
	// counts exactly. In micro-units it is about 9 billion of a currency.
	MaxQuotaUnits = 1<<53 - 1
	// MaxQuotaReleaseIDLength is the longest id of a Release, in bytes.
	MaxQuotaReleaseIDLength = 64
	// QuotaReleaseIDs is how many of a holder's last applied release ids a
	// key keeps: a retry of any of them is a no-op.
	QuotaReleaseIDs = 64
	// QuotaIdleHolders is how many holders without a lease a key keeps the
	// release ids of, the last to release: nodes come and go (a new holder
	// at every start), and a key lasts a flight.
	QuotaIdleHolders = 64
	// MaxLeaseTTL is the longest ttl of a lease. A lease is meant to be
	// short: what a holder that dies leaves stranded is its lease.
	MaxLeaseTTL = 24 * time.Hour
)

// Quotas hands out slices ("leases") of counters with a limit (a line item's
// impressions, a campaign's budget in micro-units; per day or in total), so
// that nodes spend locally without a store round trip per request, and the
// committed units of a key — settled, plus every holder's outstanding lease —
// never exceed its limit, whatever the number of nodes. Safe for concurrent
// use.
//
// A lease past its expiry is treated as spent: when any call on its key
// sees it, its outstanding units become settled. A holder that died may
// have spent them, and committed spend must never exceed the limit, so an
// expired lease is never given back: its unspent units stay committed
// ("stranded"), bounded by the lease a holder takes — the caller keeps its
// leases small and renews them (Lease, even of 0 units, moves the expiry)
// before they expire. A holder must not spend a lease past its expiry.
//
// Keys are opaque strings built by the caller (e.g. "li-7/imp/2026-11-25"
// or "camp-3/spend/total"), 1 to MaxQuotaKeyLength bytes; holders (a
// node's id) 1 to MaxQuotaHolderLength bytes. Units are 0 to
// MaxQuotaUnits, ttl from 1 ms (stores may keep it to the millisecond,
// rounded up) to MaxLeaseTTL. Otherwise a call fails with EINVALID and
// changes nothing (ValidateLease, ValidateRelease, ValidateQuotaKey).
//
// An error other than EINVALID and ECONFLICT means the store could not
// tell: a Lease may or may not have granted units (if it did, they are
// stranded until the lease expires), a Release may or may not have been
// applied.
type Quotas interface {
	// Lease grants holder up to want more units of key: at most limit minus
	// the key's committed units, 0 when none are left (never an error for
	// that). Granted units join holder's outstanding lease, whose expiry
	// moves to now+ttl. One atomic step across all nodes sharing the store.
	// It returns the units granted and holder's whole outstanding lease
	// after the call (held), so that a holder tells a grant whose reply it
	// lost, and a lease the store settled at its expiry (held is then only
	// what this call granted).
	Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (granted, held int64, err error)
	// Release ends part of holder's lease: used units become settled (they
	// stay committed for good), unused ones are given back. used+unused must
	// not exceed the outstanding lease (EINVALID, nothing changed). A holder
	// without an outstanding lease on key — it expired and was settled, or
	// was never taken — gets ECONFLICT and nothing changes, unless used and
	// unused are both 0 (a no-op).
	//
	// id (1 to MaxQuotaReleaseIDLength bytes) names this release, so that
	// a retry whose first reply was lost is not settled twice: the key
	// keeps, per holder, the ids of the holder's last QuotaReleaseIDs (64)
	// applied releases — kept after its lease ends or expires, and while
	// the key lasts — and a Release whose id is among them changes nothing
	// and returns nil, whatever used and unused say, as the first did. A
	// retry of any of the holder's last 64 applied releases is a no-op; an
	// id older than those is applied again, so a holder gives each release
	// a new id (e.g. increasing) and retries only its recent ones. A
	// release that failed (EINVALID, ECONFLICT) or was a no-op (used and
	// unused both 0) records no id. The ids of a holder without a lease
	// are dropped once QuotaIdleHolders (64) other holders without one
	// have released since: a retry of its last release, the one that ended
	// its lease, is then ECONFLICT, never applied twice.
	Release(ctx context.Context, key, holder, id string, used, unused int64) error
	// Debit settles units of key that no lease holds: what was paid for
	// past the leases (a bill that came after the money its bid held was
	// given back). They count as settled at once, even past the limit,
	// so that the limit counts everything paid and no lease grants them
	// again. id names it as a release's id does (among holder's last
	// QuotaReleaseIDs): a retry of a debit that was applied is a no-op.
	// units is 1 to MaxQuotaUnits.
	Debit(ctx context.Context, key, holder, id string, units int64) error
	// Committed reports the key's settled units and its outstanding leases.
	Committed(ctx context.Context, key string) (settled, outstanding int64, err error)
	// Expire lets the store drop key and all it holds once the wall clock
	// is past at (a later call moves it). It is for keys no lease will ask
	// again once their period is over, such as a day's limit: dropped,
	// their settled units are forgotten, so a key that might be leased
	// again must never be given one. A key that does not exist is not
	// made. The store may drop it any time after at.
	Expire(ctx context.Context, key string, at time.Time) error
}

// ValidateQuotaKey checks a key of Quotas: EINVALID unless it is 1 to
// MaxQuotaKeyLength bytes.
func ValidateQuotaKey(key string) error {
	switch {
	case key == "":
		return Errorf(EINVALID, "empty quota key")
	case len(key) > MaxQuotaKeyLength:
		return Errorf(EINVALID, "quota key of %d bytes is longer than %d", len(key), MaxQuotaKeyLength)
	}
	return nil
}

func validateHolder(holder string) error {
	switch {
	case holder == "":
		return Errorf(EINVALID, "empty quota holder")
	case len(holder) > MaxQuotaHolderLength:
		return Errorf(EINVALID, "quota holder of %d bytes is longer than %d", len(holder), MaxQuotaHolderLength)
	}
	return nil
}

func validateUnits(what string, n int64) error {
	if n < 0 || n > MaxQuotaUnits {
		return Errorf(EINVALID, "%s of %d units is not from 0 to %d", what, n, int64(MaxQuotaUnits))
	}
	return nil
}

// ValidateLease checks the arguments of a Lease call (Quotas).
func ValidateLease(key, holder string, limit, want int64, ttl time.Duration) error {
	if err := ValidateQuotaKey(key); err != nil {
		return err
	}
	if err := validateHolder(holder); err != nil {
		return err
	}
	if err := validateUnits("limit", limit); err != nil {
		return err
	}
	if err := validateUnits("want", want); err != nil {
		return err
	}
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return Errorf(EINVALID, "lease ttl %v is not positive and at most %s", ttl, Duration(MaxLeaseTTL))
	}
	return nil
}

// ValidateRelease checks the arguments of a Release call (Quotas); whether
// used+unused fits the lease is for the store to tell.
func ValidateRelease(key, holder, id string, used, unused int64) error {
	if err := ValidateQuotaKey(key); err != nil {
		return err
	}
	if err := validateHolder(holder); err != nil {
		return err
	}
	switch {
	case id == "":
		return Errorf(EINVALID, "empty release id")
	case len(id) > MaxQuotaReleaseIDLength:
		return Errorf(EINVALID, "release id of %d bytes is longer than %d", len(id), MaxQuotaReleaseIDLength)
	}
	if err := validateUnits("used", used); err != nil {
		return err
	}
	return validateUnits("unused", unused)
}

// ValidateDebit checks the arguments of a Debit call (Quotas).
func ValidateDebit(key, holder, id string, units int64) error {
	if err := ValidateRelease(key, holder, id, units, 0); err != nil {
		return err
	}
	if units == 0 {
		return Errorf(EINVALID, "debit of 0 units")
	}
	return nil
}

// LeaseMillis is ttl in the milliseconds a store with a server clock keeps
// expiries in, rounded up.
func LeaseMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// QuotaState is a key's committed units, for a store that keeps them
// itself (in memory, in a file); a store with a server of its own does the
// same there. Times are the store's, in any unit, as long as it is one.
// The zero value is a key never leased. Not safe for concurrent use.
type QuotaState struct {
	Settled int64
	Leases  []QuotaLease // a few per key: one per node spending it
	// Released holds, per holder that released, the ids of its last
	// QuotaReleaseIDs applied releases, the holder that released last at
	// the end; of the holders without a lease, the last QuotaIdleHolders.
	Released []QuotaReleased
}

// QuotaReleased is a holder's applied release ids in a QuotaState, oldest
// first.
type QuotaReleased struct {
	Holder string
	IDs    []string
}

// QuotaLease is a holder's outstanding lease in a QuotaState.
type QuotaLease struct {
	Holder  string
	Units   int64
	Expires int64
}

// Expire settles the leases expired at now, and reports whether it changed
// anything.
func (q *QuotaState) Expire(now int64) bool {
	n := len(q.Leases)
	kept := q.Leases[:0]
	for _, l := range q.Leases {
		if l.Expires <= now {
			q.Settled += l.Units
			continue
		}
		kept = append(kept, l)
	}
	clear(q.Leases[len(kept):])
	q.Leases = kept
	return len(kept) != n
}

// Outstanding is the sum of the leases.
func (q *QuotaState) Outstanding() int64 {
	var n int64
	for _, l := range q.Leases {
		n += l.Units
	}
	return n
}

func (q *QuotaState) find(holder string) int {
	for i := range q.Leases {
		if q.Leases[i].Holder == holder {
			return i
		}
	}
	return -1
}

// Held is holder's outstanding lease.
func (q *QuotaState) Held(holder string) int64 {
	if i := q.find(holder); i >= 0 {
		return q.Leases[i].Units
	}
	return 0
}

// Lease is Quotas.Lease on q, after Expire(now): it grants up to want
// units within limit to holder, whose lease then expires at expires, and
// returns the units granted. The arguments must have passed ValidateLease.
func (q *QuotaState) Lease(holder string, limit, want, now, expires int64) int64 {
	q.Expire(now)
	var grant int64
	if left := limit - q.Settled - q.Outstanding(); left > 0 {
		grant = min(want, left)
	}
	switch i := q.find(holder); {
	case i >= 0:
		q.Leases[i].Units += grant
		q.Leases[i].Expires = expires
	case grant > 0:
		q.Leases = append(q.Leases, QuotaLease{Holder: holder, Units: grant, Expires: expires})
	}
	return grant
}

// Release is Quotas.Release on q, after Expire(now). On an error it
// changes nothing but the expired leases. The arguments must have passed
// ValidateRelease.
func (q *QuotaState) Release(holder, id string, used, unused, now int64) error {
	q.Expire(now)
	r := q.released(holder)
	if r >= 0 && slices.Contains(q.Released[r].IDs, id) {
		return nil // applied already
	}
	if used == 0 && unused == 0 {
		return nil
	}
	i := q.find(holder)
	if i < 0 {
		return Errorf(ECONFLICT, "holder %q has no outstanding lease: it expired and was settled, or was never taken", holder)
	}
	l := &q.Leases[i]
	if used > l.Units || unused > l.Units-used {
		return Errorf(EINVALID, "release of %d used and %d unused units is more than the lease of %d", used, unused, l.Units)
	}
	q.Settled += used
	if l.Units -= used + unused; l.Units == 0 {
		q.Leases = slices.Delete(q.Leases, i, i+1)
	}
	q.applied(holder, id, r)
	return nil
}

// Debit is Quotas.Debit on q, after Expire(now). The arguments must have
// passed ValidateDebit.
func (q *QuotaState) Debit(holder, id string, units, now int64) {
	q.Expire(now)
	r := q.released(holder)
	if r >= 0 && slices.Contains(q.Released[r].IDs, id) {
		return // applied already
	}
	q.Settled += units
	q.applied(holder, id, r)
}

// released is the index of holder's release ids in q.Released, or -1.
func (q *QuotaState) released(holder string) int {
	for i := range q.Released {
		if q.Released[i].Holder == holder {
			return i
		}
	}
	return -1
}

// applied records id as holder's latest applied release (or debit); r is
// released(holder).
func (q *QuotaState) applied(holder, id string, r int) {
	rel := QuotaReleased{Holder: holder}
	if r >= 0 { // to the end: the holder released last
		rel = q.Released[r]
		q.Released = slices.Delete(q.Released, r, r+1)
	}
	rel.IDs = append(rel.IDs, id)
	if len(rel.IDs) > QuotaReleaseIDs {
		rel.IDs = slices.Delete(rel.IDs, 0, len(rel.IDs)-QuotaReleaseIDs)
	}
	q.Released = append(q.Released, rel)
	q.pruneIdle()
}

// pruneIdle drops the release ids of the holders without a lease that
// released longest ago, beyond the last QuotaIdleHolders.
func (q *QuotaState) pruneIdle() {
	idle := 0
	for _, r := range q.Released {
		if q.find(r.Holder) < 0 {
			idle++
		}
	}
	for i := 0; idle > QuotaIdleHolders && i < len(q.Released); {
		if q.find(q.Released[i].Holder) < 0 {
			q.Released = slices.Delete(q.Released, i, i+1)
			idle--
			continue
		}
		i++
	}
}
