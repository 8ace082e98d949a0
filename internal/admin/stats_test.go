package admin

import (
	"runtime"
	"testing"
)

// heapBytes reads what the dashboard showed from runtime.ReadMemStats
// (HeapAlloc) without stopping the world: the same figure, which grows
// with what the program holds.
func TestHeapBytesIsHeapAlloc(t *testing.T) {
	const held = 64 << 20
	keep := make([]byte, held)
	keep[len(keep)-1] = 1
	got := heapBytes()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(keep)
	if got < held {
		t.Fatalf("heapBytes = %d with %d bytes held", got, held)
	}
	// Read back to back: only what this goroutine and the runtime
	// allocated between the two reads tells them apart.
	const slack = 4 << 20
	if diff := int64(ms.HeapAlloc) - int64(got); diff < -slack || diff > slack {
		t.Errorf("heapBytes = %d, ReadMemStats' HeapAlloc = %d", got, ms.HeapAlloc)
	}
}
