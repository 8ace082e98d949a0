package admin

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"

	"tsubame"
	"tsubame/internal/asset"
)

// Uploads of creatives' files: POST /api/v1/assets, an editor's write
// audited as asset.upload. The body is the file itself (any Content-Type:
// the type is read from the bytes, internal/asset) or a multipart form
// whose first file part is it. The file is kept in the store under the
// SHA-256 of its bytes, which every node serves on the public listener at
// /assets/<sha256>.<ext>, and the answer gives that URL, for a creative's
// image or media, with an image's size read from its header.

// multipartSlack is what a multipart form may add to the file it carries:
// its boundaries and part headers.
const multipartSlack = 64 << 10

// limitSettings name the limits of an upload's size.
const limitSettings = "ads.assets.max_image_bytes, ads.assets.max_video_bytes"

// errNoAssetStore answers uploads on a server given no asset store.
var errNoAssetStore = tsubame.Errorf(tsubame.ENOTFOUND, "uploads need a store that keeps files, and this server's store does not")

// uploadAnswer is POST /api/v1/assets's answer.
type uploadAnswer struct {
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	W           int    `json:"w,omitempty"`
	H           int    `json:"h,omitempty"`
	Bytes       int    `json:"bytes"`
	Video       bool   `json:"video"`
	// BaseNote says where the URL's scheme and host came from.
	BaseNote string `json:"base_note"`
}

func (s *Server) assetRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/assets", s.requireRole(RoleEditor, s.uploadAsset))
}

// uploadAsset keeps the request's file and answers where it is served.
func (s *Server) uploadAsset(w http.ResponseWriter, r *http.Request) {
	const action = "asset.upload"
	if s.opt.Assets == nil {
		s.done(w, r, action, "", errNoAssetStore)
		return
	}
	lim := s.opt.AssetLimits
	data, err := readUpload(w, r, lim.Max())
	var info asset.Info
	if err == nil {
		info, err = asset.Check(data, lim)
	}
	a := &tsubame.Asset{SHA256: tsubame.AssetSum(data), ContentType: info.ContentType, Data: data}
	if err == nil {
		err = s.opt.Assets.PutAsset(r.Context(), a)
	}
	if err != nil {
		s.done(w, r, action, "", err)
		return
	}
	var setup TagSetup
	if s.opt.Tags != nil {
		setup = s.opt.Tags()
	}
	base, note := publicBase(r, setup)
	ans := uploadAnswer{URL: base + asset.Path + a.SHA256 + "." + info.Ext, SHA256: a.SHA256, ContentType: info.ContentType,
		W: info.W, H: info.H, Bytes: len(data), Video: info.Video, BaseNote: note}
	detail := fmt.Sprintf("%s, %d bytes", info.ContentType, len(data))
	if info.W > 0 {
		detail = fmt.Sprintf("%s %d×%d, %d bytes", info.ContentType, info.W, info.H, len(data))
	}
	s.audit(r, identityOf(r).actor, action, a.SHA256, "ok", detail)
	writeJSON(w, http.StatusOK, ans)
}

// readUpload reads the file of an upload of at most limit bytes: the body,
// or the first file part of a multipart/form-data body.
func readUpload(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return readBody(w, r, limit, limitSettings)
	}
	body := http.MaxBytesReader(w, r.Body, limit+multipartSlack)
	mr := multipart.NewReader(body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil, tsubame.Errorf(tsubame.EINVALID, "the form carries no file")
		}
		if err != nil {
			return nil, bodyError(err, limit, limitSettings)
		}
		if p.FileName() == "" {
			continue
		}
		var b bytes.Buffer
		n, err := io.Copy(&b, io.LimitReader(p, limit+1))
		if err != nil {
			return nil, bodyError(err, limit, limitSettings)
		}
		if n > limit {
			return nil, tsubame.Errorf(tsubame.ETOOLARGE, "the file exceeds %d bytes (%s)", limit, limitSettings)
		}
		return b.Bytes(), nil
	}
}
