package httpconn

import (
	"net/http"
	"testing"

	"github.com/onceflight/onceflight/connectors"
)

// The default client is fasthttp where it applies, net/http otherwise or
// when named: the suite's two runs (client_test.go) each test the client
// they mean to.
func TestClientChosen(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		fast bool
	}{
		{Config{URL: "http://h/x"}, defaultClient == ClientFast},
		{Config{URL: "https://h/x", Transport: Transport{Client: ClientFast}}, true},
		{Config{URL: "http://h/x", Transport: Transport{Client: ClientNetHTTP}}, false},
		{Config{URL: "http://h/x", Client: &http.Client{}}, false},
	} {
		c, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if (c.fast != nil) != tc.fast {
			t.Errorf("%+v: fasthttp %v, want %v", tc.cfg.Transport, c.fast != nil, tc.fast)
		}
	}
}

// Only the configured origin goes through fasthttp's one-host pool, and
// only methods whose body fasthttp sends.
func TestFastServesItsOrigin(t *testing.T) {
	f := &fastClient{origin: "https://api.example:8443"}
	for u, want := range map[string]bool{
		"https://api.example:8443":          true,
		"https://api.example:8443/v1/x?y=1": true,
		"https://api.example:8443?y=1":      true,
		"https://api.example:84430/x":       false,
		"https://api.example:8443.evil/x":   false,
		"http://api.example:8443/x":         false,
	} {
		if got := f.serves(http.MethodPost, u); got != want {
			t.Errorf("serves(%q) = %v, want %v", u, got, want)
		}
	}
	for m, want := range map[string]bool{http.MethodPut: true, http.MethodDelete: true, http.MethodPatch: true, http.MethodGet: false, http.MethodHead: false} {
		if got := f.serves(m, f.origin+"/x"); got != want {
			t.Errorf("serves(%s) = %v, want %v: fasthttp drops a GET's body", m, got, want)
		}
	}
}

// A URL without placeholders expands to itself without allocating: every
// Execute of the default protocol expands one.
func TestLiteralTemplateExpandsWithoutCopy(t *testing.T) {
	tm, err := ParseTemplate("http://h:8080/refunds?x=1")
	if err != nil {
		t.Fatal(err)
	}
	req := connectors.Request{Key: "k"}
	if got, err := tm.expand(req, nil, modeURL); err != nil || got != "http://h:8080/refunds?x=1" {
		t.Fatalf("expand = %q, %v", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = tm.expand(req, nil, modeURL) }); n != 0 {
		t.Errorf("%v allocations per expansion of a literal URL, want 0", n)
	}
}
