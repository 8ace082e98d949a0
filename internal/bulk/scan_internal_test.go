package bulk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tsubame/internal/campaigngen"
)

// The decoder's scanner splits valid JSON as encoding/json reads it:
// strings holding quotes, brackets, braces and commas, escaped keys,
// nested values and every kind of space.
func TestScannerSplitsValidJSON(t *testing.T) {
	obj := []byte("{ \"a\\\"]}\" : \"x,}]\\\\\" ,\n\"b\":[1, {\"c\":[true,null]} ,\"]\"],\t\"\\u0064\": -1.5e3 ,\"e\":{}}")
	var want map[string]json.RawMessage
	if err := json.Unmarshal(obj, &want); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	eachMember(obj, func(key string, off int, val []byte) {
		if !bytes.Equal(obj[off:off+len(val)], val) {
			t.Errorf("member %q: offset %d does not hold its value", key, off)
		}
		got[key] = string(val)
	})
	if len(got) != len(want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != string(v) {
			t.Errorf("member %q = %s, want %s", k, got[k], v)
		}
	}
	arr := []byte(`[ "a,]" , [1,[2]], {"x":"}"} ,3 ,false]`)
	var wantArr []json.RawMessage
	if err := json.Unmarshal(arr, &wantArr); err != nil {
		t.Fatal(err)
	}
	els := elements(arr)
	if len(els) != len(wantArr) {
		t.Fatalf("%d elements, want %d", len(els), len(wantArr))
	}
	for i, e := range els {
		if string(e.raw) != string(wantArr[i]) || !bytes.Equal(arr[e.off:e.off+len(e.raw)], e.raw) {
			t.Errorf("element %d = %s at %d, want %s", i, e.raw, e.off, wantArr[i])
		}
	}
	if id := peekID([]byte(`{"x":{"id":"no"},"id":"li-\"1\""}`)); id != `li-"1"` {
		t.Errorf("peekID = %q", id)
	}
}

// A large file keeps the lines of its objects only (not of every field:
// a million line items would keep tens of millions of paths), and a
// problem deep in one still names its line.
func TestLargeFileKeepsObjectLines(t *testing.T) {
	set := campaigngen.Set(1, campaigngen.Size{LineItems: 20_000}, time.Now())
	set.LineItems[12345].Targeting.Countries = []string{"jp"}
	text, err := json.MarshalIndent(set, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadCampaigns(bytes.NewReader(text), "big.json", CampaignsJSON)
	if err != nil {
		t.Fatal(err)
	}
	if n, objects := len(f.lines), set.Len(); n > objects+8 {
		t.Fatalf("%d lines kept for %d objects", n, objects)
	}
	_, err = f.Resolve(nil, true)
	want := fmt.Sprintf(`line_items[12345] (id %q).targeting.countries[0]`, set.LineItems[12345].ID)
	line := 1 + bytes.Count(text[:bytes.Index(text, []byte(`"jp"`))], []byte("\n"))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprintf("big.json:%d: %s", line, want))) {
		t.Fatalf("error %v, want one naming big.json:%d: %s", err, line, want)
	}
}
