package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
)

// failingList is a store whose List fails for the pages after the id
// failFrom ("": every page).
type failingList struct {
	tsubame.Store
	failFrom atomic.Pointer[string]
}

func (f *failingList) List(ctx context.Context, after string, limit int) ([]*tsubame.Placement, error) {
	if after >= *f.failFrom.Load() {
		return nil, tsubame.Errorf(tsubame.EUNAVAILABLE, "store down")
	}
	return f.Store.List(ctx, after, limit)
}

// GET /api/v1/export answers what bulk.Write writes; a store that fails
// before the answer begins is a plain error, one that fails after it cuts
// the connection, so that the client cannot take the export as whole.
func TestPlacementExport(t *testing.T) {
	var fail *failingList
	h := newHarness(t, true, func(o *Options) {
		fail = &failingList{Store: o.Placements}
		never := "\xff"
		fail.failFrom.Store(&never)
		o.Placements = fail
	})
	token, _, err := h.accounts.CreateToken(testUser, "export", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + token}
	var ps []*tsubame.Placement
	for i := range 1500 {
		ps = append(ps, &tsubame.Placement{ID: fmt.Sprintf("p%04d", i), URLs: []string{"https://ad.example.com/t.js"}})
	}
	if err := h.store.PutMany(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if _, err := bulk.Write(t.Context(), &want, h.store); err != nil {
		t.Fatal(err)
	}
	if r := h.do("GET", "/api/v1/export", nil, auth...); r.status != 200 || string(r.body) != want.String() {
		t.Fatalf("export: %d, %d bytes, want %d", r.status, len(r.body), want.Len())
	}

	fail.failFrom.Store(new(string))
	if r := h.do("GET", "/api/v1/export", nil, auth...); r.status != 503 || !strings.Contains(string(r.body), "store down") {
		t.Errorf("a store down from the start: %d %s", r.status, r.body)
	}
	second := "p0999"
	fail.failFrom.Store(&second)
	req, _ := http.NewRequest("GET", h.base+"/api/v1/export", nil)
	req.Header.Set(auth[0], auth[1])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	if res.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a store failing mid-way: %d, reading: %v, want an unexpected EOF", res.StatusCode, err)
	}
}
