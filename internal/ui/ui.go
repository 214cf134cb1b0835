package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// Handler serves the dashboard's static files under Prefix. The files are
// small and change with the binary, so browsers revalidate them on every
// load (no stale dashboard after an upgrade). Safe for concurrent use.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Scripts and styles only from the binary; connect-src also allows
		// other members' /healthz, which the overview probes.
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' http: https:; img-src 'self' data:; frame-ancestors 'none'")
		if p := r.URL.Path; strings.HasSuffix(p, "/") && p != Prefix {
			http.NotFound(w, r) // no listings of the asset directories
			return
		}
		files.ServeHTTP(w, r)
	})
}
