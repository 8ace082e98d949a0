package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"tsubame"
)

// RunAssets runs the Assets part of the suite. open returns two handles on
// the same, empty data, as two nodes sharing the store would hold them.
func RunAssets(t *testing.T, open func(t *testing.T) (a, b tsubame.Assets)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, a, b tsubame.Assets)
	}{
		{"PutOnOneGetOnOther", testAssetShared},
		{"ConcurrentPutsOfOneName", testAssetRace},
		{"RejectsInvalid", testAssetInvalid},
	} {
		t.Run("Assets"+tc.name, func(t *testing.T) {
			a, b := open(t)
			tc.test(t, a, b)
		})
	}
}

func newAsset(contentType string, data []byte) *tsubame.Asset {
	return &tsubame.Asset{SHA256: tsubame.AssetSum(data), ContentType: contentType, Data: data}
}

func testAssetShared(t *testing.T, a, b tsubame.Assets) {
	data := bytes.Repeat([]byte("\x89PNG\r\n\x1a\n\x00\nx"), 100_000) // newlines and zero bytes, over a MiB
	asset := newAsset("image/png", data)
	if _, err := b.GetAsset(ctx(t), asset.SHA256); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Fatalf("GetAsset of a name never put: %v, want ENOTFOUND", err)
	}
	if err := a.PutAsset(ctx(t), asset); err != nil {
		t.Fatal(err)
	}
	if err := a.PutAsset(ctx(t), asset); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	got, err := b.GetAsset(ctx(t), asset.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != asset.SHA256 || got.ContentType != "image/png" || !bytes.Equal(got.Data, data) {
		t.Fatalf("got %s %s with %d bytes, want %s image/png with %d", got.SHA256, got.ContentType, len(got.Data), asset.SHA256, len(data))
	}
	got.Data[0] = 'X' // the caller's: the store's copy stays
	again, err := a.GetAsset(ctx(t), asset.SHA256)
	if err != nil || !bytes.Equal(again.Data, data) {
		t.Fatalf("a returned asset's bytes were the store's: %v", err)
	}
}

func testAssetRace(t *testing.T, a, b tsubame.Assets) {
	asset := newAsset("video/webm", []byte("\x1a\x45\xdf\xa3 webm"))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() { errs <- []tsubame.Assets{a, b}[i%2].PutAsset(ctx(t), asset) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.GetAsset(ctx(t), asset.SHA256)
	if err != nil || got.ContentType != "video/webm" || !bytes.Equal(got.Data, asset.Data) {
		t.Fatalf("after concurrent puts: %+v, %v", got, err)
	}
}

func testAssetInvalid(t *testing.T, a, _ tsubame.Assets) {
	good := []byte("GIF89a")
	for i, bad := range []*tsubame.Asset{
		nil,
		{SHA256: tsubame.AssetSum(nil), ContentType: "image/gif"},                         // no bytes
		{SHA256: tsubame.AssetSum([]byte("other")), ContentType: "image/gif", Data: good}, // not its hash
		{SHA256: "ABC", ContentType: "image/gif", Data: good},
		{SHA256: tsubame.AssetSum(good), ContentType: "image/gif\nx", Data: good},
		{SHA256: tsubame.AssetSum(good), ContentType: "", Data: good},
		{SHA256: tsubame.AssetSum(good), ContentType: "text/html; charset=utf-8", Data: good},
	} {
		if err := a.PutAsset(ctx(t), bad); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("asset %d: PutAsset answers %v, want EINVALID", i, err)
		}
	}
	for _, name := range []string{"", "x", tsubame.AssetSum(good)[:63] + "G", "../" + tsubame.AssetSum(good)[3:]} {
		if _, err := a.GetAsset(ctx(t), name); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("GetAsset(%q) answers %v, want EINVALID", name, err)
		}
	}
	if _, err := a.GetAsset(ctx(t), fmt.Sprintf("%064x", 7)); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Errorf("GetAsset of an unknown name answers %v, want ENOTFOUND", err)
	}
}
