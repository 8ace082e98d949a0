package admin

import (
	"embed"
	"net/http"
	"path"
)

// The dashboard page and its assets, served from the binary (no CDN).
//
//go:embed web
var webFS embed.FS

var assetTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
}

func (s *Server) dashboard(w http.ResponseWriter, _ *http.Request) {
	b, err := webFS.ReadFile("web/index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	ctype, ok := assetTypes[path.Ext(name)]
	b, err := webFS.ReadFile("web/" + name)
	if !ok || err != nil {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(b)
}
