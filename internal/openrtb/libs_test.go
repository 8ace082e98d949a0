package openrtb_test

import (
	stdjson "encoding/json"
	"os"
	"path/filepath"
	"testing"

	"tsubame/internal/openrtb"
)

// BenchmarkDecode decodes each request of testdata with the decoder in
// use (Decode: goccy/go-json) and, for reference, encoding/json. The
// decoder was chosen by this benchmark over bytedance/sonic v1.15.5,
// json-iterator v1.1.12 and segmentio/encoding v0.5.4 (see the commit that
// added it for their figures).
func BenchmarkDecode(b *testing.B) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, lib := range []struct {
			name   string
			decode func([]byte) error
		}{
			{"tsubame", func(body []byte) error { _, err := openrtb.Decode(body); return err }},
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
