package tsubame

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// OutcomeKind is an event of a bid's life that moves its money: the bid
// (or a decision of /api/decide) holds its price from when it is made,
// and each kind of event either keeps it held, gives it back or spends it.
// It is the one typed money event: the bidder and the tracking routes
// record it, the budget ledger settles by it, and the access log and the
// reports name it the same way.
type OutcomeKind uint8

// The kinds of outcome. Their numbers are stored: never renumber them.
const (
	// OutcomeWin is the exchange's win notice: the bid won its auction,
	// and its price stays held until the bill (it may not be billed: an
	// impression that never renders).
	OutcomeWin OutcomeKind = 1
	// OutcomeLoss is the exchange's loss notice: the bid lost, and its
	// price comes back at once.
	OutcomeLoss OutcomeKind = 2
	// OutcomeBill is the event that spends: the exchange's billing notice,
	// or whichever event bills where it is another (the win notice, the
	// ad's impression). Its price is the clearing price, at most the bid's.
	OutcomeBill OutcomeKind = 3
)

// maxOutcomeKind is the largest kind.
const maxOutcomeKind = OutcomeBill

var outcomeNames = [...]string{OutcomeWin: "win", OutcomeLoss: "loss", OutcomeBill: "bill"}

// String is the kind's name: win, loss, bill.
func (k OutcomeKind) String() string {
	if k == 0 || k > maxOutcomeKind {
		return "outcome(" + strconv.Itoa(int(k)) + ")"
	}
	return outcomeNames[k]
}

// Valid reports whether k is one of the kinds.
func (k OutcomeKind) Valid() bool { return k >= OutcomeWin && k <= maxOutcomeKind }

// OutcomeKinds is a set of kinds: what was recorded of a bid before.
type OutcomeKinds uint8

// Has reports whether k is in the set.
func (s OutcomeKinds) Has(k OutcomeKind) bool { return k.Valid() && s&(1<<k) != 0 }

// With returns the set with k added.
func (s OutcomeKinds) With(k OutcomeKind) OutcomeKinds { return s | 1<<k }

// Outcome is one event of one bid, as the node holding the bid's money
// learns it.
type Outcome struct {
	Kind OutcomeKind
	// Bid is the bid's (or decision's) id, unique among all bids.
	Bid string
	// LineItem is the line item whose money the bid holds.
	LineItem string
	// Due is when the bid's hold ends, in Unix seconds: with LineItem it
	// finds what holds the bid's money.
	Due int64
	// Price is, for a bill, the clearing price as a CPM in micro-units of
	// the account's currency (one impression costs Price/1000): at most
	// the bid's. 0 for a win or a loss: a loss notice's clearing price is
	// another buyer's, never spent here.
	Price Money
	// Before is what was recorded of the bid before this outcome (set by
	// Outcomes.Record): a bill of a bid that won, a loss after a win.
	Before OutcomeKinds
}

// Limits of an Outcome's fields.
const (
	// MaxHolderLength is the longest holder an Outcomes call accepts:
	// a ledger's holder (MaxQuotaHolderLength).
	MaxHolderLength = MaxQuotaHolderLength
	// MaxOutcomeTTL is the longest a bid's outcomes are remembered.
	MaxOutcomeTTL = 7 * 24 * time.Hour
	// MaxOutcomesBatch is the most outcomes one Collect returns.
	MaxOutcomesBatch = 4096
)

// Outcomes records the outcomes of bids, each once across every node
// sharing the store, for the node holding each bid's money (its holder),
// which collects them. Implementations must be safe for concurrent use.
//
// Why a queue per holder: a bid's notices come to any node, often not the
// one that bid, and the money of a bid that lost must come back at once
// where it is held. A queue costs the recording node one store call
// (with the dedupe) and the holder one call per round for all of its
// bids, and keeps nothing per bid on the holder but its share of a
// bucket's counts.
type Outcomes interface {
	// Record records o for holder and reports whether it is the first of
	// its kind for o.Bid within ttl (from this call): then, and only
	// then, o joins holder's queue, with o.Before set to the kinds of
	// o.Bid recorded before it. Among any number of concurrent calls for
	// one kind of one bid, on any node, exactly one returns true. A
	// repeat records nothing and returns false, and the *o of a repeat is
	// left as it was.
	//
	// An error means the store could not tell, and o may or may not be
	// recorded: the caller must not retry to get an answer, and counts
	// the event as not recorded.
	Record(ctx context.Context, holder string, o *Outcome, ttl time.Duration) (bool, error)
	// Collect returns up to max of holder's recorded outcomes, oldest
	// first, without removing them: Ack does, once the holder has applied
	// them. Until then a Collect returns them again. Only the holder
	// collects its queue.
	Collect(ctx context.Context, holder string, max int) ([]Outcome, error)
	// Ack removes the first n outcomes of holder's queue (those a Collect
	// returned). n may be 0. Removing more than the queue holds empties
	// it.
	Ack(ctx context.Context, holder string, n int) error
}

// ValidateOutcome checks the arguments of a Record: EINVALID unless holder
// is 1 to MaxHolderLength bytes without '|', o's kind is valid, its bid and
// line item are ids (IDChar, 1 to MaxObjectIDLength bytes), its price is
// not negative and is 0 but for a bill, and ttl is from a second to
// MaxOutcomeTTL.
func ValidateOutcome(holder string, o *Outcome, ttl time.Duration) error {
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	switch {
	case o == nil:
		return Errorf(EINVALID, "no outcome")
	case !o.Kind.Valid():
		return Errorf(EINVALID, "outcome kind %d is not win, loss or bill", o.Kind)
	case !validOutcomeID(o.Bid):
		return Errorf(EINVALID, "outcome bid id %q is not 1 to %d id characters", o.Bid, MaxObjectIDLength)
	case !validOutcomeID(o.LineItem):
		return Errorf(EINVALID, "outcome line item id %q is not 1 to %d id characters", o.LineItem, MaxObjectIDLength)
	case o.Price < 0 || o.Price > MaxCPM:
		return Errorf(EINVALID, "outcome price %d is not from 0 to %d", o.Price, MaxCPM)
	case o.Price != 0 && o.Kind != OutcomeBill:
		return Errorf(EINVALID, "a %s carries no price", o.Kind)
	case ttl < time.Second || ttl > MaxOutcomeTTL:
		return Errorf(EINVALID, "outcome ttl %v is not from 1s to %s", ttl, Duration(MaxOutcomeTTL))
	}
	return nil
}

// ValidateHolder checks a holder of Outcomes: EINVALID unless it is 1 to
// MaxHolderLength bytes without '|' (the stores' separator).
func ValidateHolder(holder string) error {
	switch {
	case holder == "":
		return Errorf(EINVALID, "empty outcome holder")
	case len(holder) > MaxHolderLength:
		return Errorf(EINVALID, "outcome holder of %d bytes is longer than %d", len(holder), MaxHolderLength)
	case strings.ContainsRune(holder, '|'):
		return Errorf(EINVALID, "outcome holder %q holds a '|'", holder)
	}
	return nil
}

// ValidateCollect checks the arguments of a Collect.
func ValidateCollect(holder string, max int) error {
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	if max < 1 || max > MaxOutcomesBatch {
		return Errorf(EINVALID, "collect of %d outcomes is not from 1 to %d", max, MaxOutcomesBatch)
	}
	return nil
}

func validOutcomeID(id string) bool { return validObjectID(id) == "" }

// OutcomeKey is the id under which kind's event of bid is recorded once:
// "<kind>:<bid>" ("bill:01M8…"), the id the access log's event line carries.
func OutcomeKey(kind OutcomeKind, bid string) string { return kind.String() + ":" + bid }

// AppendOutcome appends o's stored form: its kind, what came before, due,
// price, line item and bid, separated by '|' (ids hold none).
func AppendOutcome(b []byte, o *Outcome) []byte {
	b = strconv.AppendUint(b, uint64(o.Kind), 10)
	b = append(b, '|')
	b = strconv.AppendUint(b, uint64(o.Before), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, o.Due, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(o.Price), 10)
	b = append(b, '|')
	b = append(b, o.LineItem...)
	b = append(b, '|')
	return append(b, o.Bid...)
}

// ParseOutcome reads what AppendOutcome wrote.
func ParseOutcome(s string) (Outcome, error) {
	var o Outcome
	f := strings.SplitN(s, "|", 6)
	if len(f) != 6 {
		return o, Errorf(EINTERNAL, "stored outcome %q has %d fields, not 6", s, len(f))
	}
	k, err1 := strconv.ParseUint(f[0], 10, 8)
	before, err2 := strconv.ParseUint(f[1], 10, 8)
	due, err3 := strconv.ParseInt(f[2], 10, 64)
	price, err4 := strconv.ParseInt(f[3], 10, 64)
	o = Outcome{Kind: OutcomeKind(k), Before: OutcomeKinds(before), Due: due, Price: Money(price), LineItem: f[4], Bid: f[5]}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !o.Kind.Valid() || !validOutcomeID(o.Bid) || !validOutcomeID(o.LineItem) {
		return Outcome{}, Errorf(EINTERNAL, "stored outcome %q is corrupt", s)
	}
	return o, nil
}
