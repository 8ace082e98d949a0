package tsubame_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
)

func TestValidateTake(t *testing.T) {
	id := strings.Repeat("x", tsubame.MaxObjectIDLength)
	longest := tsubame.FrequencyKey(id, id)
	hour := []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}}
	for _, tc := range []struct {
		key  string
		caps []tsubame.FrequencyCap
		code string
	}{
		{"li-1/u-1", hour, ""},
		{longest, hour, ""},
		{"k", []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Microsecond)}, {Impressions: 1 << 40, Per: tsubame.Duration(tsubame.MaxFrequencyWindow)}}, ""},
		{"", hour, tsubame.EINVALID},
		{longest + "x", hour, tsubame.EINVALID},
		{"k", nil, tsubame.EINVALID},
		{"k", slices.Repeat(hour, tsubame.MaxFrequencyCaps+1), tsubame.EINVALID},
		{"k", []tsubame.FrequencyCap{{Impressions: 0, Per: tsubame.Duration(time.Hour)}}, tsubame.EINVALID},
		{"k", []tsubame.FrequencyCap{{Impressions: -1, Per: tsubame.Duration(time.Hour)}}, tsubame.EINVALID},
		{"k", []tsubame.FrequencyCap{{Impressions: 1, Per: 0}}, tsubame.EINVALID},
		{"k", []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Nanosecond)}}, tsubame.EINVALID},
		{"k", []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(tsubame.MaxFrequencyWindow + time.Second)}}, tsubame.EINVALID},
	} {
		err := tsubame.ValidateTake(tc.key, tc.caps)
		if got := tsubame.ErrorCode(err); got != tc.code {
			t.Errorf("ValidateTake(%d-byte key, %v) = %v, want code %q", len(tc.key), tc.caps, err, tc.code)
		}
	}
	if len(longest) != tsubame.MaxFrequencyKeyLength {
		t.Errorf("the key of two longest ids is %d bytes, MaxFrequencyKeyLength %d", len(longest), tsubame.MaxFrequencyKeyLength)
	}
}

// Keys of different pairs differ: no id holds the separator.
func TestFrequencyKeyNamesOnePair(t *testing.T) {
	if strings.ContainsFunc("/", func(r rune) bool { return tsubame.IDChar(byte(r)) }) {
		t.Fatal("the separator is an id character")
	}
	seen := map[string][2]string{}
	for _, line := range []string{"a", "a.b", "a:b", "li-1"} {
		for _, user := range []string{"b", "b.c", "x@y", "li-1"} {
			k := tsubame.FrequencyKey(line, user)
			if p, ok := seen[k]; ok {
				t.Fatalf("%q is the key of %v and of %v", k, p, [2]string{line, user})
			}
			seen[k] = [2]string{line, user}
		}
	}
}

// TakeFrequency's window is (now-per, now] and beyond: a time exactly one
// window old no longer counts, a later one does; times at or before now
// less the longest window are dropped, the rest kept in order.
func TestTakeFrequencyWindows(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	caps := []tsubame.FrequencyCap{{Impressions: 2, Per: tsubame.Duration(time.Second)}, {Impressions: 3, Per: tsubame.Duration(time.Hour)}}
	var times []int64
	steps := []struct {
		now  int64
		want bool
		kept []int64
	}{
		{10 * s, true, []int64{10 * s}},
		{10 * s, true, []int64{10 * s, 10 * s}},
		{10 * s, false, []int64{10 * s, 10 * s}},           // 2 per second
		{11*s - 1, false, []int64{10 * s, 10 * s}},         // still within the second
		{11 * s, true, []int64{10 * s, 10 * s, 11 * s}},    // the second has slid past 10 s
		{12 * s, false, []int64{10 * s, 10 * s, 11 * s}},   // 3 per hour
		{5 * s, false, []int64{10 * s, 10 * s, 11 * s}},    // a clock behind counts the later times
		{3610 * s, true, []int64{11 * s, 3610 * s}},        // 10 s is one hour old: dropped
		{3611 * s, true, []int64{3610 * s, 3611 * s}},      // so is 11 s
		{3610*s + s/2, false, []int64{3610 * s, 3611 * s}}, // 2 within the second before 3610.5 s and after
	}
	for i, st := range steps {
		var ok bool
		times, ok = tsubame.TakeFrequency(times, caps, st.now)
		if ok != st.want || !slices.Equal(times, st.kept) {
			t.Fatalf("step %d at %dµs: %v with %v kept, want %v with %v", i, st.now, ok, times, st.want, st.kept)
		}
	}
	// A time is inserted in order, after its equals.
	times, ok := tsubame.TakeFrequency([]int64{1, 5, 9}, []tsubame.FrequencyCap{{Impressions: 9, Per: tsubame.Duration(time.Hour)}}, 5)
	if !ok || !slices.Equal(times, []int64{1, 5, 5, 9}) {
		t.Fatalf("insert: %v, %v", ok, times)
	}
	if got := tsubame.FrequencyMicros(tsubame.Duration(1500 * time.Nanosecond)); got != 2 {
		t.Fatalf("1.5µs is %dµs, want 2 (rounded up)", got)
	}
}
