package tsubame

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// FrequencyCounter keeps what counts against the frequency caps of the
// line items a visitor was shown, across every node sharing the store: per
// visitor one record, and in it, per line item, the impressions counted (in
// sliding windows, exact: not hourly buckets, which would let a cap of 3
// per hour pass 3 at 0:59 and 3 more at 1:00) and the holds still open (an
// auction's bids awaiting their win, which count against every cap until
// they are counted or released).
//
// One record per visitor is what lets a request pay one store call for
// all its capped candidates: Read (or an Update that also reads) returns
// the visitor's whole record, and the caller checks any number of line
// items in memory; it then counts or holds the one it serves with an
// Update, which checks the caps again in the store, atomically. A cap is
// per visitor, so it cannot be handed out to nodes in slices ahead of time
// the way a budget can. Implementations must be safe for concurrent use.
type FrequencyCounter interface {
	// Read fills rec with visitor's record (rec.Reset first; rec.Read
	// set): what Update left of each line item, which may include
	// impressions out of their windows and holds ended but not yet
	// dropped (a reader checks against its own now, FrequencyAllows). A
	// visitor never counted reads as a record of no lines. visitor is 1
	// to MaxObjectIDLength bytes, else EINVALID.
	Read(ctx context.Context, visitor string, rec *FrequencyRecord) error
	// Update applies u to u.Visitor's entries of u.LineItem, as
	// ApplyFrequency does, atomically: among concurrent calls for one
	// visitor, on any node sharing the store, none sees another half done,
	// so a cap of 3 lets exactly 3 takes or holds through however many
	// ask at once. It reports the op's answer. When rec is not nil it also
	// fills rec with the visitor's record after the update, in the same
	// call (rec.Read set); a call that fails leaves rec unread.
	//
	// Times are kept to the microsecond (u.Now truncated, each cap's Per
	// rounded up), and two takes at the same instant both count; times
	// later than u.Now count too, so a node whose clock is behind
	// another's cannot pass a cap the other has filled. A visitor's record
	// is kept until the last of its entries stops mattering (u.Expires),
	// so what a store holds is bounded by the impressions within their
	// windows and the holds open. Now is the caller's clock: nodes sharing
	// a store need synchronised clocks (NTP), and a skew between them
	// moves the edges of the windows by as much.
	//
	// An invalid u (ValidateFrequencyUpdate) fails with EINVALID and
	// changes nothing. Any other error means the store could not tell,
	// and the update may or may not be applied: the caller must treat it
	// as a refusal (a capped line item does not serve while its count is
	// unknown).
	Update(ctx context.Context, u *FrequencyUpdate, rec *FrequencyRecord) (bool, error)
}

// FrequencyOp is what an Update does.
type FrequencyOp uint8

// The ops of Update. A hold counts against every cap of its line item from
// when it is made until Until, or until the bid it holds for is counted or
// released, whichever comes first.
const (
	// FrequencyTake counts an impression at Now if every cap allows one
	// more (a direct decision, counted when it is made). Bid, if given,
	// names it.
	FrequencyTake FrequencyOp = iota + 1
	// FrequencyHold holds one impression for Bid until Until if every cap
	// allows one more (an auction's bid, whose impression counts only if
	// it wins). A Bid held or counted before answers true and changes
	// nothing.
	FrequencyHold
	// FrequencyCount counts Bid's impression at Now whatever the caps (it
	// was won: it is shown and paid), ending its hold. It answers false,
	// changing nothing, when Bid was counted before: a repeated win or
	// billing notice counts once.
	FrequencyCount
	// FrequencyRelease ends Bid's hold (the bid lost) and answers whether
	// it was open.
	FrequencyRelease
	// FrequencyCancel ends the impression a take counted for Bid, and
	// answers whether there was one: the take's caller gave up on it (its
	// answer came after the request's deadline), so the impression was
	// never served, and must not count against the visitor's caps.
	// Cancelling a take never made changes nothing.
	FrequencyCancel
)

var frequencyOpNames = [...]string{FrequencyTake: "take", FrequencyHold: "hold", FrequencyCount: "count", FrequencyRelease: "release",
	FrequencyCancel: "cancel"}

// String is the op's name.
func (op FrequencyOp) String() string {
	if op < FrequencyTake || op > FrequencyCancel {
		return "op(" + strconv.Itoa(int(op)) + ")"
	}
	return frequencyOpNames[op]
}

// MaxFrequencyHold is the longest a hold may last: a bid's win comes
// within its reservation, which is shorter.
const MaxFrequencyHold = 24 * time.Hour

// FrequencyUpdate is one Update of a visitor's record.
type FrequencyUpdate struct {
	Op      FrequencyOp
	Visitor string
	// LineItem is the line item whose entries change, and Caps its caps:
	// impressions older than the longest of them are dropped.
	LineItem string
	Caps     []FrequencyCap
	// Bid is the bid or decision the entry is for: required but for a
	// take. It may view the caller's memory, valid for the call only: a
	// store keeps (or sends after the call returns) a copy.
	Bid string
	// Now is when the update is made: a take's or a count's impression
	// time, and the instant windows and holds are measured from.
	Now time.Time
	// Until is when a hold ends if nothing ends it before.
	Until time.Time
}

// ValidateFrequencyUpdate checks u: EINVALID unless its op is one of the
// five, its visitor 1 to MaxObjectIDLength bytes, its line item an id, its
// caps 1 to MaxFrequencyCaps caps of positive Impressions and a Per from a
// microsecond to MaxFrequencyWindow, its bid an id (or empty for a take),
// its Now set, and a hold's Until after Now by at most MaxFrequencyHold.
func ValidateFrequencyUpdate(u *FrequencyUpdate) error {
	switch {
	case u == nil:
		return Errorf(EINVALID, "no frequency update")
	case u.Op < FrequencyTake || u.Op > FrequencyCancel:
		return Errorf(EINVALID, "frequency op %d is not take, hold, count, release or cancel", u.Op)
	case u.Visitor == "" || len(u.Visitor) > MaxObjectIDLength:
		return Errorf(EINVALID, "a visitor of %d bytes is not 1 to %d", len(u.Visitor), MaxObjectIDLength)
	case !validOutcomeID(u.LineItem):
		return Errorf(EINVALID, "frequency line item %q is not 1 to %d id characters", u.LineItem, MaxObjectIDLength)
	case u.Bid == "" && u.Op != FrequencyTake:
		return Errorf(EINVALID, "a frequency %s needs a bid", u.Op)
	case u.Bid != "" && !validOutcomeID(u.Bid):
		return Errorf(EINVALID, "frequency bid %q is not 1 to %d id characters", u.Bid, MaxObjectIDLength)
	case u.Now.IsZero():
		return Errorf(EINVALID, "a frequency update needs its time")
	case u.Op == FrequencyHold && (!u.Until.After(u.Now) || u.Until.Sub(u.Now) > MaxFrequencyHold):
		return Errorf(EINVALID, "a hold until %v is not after %v by at most %s", u.Until, u.Now, Duration(MaxFrequencyHold))
	}
	return ValidateCaps(u.Caps)
}

// ValidateCaps checks the caps of a frequency update: 1 to
// MaxFrequencyCaps caps, each of positive Impressions and a Per from a
// microsecond to MaxFrequencyWindow.
func ValidateCaps(caps []FrequencyCap) error {
	switch {
	case len(caps) == 0:
		return Errorf(EINVALID, "no frequency cap to count against")
	case len(caps) > MaxFrequencyCaps:
		return Errorf(EINVALID, "%d frequency caps, more than %d", len(caps), MaxFrequencyCaps)
	}
	for _, c := range caps {
		if c.Impressions <= 0 {
			return Errorf(EINVALID, "frequency cap of %d impressions is not positive", c.Impressions)
		}
		if d := time.Duration(c.Per); d < time.Microsecond || d > MaxFrequencyWindow {
			return Errorf(EINVALID, "frequency window %v is not from 1µs to %s", d, Duration(MaxFrequencyWindow))
		}
	}
	return nil
}

// ValidateVisitor checks the visitor of a Read: 1 to MaxObjectIDLength
// bytes.
func ValidateVisitor(visitor string) error {
	if visitor == "" || len(visitor) > MaxObjectIDLength {
		return Errorf(EINVALID, "a visitor of %d bytes is not 1 to %d", len(visitor), MaxObjectIDLength)
	}
	return nil
}

// Adds reports whether u's op adds an entry when it answers true (a take,
// a hold, a count): a store then keeps the visitor's record until
// u.Expires at least. A release or a cancel only ends one.
func (u *FrequencyUpdate) Adds() bool {
	return u.Op == FrequencyTake || u.Op == FrequencyHold || u.Op == FrequencyCount
}

// Expires is when what u adds stops mattering, in Unix microseconds: the
// longest window after Now (a take's or a count's impression), or a hold's
// Until if later. A store keeps a visitor's record until the latest
// Expires of the updates that added to it.
func (u *FrequencyUpdate) Expires() int64 {
	e := u.Now.UnixMicro() + LongestFrequencyWindow(u.Caps)
	if u.Op == FrequencyHold {
		e = max(e, u.Until.UnixMicro())
	}
	return e
}

// FrequencyEntry is one entry of a line item in a visitor's record: an
// impression counted at At, or a hold open until At, each in Unix
// microseconds; ID names its bid or decision (empty for a take without
// one).
type FrequencyEntry struct {
	At   int64
	Hold bool
	ID   string
}

// FrequencyLine is a line item's entries in a visitor's record, in the
// order they were added.
type FrequencyLine struct {
	LineItem string
	Entries  []FrequencyEntry
}

// FrequencyRecord is a visitor's record as a FrequencyCounter reads it. A
// caller may keep one across the decisions of one request (so that the
// store is read once) and reuse it for the next after Reset.
type FrequencyRecord struct {
	// Read is set when the record holds a store's answer; Failed when the
	// store could not answer (the caller then treats every capped line
	// item as refused for the rest of the request).
	Read, Failed bool
	Lines        []FrequencyLine
}

// Reset empties rec for another request, keeping its arrays.
func (rec *FrequencyRecord) Reset() {
	rec.Read, rec.Failed = false, false
	for i := range rec.Lines {
		rec.Lines[i].LineItem = ""
		clear(rec.Lines[i].Entries) // the ids are not kept alive by a pooled record
		rec.Lines[i].Entries = rec.Lines[i].Entries[:0]
	}
	rec.Lines = rec.Lines[:0]
}

// AddLine appends an empty line for lineItem (reusing an array a Reset
// left) and returns it: how a store fills a record.
func (rec *FrequencyRecord) AddLine(lineItem string) *FrequencyLine {
	if len(rec.Lines) < cap(rec.Lines) {
		rec.Lines = rec.Lines[:len(rec.Lines)+1]
	} else {
		rec.Lines = append(rec.Lines, FrequencyLine{})
	}
	l := &rec.Lines[len(rec.Lines)-1]
	l.LineItem, l.Entries = lineItem, l.Entries[:0]
	return l
}

// Entries returns lineItem's entries in rec (nil: none).
func (rec *FrequencyRecord) Entries(lineItem string) []FrequencyEntry {
	for i := range rec.Lines {
		if rec.Lines[i].LineItem == lineItem {
			return rec.Lines[i].Entries
		}
	}
	return nil
}

// Allows reports whether rec lets lineItem, capped by caps, serve one more
// impression at now (FrequencyAllows).
func (rec *FrequencyRecord) Allows(lineItem string, caps []FrequencyCap, now time.Time) bool {
	return FrequencyAllows(rec.Entries(lineItem), caps, now.UnixMicro())
}

// Apply applies u to rec as a store applied it (after the Update answered
// true): the caller's copy of the record stays what the store holds.
func (rec *FrequencyRecord) Apply(u *FrequencyUpdate) {
	for i := range rec.Lines {
		if l := &rec.Lines[i]; l.LineItem == u.LineItem {
			l.Entries, _ = ApplyFrequency(l.Entries, u)
			return
		}
	}
	l := rec.AddLine(u.LineItem)
	l.Entries, _ = ApplyFrequency(l.Entries, u)
}

// FrequencyAllows reports whether entries let one more impression through
// caps at now (Unix microseconds): for every cap, fewer than
// cap.Impressions impressions at times after now-cap.Per (later times
// included) and holds open at now, together.
func FrequencyAllows(entries []FrequencyEntry, caps []FrequencyCap, now int64) bool {
	holds := int64(0)
	for _, e := range entries {
		if e.Hold && e.At > now {
			holds++
		}
	}
	for _, c := range caps {
		n, from := holds, now-FrequencyMicros(c.Per)
		for _, e := range entries {
			if !e.Hold && e.At > from {
				n++
			}
		}
		if n >= c.Impressions {
			return false
		}
	}
	return true
}

// ApplyFrequency is Update for a store that keeps a visitor's entries
// itself (in memory, in a file); a store with a server of its own does the
// same there. entries are u.LineItem's; it drops the impressions at or
// before u.Now less the longest window of u.Caps and the holds ended at
// u.Now, then applies u's op (FrequencyOp), and returns the entries to
// keep (in entries's array) and the op's answer. u must have passed
// ValidateFrequencyUpdate.
func ApplyFrequency(entries []FrequencyEntry, u *FrequencyUpdate) ([]FrequencyEntry, bool) {
	now := u.Now.UnixMicro()
	drop := now - LongestFrequencyWindow(u.Caps)
	held, counted := false, false
	n := 0
	for _, e := range entries {
		switch {
		case e.Hold && e.At <= now, !e.Hold && e.At <= drop:
			continue // ended, or out of every window
		case e.Hold && u.Bid != "" && e.ID == u.Bid:
			held = true
			if u.Op == FrequencyCount || u.Op == FrequencyRelease {
				continue
			}
		case !e.Hold && u.Bid != "" && e.ID == u.Bid:
			counted = true
			if u.Op == FrequencyCancel {
				continue
			}
		}
		entries[n] = e
		n++
	}
	clear(entries[n:])
	entries = entries[:n]
	switch u.Op {
	case FrequencyTake:
		if !FrequencyAllows(entries, u.Caps, now) {
			return entries, false
		}
		return append(entries, FrequencyEntry{At: now, ID: u.Bid}), true
	case FrequencyHold:
		if held || counted {
			return entries, true
		}
		if !FrequencyAllows(entries, u.Caps, now) {
			return entries, false
		}
		return append(entries, FrequencyEntry{At: u.Until.UnixMicro(), Hold: true, ID: u.Bid}), true
	case FrequencyCount:
		if counted {
			return entries, false
		}
		return append(entries, FrequencyEntry{At: now, ID: u.Bid}), true
	case FrequencyRelease:
		return entries, held
	case FrequencyCancel:
		return entries, counted
	}
	return entries, false
}

// AppendFrequencyEntries appends the stored form of entries: each an
// impression "i<at>" or a hold "h<at>", then "/<id>" when it has one,
// separated by spaces (ids hold neither '/' nor a space).
func AppendFrequencyEntries(b []byte, entries []FrequencyEntry) []byte {
	for i, e := range entries {
		if i > 0 {
			b = append(b, ' ')
		}
		if e.Hold {
			b = append(b, 'h')
		} else {
			b = append(b, 'i')
		}
		b = strconv.AppendInt(b, e.At, 10)
		if e.ID != "" {
			b = append(append(b, '/'), e.ID...)
		}
	}
	return b
}

// ParseFrequencyEntries appends to dst the entries AppendFrequencyEntries
// wrote in s.
func ParseFrequencyEntries(dst []FrequencyEntry, s string) ([]FrequencyEntry, error) {
	for f := range strings.FieldsSeq(s) {
		var e FrequencyEntry
		switch f[0] {
		case 'i':
		case 'h':
			e.Hold = true
		default:
			return dst, Errorf(EINTERNAL, "stored frequency entry %q is corrupt", f)
		}
		at, id, _ := strings.Cut(f[1:], "/")
		var err error
		if e.At, err = strconv.ParseInt(at, 10, 64); err != nil {
			return dst, Errorf(EINTERNAL, "stored frequency entry %q is corrupt", f)
		}
		e.ID = id
		dst = append(dst, e)
	}
	return dst, nil
}

// FrequencyMicros is a cap's window in the microseconds a record keeps
// times in, rounded up.
func FrequencyMicros(per Duration) int64 {
	return int64((time.Duration(per) + time.Microsecond - 1) / time.Microsecond)
}

// LongestFrequencyWindow is the longest window of caps, in microseconds:
// how long an impression is kept.
func LongestFrequencyWindow(caps []FrequencyCap) int64 {
	var longest int64
	for _, c := range caps {
		longest = max(longest, FrequencyMicros(c.Per))
	}
	return longest
}
