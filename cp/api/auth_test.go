package api

import (
	"net/http"
	"strings"
	"testing"
)

// The admin token is a Bearer credential: the scheme in any case (RFC 9110 11.1) is
// accepted; a bare token (it was accepted), another scheme, or the scheme alone get 401.
func TestAdminTokenBearerScheme(t *testing.T) {
	cl := dirAPI(t, t.TempDir())
	write := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodDelete, cl.URL+"/meshes/default/virtualoutbounds/by-version", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token} {
		if code := write(auth); code != http.StatusNotFound { // authorized: nothing to delete
			t.Errorf("%q: %d, want the write authorized (404: nothing to delete)", auth, code)
		}
	}
	for _, auth := range []string{token, "Basic " + token, "Bearer", "Bearer " + strings.ToUpper(token), "Bearer" + token} {
		if code := write(auth); code != http.StatusUnauthorized {
			t.Errorf("%q: %d, want 401", auth, code)
		}
	}
}
