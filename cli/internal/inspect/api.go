package inspect

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/oauth2"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// Request is how an http action calls a real API (config.Action.API),
// described without a secret: credentials appear as the references they
// are read from (${env:NAME}, ${file:PATH}), never as values.
type Request struct {
	Method            string   `json:"method"`
	Body              string   `json:"body"`
	IdempotencyHeader string   `json:"idempotency_header"`
	Headers           []string `json:"headers,omitempty"`
	Auth              string   `json:"auth,omitempty"`
	TLS               string   `json:"tls,omitempty"`
	Signing           string   `json:"signing,omitempty"`
	RejectedWhen      string   `json:"rejected_when,omitempty"`
	Result            string   `json:"result,omitempty"`
}

// requestOf describes a's API; nil for Onceflight's own protocol.
func requestOf(a *config.Action) *Request {
	api := a.API
	if a.Connector != config.ConnectorHTTP || api.IsZero() {
		return nil
	}
	r := &Request{
		Method:            or(strings.ToUpper(api.Method), "POST"),
		Body:              or(api.Body, httpconn.BodyJSON) + " (the command's data)",
		IdempotencyHeader: or(api.IdempotencyHeader, httpconn.DefaultIdempotencyHeader) + ": the idempotency key, on every request",
		RejectedWhen:      api.RejectedWhen,
		Result:            api.Result,
	}
	switch api.Body {
	case httpconn.BodyForm:
		r.Body = "form-encoded data (nested fields as a[b])"
	case httpconn.BodyTemplate:
		r.Body = "template " + api.BodyTemplate
	}
	r.Headers = headerList(api.Headers)
	switch {
	case api.BasicAuth != nil:
		r.Auth = fmt.Sprintf("basic, user %s, password from %s", refsOr(api.BasicAuth.Username), refsOr(api.BasicAuth.Password))
	case api.OAuth2 != nil:
		r.Auth = fmt.Sprintf("OAuth2 client credentials from %s, client %s, secret from %s", api.OAuth2.TokenURL, refsOr(api.OAuth2.ClientID), refsOr(api.OAuth2.ClientSecret))
		if len(api.OAuth2.Scopes) > 0 {
			r.Auth += ", scopes " + strings.Join(api.OAuth2.Scopes, " ")
		}
	}
	if t := api.TLS; !t.IsZero() {
		var parts []string
		for _, kv := range [][2]string{{"CA", t.CAFile}, {"client certificate", t.CertFile}, {"server name", t.ServerName}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+" "+kv[1])
			}
		}
		r.TLS = strings.Join(parts, ", ")
	}
	if api.Signing != nil {
		r.Signing = "Standard Webhooks (webhook-id = the idempotency key, webhook-timestamp, webhook-signature v1 HMAC-SHA256), secret from " + refsOr(api.Signing.Secret)
	}
	return r
}

// headerList is "Name: value" for each header, a credential's value given
// only by the references it is read from.
func headerList(hs map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		v := hs[k]
		if config.CredentialHeader(k) || httpconn.HasSecretRef(v) {
			v = "from " + refsOr(v)
		}
		out = append(out, k+": "+v)
	}
	return out
}

// refsOr is the secret references in v, or v itself when it has none (a
// user name, a client id written in the file).
func refsOr(v string) string {
	if refs := httpconn.SecretRefs(v); len(refs) > 0 {
		return strings.Join(refs, " + ")
	}
	return v
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// confirmRule is the compiled confirmation rule in words; "" when the
// action confirms by Onceflight's own protocol or not at all.
func confirmRule(a *config.Action) string {
	c := a.API.Confirm
	if a.Connector != config.ConnectorHTTP || (c == nil && (a.API.IsZero() || a.ConfirmURL == "")) {
		return ""
	}
	if c == nil {
		c = &httpconn.Confirm{URL: a.ConfirmURL}
	}
	s := fmt.Sprintf("%s %s: found when %s; not found when %s; anything else (no answer, both, neither, a body the rule cannot read) is unknown and asked again until confirm_timeout",
		or(strings.ToUpper(c.Method), "GET"), c.URL, or(c.Found, httpconn.DefaultFound), or(c.NotFound, httpconn.DefaultNotFound))
	if c.Result != "" {
		s += "; recorded result " + c.Result
	}
	return s
}

// dedupedBy names what carries the idempotency key to the external system:
// the idempotency header and, for a signed delivery, webhook-id.
func dedupedBy(a *config.Action) string {
	header := or(a.API.IdempotencyHeader, httpconn.DefaultIdempotencyHeader)
	if a.API.Signing != nil {
		header += " and webhook-id"
	}
	return header
}

// apiGuarantees restates G2 and G3 in the API's own terms: which of its
// features keep an ambiguous attempt from becoming a second effect.
func apiGuarantees(a *config.Action, p consumer.Protection, gs []Guarantee) []Guarantee {
	if a.Connector != config.ConnectorHTTP || a.API.IsZero() {
		return gs
	}
	header := dedupedBy(a)
	lookup := ""
	if c := a.API.Confirm; c != nil {
		lookup = fmt.Sprintf("%s %s (found: %s; not found: %s)", or(strings.ToUpper(c.Method), "GET"), c.URL, or(c.Found, httpconn.DefaultFound), or(c.NotFound, httpconn.DefaultNotFound))
	} else if a.ConfirmURL != "" {
		lookup = "GET " + a.ConfirmURL
	}
	for i, g := range gs {
		switch {
		case g.ID == "G3" && p.CanConfirm && p.IdempotentByKey:
			gs[i].Why = fmt.Sprintf("G3 holds: the API deduplicates by %s and can be looked up by it — an ambiguous answer is confirmed by %s before anything else", header, lookup)
		case g.ID == "G3" && p.CanConfirm:
			gs[i].Why = fmt.Sprintf("G3 holds while the API's lookup tells the truth: an ambiguous answer is confirmed by %s before anything else; the API does not deduplicate, so nothing is sent again without a not-found", lookup)
		case g.ID == "G3" && p.IdempotentByKey:
			gs[i].Why = fmt.Sprintf("G3 holds only if the receiver deduplicates by %s: an ambiguous attempt is sent again with the same value, never confirmed", header)
		case g.ID == "G2" && p.IdempotentByKey && !p.CanConfirm:
			gs[i].Why = fmt.Sprintf("an ambiguous attempt is sent again with the same %s: relies on the receiver deduplicating it", header)
		}
	}
	return gs
}

// apiAnswers are the answers a real API's rules add to the table.
func apiAnswers(a *config.Action) []answer {
	var out []answer
	if a.API.RejectedWhen != "" {
		out = append(out,
			answer{"2xx where rejected_when holds (" + a.API.RejectedWhen + ")", httpconn.ClassifyRejectedWhen(true), false},
			answer{"2xx where rejected_when cannot be evaluated", httpconn.ClassifyRejectedWhen(false), false})
	}
	if a.API.OAuth2 != nil {
		refused := &oauth2.RetrieveError{Response: &http.Response{StatusCode: http.StatusUnauthorized}}
		out = append(out,
			answer{"OAuth2 token refused (4xx from token_url, not 408, 425, 429)", httpconn.ClassifyTokenError(refused), false},
			answer{"OAuth2 token not fetched (token_url unreachable, busy, 5xx)", httpconn.ClassifyTokenError(errors.New("unreachable")), false})
	}
	return out
}

// apiWarnings: credentials that would cross the network in clear text,
// to a URL that is http:// and not this machine.
func apiWarnings(a *config.Action) []string {
	api := a.API
	if a.Connector != config.ConnectorHTTP || api.IsZero() {
		return nil
	}
	creds := api.BasicAuth != nil || api.OAuth2 != nil || slices.ContainsFunc(slices.Collect(maps.Keys(api.Headers)), func(k string) bool {
		return config.CredentialHeader(k) || httpconn.HasSecretRef(api.Headers[k])
	})
	if !creds {
		return nil
	}
	urls := []string{a.URL}
	if api.Confirm != nil {
		urls = append(urls, api.Confirm.URL)
	} else if a.ConfirmURL != "" {
		urls = append(urls, a.ConfirmURL)
	}
	if api.OAuth2 != nil {
		urls = append(urls, api.OAuth2.TokenURL)
	}
	var w []string
	for _, raw := range urls {
		u, err := url.Parse(strings.NewReplacer("{", "", "}", "").Replace(raw))
		if err != nil || u.Scheme != "http" {
			continue
		}
		if h := u.Hostname(); h == "localhost" || net.ParseIP(h).IsLoopback() {
			continue
		}
		w = append(w, fmt.Sprintf("credentials are sent in clear text to %s (http://): anyone on the path can read them; use https://", u.Host))
		break
	}
	return w
}

// writeRequest writes the Request and ConfirmRule lines of the text form.
func writeRequest(w io.Writer, e Endpoints) {
	if r := e.Request; r != nil {
		fmt.Fprintf(w, "  request:\t%s, body %s\n", r.Method, r.Body)
		fmt.Fprintf(w, "  idempotency:\t%s\n", r.IdempotencyHeader)
		for _, h := range r.Headers {
			fmt.Fprintf(w, "  header:\t%s\n", h)
		}
		for _, kv := range [][2]string{{"auth", r.Auth}, {"tls", r.TLS}, {"signing", r.Signing}, {"rejected when", r.RejectedWhen}, {"result", r.Result}} {
			if kv[1] != "" {
				fmt.Fprintf(w, "  %s:\t%s\n", kv[0], kv[1])
			}
		}
	}
	if e.ConfirmRule != "" {
		fmt.Fprintf(w, "  confirm rule:\t%s\n", e.ConfirmRule)
	}
}
