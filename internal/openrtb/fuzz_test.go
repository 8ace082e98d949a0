package openrtb_test

import (
	"os"
	"path/filepath"
	"testing"

	"tsubame/internal/openrtb"
)

// FuzzDecode: whatever the body, Decode returns a request that keeps its
// promises or an error, and never panics. Seeded with testdata's requests.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"1","imp":[{"id":"1","bidfloor":"1e-9"}]}`))
	f.Add([]byte(`{"id":"1","imp":[{"id":"1"}],"regs":{"coppa":true,"gdpr":"1","gpp_sid":[-1,"7"],"ext":{"us_privacy":1}},"user":{"ext":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := openrtb.Decode(body)
		if err != nil {
			if r != nil {
				t.Fatal("a request returned with an error")
			}
			return
		}
		if r.ID == "" || len(r.ID) > openrtb.MaxIDLength || len(r.Imp) == 0 || len(r.Imp) > openrtb.MaxImps {
			t.Fatalf("accepted %q with %d imps", r.ID, len(r.Imp))
		}
		seen := map[string]bool{}
		for _, imp := range r.Imp {
			if imp.ID == "" || seen[imp.ID] || imp.BidFloor < 0 {
				t.Fatalf("accepted imp %+v", imp)
			}
			seen[imp.ID] = true
			if imp.Pmp != nil {
				for _, d := range imp.Pmp.Deals {
					if d.BidFloor < 0 {
						t.Fatalf("accepted deal %+v", d)
					}
				}
			}
		}
	})
}
