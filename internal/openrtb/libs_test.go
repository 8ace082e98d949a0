package openrtb_test

import (
	stdjson "encoding/json"
	"os"
	"path/filepath"
	"testing"

	goccy "github.com/goccy/go-json"

	"tsubame/internal/openrtb"
)

// BenchmarkDecode decodes each request of testdata with a Decoder reused
// as the bidder does ("decoder"), with Decode ("decode", a Decoder of its
// own) and, for reference, encoding/json. goccy/go-json, which the Decoder
// replaced, had been chosen by this benchmark over bytedance/sonic
// v1.15.5, json-iterator v1.1.12 and segmentio/encoding v0.5.4 (see the
// commits that added each for their figures).
func BenchmarkDecode(b *testing.B) {
	files, _ := filepath.Glob("testdata/*.json")
	var dec openrtb.Decoder
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, lib := range []struct {
			name   string
			decode func([]byte) error
		}{
			{"decoder", func(body []byte) error { _, err := dec.Decode(body); return err }},
			{"decode", func(body []byte) error { _, err := openrtb.Decode(body); return err }},
			{"goccy-go-json", func(body []byte) error { var r openrtb.BidRequest; return goccy.Unmarshal(body, &r) }},
			{"encoding-json", func(body []byte) error { var r openrtb.BidRequest; return stdjson.Unmarshal(body, &r) }},
		} {
			b.Run(filepath.Base(f)+"/"+lib.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := lib.decode(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
