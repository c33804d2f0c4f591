package originals

import (
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strings"
)

// AdminPath is where the running proxy answers the originals
// commands (stats, list, lookup) while it holds the table: bbolt lets no
// other process read the file then.
const AdminPath = "/_shaperproxy/originals/"

// Handler serves the originals table as JSON, to loopback
// clients only (the originals are the user's reasoning: they never leave
// the machine, even when the proxy listens on another address).
func Handler(st *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			http.Error(w, "originals are served to loopback clients only", http.StatusForbidden)
			return
		}
		var v any
		var err error
		switch strings.TrimPrefix(r.URL.Path, AdminPath) {
		case "stats":
			var s Stats
			s, err = st.Stats()
			v = map[string]any{"path": st.Path(), "stats": s}
		case "list":
			v, err = st.List(r.URL.Query().Get("conversation"))
		case "lookup":
			var sum []byte
			sum, err = hex.DecodeString(r.URL.Query().Get("sha256"))
			if err != nil || len(sum) != 32 {
				http.Error(w, "sha256 wants 64 hex digits", http.StatusBadRequest)
				return
			}
			v, err = st.LookupHash([32]byte(sum))
		default:
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
