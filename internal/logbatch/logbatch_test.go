package logbatch

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func lines(d *Decoder, stored []byte) ([]string, error) {
	var got []string
	err := d.Each(stored, func(l []byte) error { got = append(got, string(l)); return nil })
	return got, err
}

func batch(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "time:2026-11-22T06:00:00.%06dZ\thost:127.0.0.1\tmethod:GET\turi:/api/sample5.js?id=%d&callback=Example.process\tstatus:200\tsize:95\n", i, i%1000)
	}
	return []byte(b.String())
}

func TestRoundTripAndPlainBatches(t *testing.T) {
	var d Decoder
	var dst []byte
	for _, n := range []int{0, 1, 10, 20000} {
		in := batch(n)
		dst = Compress(dst, in)
		got, err := lines(&d, dst)
		if err != nil {
			t.Fatalf("%d lines: %v", n, err)
		}
		want := strings.Split(strings.TrimSuffix(string(in), "\n"), "\n")
		if n == 0 {
			want = nil
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
			t.Fatalf("%d lines: got %d back", n, len(got))
		}
		if n == 20000 && len(dst)*5 > len(in) {
			t.Errorf("20,000 log lines compressed only from %d to %d bytes", len(in), len(dst))
		}
	}
	// Batches stored before compression (or by another writer) are lines.
	got, err := lines(&d, []byte("a\nb\n"))
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("plain batch: %q, %v", got, err)
	}
}

func TestCorruptBatchesRefused(t *testing.T) {
	good := Compress(nil, batch(100))
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		return b
	}
	for name, stored := range map[string][]byte{
		"truncated header": good[:6],
		"other version":    flip(4),
		"checksum":         flip(6),
		"block cut short":  good[:len(good)-3],
		"block damaged":    flip(len(good) - 5),
	} {
		var d Decoder
		called := 0
		err := d.Each(stored, func([]byte) error { called++; return nil })
		if !errors.Is(err, ErrCorrupt) || called != 0 {
			t.Errorf("%s: err %v after %d lines, want ErrCorrupt before any", name, err, called)
		}
	}
}

func BenchmarkCompress(b *testing.B) {
	in := batch(10000) // ~1.3 MB: 100 ms of sample5 at ~100k req/s
	var dst []byte
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		dst = Compress(dst, in)
	}
	b.ReportMetric(float64(len(in))/float64(len(dst)), "ratio")
}

func TestEachLine(t *testing.T) {
	for in, want := range map[string][]string{
		"":           nil,
		"a\n":        {"a"},
		"a\nb\n":     {"a", "b"},
		"a\n\nb":     {"a", "", "b"},
		"no newline": {"no newline"},
	} {
		var got []string
		if err := EachLine([]byte(in), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("EachLine(%q) = %q, want %q", in, got, want)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := EachLine([]byte("a\nb\nc\n"), func([]byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("did not stop at the first error: %v after %d", err, n)
	}
}
