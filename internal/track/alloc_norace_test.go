//go:build !race

package track_test

import (
	"testing"

	"tsubame/internal/track"
)

// TestNoticeSignerAllocations holds a bid's notice and click tokens to no
// allocation (not under -race, whose sync.Pool drops the MAC's hashes on
// purpose; make test runs it again without).
func TestNoticeSignerAllocations(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindWin)
	buf := make([]byte, 0, 4*track.MaxTokenLen)
	sign := func() {
		ns, err := s.Notices(tk)
		if err != nil {
			t.Fatal(err)
		}
		out := buf[:0]
		for _, kind := range [...]track.Kind{track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
			if out, err = ns.AppendSign(out, kind); err != nil {
				t.Fatal(err)
			}
		}
		if _, err = ns.AppendClick(out, "https://advertiser.example/landing"); err != nil {
			t.Fatal(err)
		}
		ns.Close()
	}
	sign() // fill the pools
	if n := testing.AllocsPerRun(100, sign); n != 0 {
		t.Errorf("%v allocations a bid's notices", n)
	}
}
