package tsubame

import (
	"context"
	"time"
)

// MaxHandoverBytes is the largest handover a store keeps.
const MaxHandoverBytes = 16 << 20

// Handovers pass what a stopping node still holds — the money of its bids
// and decisions whose outcome has not come yet — to a node that goes on,
// which settles it as it comes due, so that a restart spends nothing it
// would not have spent. Implementations must be safe for concurrent use.
type Handovers interface {
	// PutHandover keeps data as holder's handover for ttl (at most
	// MaxLeaseTTL), replacing an unclaimed one of holder's.
	PutHandover(ctx context.Context, holder string, data []byte, ttl time.Duration) error
	// ClaimHandover takes a handover not yet claimed and not expired, and
	// returns its holder and data; none: "", nil, nil. Among any number of
	// concurrent claims on any node, each handover goes to exactly one.
	//
	// An error means the store could not tell: a handover may have been
	// taken and lost (its holder's leases then end by their expiry, and
	// count as spent).
	ClaimHandover(ctx context.Context) (holder string, data []byte, err error)
}

// ValidateHandover checks the arguments of PutHandover.
func ValidateHandover(holder string, data []byte, ttl time.Duration) error {
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	switch {
	case len(data) == 0 || len(data) > MaxHandoverBytes:
		return Errorf(EINVALID, "a handover of %d bytes is not 1 to %d", len(data), MaxHandoverBytes)
	case ttl <= 0 || ttl > MaxLeaseTTL:
		return Errorf(EINVALID, "handover ttl %v is not positive and at most %s", ttl, Duration(MaxLeaseTTL))
	}
	return nil
}
