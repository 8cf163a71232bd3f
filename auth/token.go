package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// maxAuthorizationBytes bounds the Authorization header auth looks at.
const maxAuthorizationBytes = 4096

// Admin wraps the admin API's handler: with security.admin.token_file,
// every request but GET /healthz must carry "Authorization: Bearer
// <token>" (the file's content without its trailing newline, re-read
// when it changes; compared in constant time). A request without it or
// with another token gets 401 with "WWW-Authenticate: Bearer" and a JSON
// error {"error":{"message":...}}, counted as
// ilb_auth_refusals_total{port="admin",reason="bad_token"} and logged at
// most once a minute per client address. Without a token file, next
// serves everything.
func (a *Auth) Admin(next http.Handler) http.Handler {
	if a.tokenPath == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		msg, challenge := a.checkToken(r.Header.Get("Authorization"))
		if msg == "" {
			next.ServeHTTP(w, r)
			return
		}
		a.metrics.refused(PortAdmin, ReasonBadToken)
		a.logRefusal(r.Context(), PortAdmin, ReasonBadToken, r.RemoteAddr, "", "")
		w.Header().Set("WWW-Authenticate", challenge)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]map[string]string{"error": {"message": msg}})
	})
}

// checkToken returns "" when the header carries the token, else the
// error message and the WWW-Authenticate challenge (RFC 6750).
func (a *Auth) checkToken(h string) (msg, challenge string) {
	const realm = `Bearer realm="ilb"`
	scheme, tok, ok := strings.Cut(h, " ")
	switch {
	case h == "":
		return "this admin API needs a bearer token: Authorization: Bearer <the token in security.admin.token_file>", realm
	case len(h) > maxAuthorizationBytes || !ok || !strings.EqualFold(scheme, "Bearer"):
		return "the Authorization header is not \"Bearer <token>\"", realm + `, error="invalid_request"`
	}
	// Hashing both sides makes the comparison's time independent of the
	// token's length as well as its content.
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	want := a.token.Load()
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "the bearer token is not the one in security.admin.token_file", realm + `, error="invalid_token"`
	}
	return "", ""
}
