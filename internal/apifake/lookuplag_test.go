package apifake_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
)

func refund(t *testing.T, p *apifake.Payments, key string) {
	t.Helper()
	form := url.Values{"charge": {"ch_1"}, "amount": {"5"}, "metadata[onceflight_key]": {key}}
	req, _ := http.NewRequest(http.MethodPost, p.URL()+"/v1/refunds", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer sk")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("refund %s: %v %v", key, resp, err)
	}
	resp.Body.Close()
}

// listed are the metadata keys of the refunds the list answers for key.
func listed(t *testing.T, p *apifake.Payments, key string) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL()+"/v1/refunds?idempotency_key="+url.QueryEscape(key), nil)
	req.Header.Set("Authorization", "Bearer sk")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, r := range out.Data {
		keys = append(keys, r.Metadata["onceflight_key"])
	}
	return keys
}

// The payments fake's lookup can lag its writes and ignore its filter;
// a refund keeps the metadata it was sent with.
func TestPaymentsLookupLag(t *testing.T) {
	p := apifake.NewPayments(t, "sk")
	p.LagLookups(time.Hour)
	refund(t, p, "a")
	if got := listed(t, p, "a"); len(got) != 0 {
		t.Errorf("listed within the lag: %v", got)
	}
	p.LagLookups(0)
	if got := listed(t, p, "a"); len(got) != 1 || got[0] != "a" {
		t.Errorf("listed after the lag: %v, want [a]", got)
	}
	refund(t, p, "b")
	if got := listed(t, p, "b"); len(got) != 1 || got[0] != "b" {
		t.Errorf("filtered: %v, want [b]", got)
	}
	p.IgnoreFilter()
	if got := listed(t, p, "b"); strings.Join(got, ",") != "a,b" {
		t.Errorf("filter ignored: %v, want [a b] in the order made", got)
	}
}

// The effects service's confirm answers 404 within the lookup lag.
func TestEffectsLookupLag(t *testing.T) {
	s := apifake.NewEffects(t, apifake.WithLookupLag(time.Hour))
	if r := post(t, s.URL(""), "e", "k", "1"); r.StatusCode != http.StatusCreated || s.Effects("k") != 1 {
		t.Fatalf("POST: %s", r.Status)
	}
	resp, err := http.Get(s.URL("") + "/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("confirm within the lag: %s, want 404", resp.Status)
	}
}
