//go:build !race

package openrtb_test

import (
	"testing"

	"tsubame/internal/openrtb"
)

// AppendRequest allocates nothing into a buffer that has room, exts
// included (the race detector's sync.Pool drops the scanner json.Valid
// reuses: hence !race).
func TestAppendRequestAllocatesNothing(t *testing.T) {
	r := fullRequest()
	buf := make([]byte, 0, 16<<10)
	if n := testing.AllocsPerRun(100, func() { sink = openrtb.AppendRequest(buf[:0], r) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
