package tsubame

import (
	"context"
	"slices"
	"time"
)

// MaxFrequencyKeyLength is the longest key a FrequencyCounter accepts, in
// bytes: a line item id and a visitor id, each at most MaxObjectIDLength,
// and the separator (FrequencyKey).
const MaxFrequencyKeyLength = 2*MaxObjectIDLength + 1

// FrequencyCounter counts a visitor's impressions of a line item in sliding
// windows, so that its frequency caps hold across every node sharing the
// store. A cap is per visitor, so it cannot be handed out in slices ahead
// of time the way a budget can: each capped decision costs one atomic
// operation in the store. Implementations must be safe for concurrent use.
type FrequencyCounter interface {
	// Take records one impression for key at now if, for every cap, fewer
	// than cap.Impressions are recorded at times after now-cap.Per (a
	// sliding window, exact: not hourly buckets, which would let a cap
	// of 3 per hour pass 3 at 0:59 and 3 more at 1:00); otherwise it
	// records nothing and returns false. Times later than now count too,
	// so a node whose clock is behind another's cannot pass a cap the
	// other has filled. Among concurrent calls for one key, on any node
	// sharing the store, no two pass a cap together: a cap of 3 lets
	// exactly 3 through however many ask at once.
	//
	// Times are kept to the microsecond (now truncated, each Per rounded
	// up), and two calls at the same instant both count. A key's times
	// are kept no longer than its longest window after the last one, so
	// what a store holds is bounded by the impressions within the
	// windows. now is the caller's clock: nodes sharing a store need
	// synchronised clocks (NTP), and a skew between them moves the edges
	// of the windows by as much.
	//
	// key is 1 to MaxFrequencyKeyLength bytes (FrequencyKey) and caps are
	// 1 to MaxFrequencyCaps caps with positive Impressions and Per up to
	// MaxFrequencyWindow; otherwise Take fails with EINVALID
	// (ValidateTake) and records nothing. The caps are the line item's:
	// times older than the longest of them are dropped.
	//
	// An error means the store could not tell, and the impression may or
	// may not be recorded: the caller must treat it as false (a capped
	// line item does not serve while its count is unknown).
	Take(ctx context.Context, key string, caps []FrequencyCap, now time.Time) (bool, error)
}

// FrequencyKey is the key a FrequencyCounter counts a visitor's
// impressions of a line item under. A line item id is IDChar, which has no
// '/', so the key names one pair; with a visitor id of at most
// MaxObjectIDLength bytes it is at most MaxFrequencyKeyLength bytes.
func FrequencyKey(lineItemID, visitor string) string {
	return lineItemID + "/" + visitor
}

// ValidateTake checks the arguments of a Take call: an EINVALID error
// unless key is 1 to MaxFrequencyKeyLength bytes and caps are 1 to
// MaxFrequencyCaps caps, each of positive Impressions and a Per from a
// microsecond to MaxFrequencyWindow.
func ValidateTake(key string, caps []FrequencyCap) error {
	switch {
	case key == "":
		return Errorf(EINVALID, "empty frequency key")
	case len(key) > MaxFrequencyKeyLength:
		return Errorf(EINVALID, "frequency key of %d bytes is longer than %d", len(key), MaxFrequencyKeyLength)
	case len(caps) == 0:
		return Errorf(EINVALID, "no frequency cap to take against")
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

// FrequencyMicros is a cap's window in the microseconds Take keeps times
// in, rounded up.
func FrequencyMicros(per Duration) int64 {
	return int64((time.Duration(per) + time.Microsecond - 1) / time.Microsecond)
}

// LongestFrequencyWindow is the longest window of caps, in microseconds:
// how long a key's last time is kept.
func LongestFrequencyWindow(caps []FrequencyCap) int64 {
	var longest int64
	for _, c := range caps {
		longest = max(longest, FrequencyMicros(c.Per))
	}
	return longest
}

// TakeFrequency is Take for a store that keeps a key's times itself (in
// memory, in a file); a store with a server of its own does the same
// there. times are the key's, in Unix microseconds, ascending; now is
// too. It drops the times at or before now less the longest window, then,
// if every cap allows one more, inserts now in order. It returns the times
// to keep (in times's array when it has room) and whether now was taken.
// The arguments must have passed ValidateTake.
func TakeFrequency(times []int64, caps []FrequencyCap, now int64) ([]int64, bool) {
	drop, _ := slices.BinarySearch(times, now-LongestFrequencyWindow(caps)+1)
	times = times[:copy(times, times[drop:])]
	for _, c := range caps {
		after, _ := slices.BinarySearch(times, now-FrequencyMicros(c.Per)+1)
		if int64(len(times)-after) >= c.Impressions {
			return times, false
		}
	}
	at, _ := slices.BinarySearch(times, now+1) // after its equals: order is kept
	return slices.Insert(times, at, now), true
}
