package config

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/santhosh-tekuri/jsonschema/v6"

	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// The keys of an http action that describe a real API rather than
// Onceflight's own protocol (docs/connectors.md#calling-a-real-api). They
// are decoded into actionDoc's "calling a real API" block and become
// Action.API. The connector's own Check validates them — templates, CEL
// rules, secret references, TLS files — so the file is refused at load
// for exactly what would stop the connector, each problem placed on its
// line.

type basicAuthDoc struct {
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

type oauth2Doc struct {
	TokenURL     string   `yaml:"token_url"`
	ClientID     string   `yaml:"client_id"`
	ClientSecret string   `yaml:"client_secret"`
	Scopes       []string `yaml:"scopes"`
}

type tlsDoc struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

type signingDoc struct {
	Secret string `yaml:"secret"`
}

type confirmDoc struct {
	Method   string            `yaml:"method"`
	URL      string            `yaml:"url"`
	Headers  map[string]string `yaml:"headers"`
	Found    string            `yaml:"found"`
	NotFound string            `yaml:"not_found"`
	Result   string            `yaml:"result"`
}

type statusesDoc struct {
	Ambiguous []int `yaml:"ambiguous"`
	NotDone   []int `yaml:"not_done"`
}

// apiFields are the keys of the block, for "only valid for connector http".
var apiFields = []string{"method", "body", "body_template", "content_type", "idempotency_header", "headers",
	"basic_auth", "oauth2", "tls", "signing", "confirm", "rejected_when", "result", "statuses"}

// credentialHeader matches header names whose value is a credential: such
// a value must be a reference, never written in the file.
var credentialHeader = regexp.MustCompile(`(?i)auth|cookie|key|token|secret|password|signature|credential`)

// CredentialHeader reports whether a header of this name carries a
// credential, whose value the file must give as a reference and
// descriptions show only as one.
// Idempotency-Key is not one: the connector sets it.
func CredentialHeader(name string) bool {
	return credentialHeader.MatchString(name) && !strings.EqualFold(name, httpconn.DefaultIdempotencyHeader)
}

// apiOf checks the block of action name and builds its httpconn.API.
func (p *loader) apiOf(name string, d actionDoc, a *Action) httpconn.API {
	given := func(field string) (written, bool) {
		w, ok := p.index[loc{name, field}]
		return w, ok
	}
	if a.Connector != ConnectorHTTP {
		for _, f := range apiFields {
			if w, ok := given(f); ok && a.Connector != "" {
				p.errAt(w.key, loc{name, f}, "only valid for connector http")
			}
		}
		return httpconn.API{}
	}
	// mustRef refuses a credential written in the file itself.
	mustRef := func(field, v string) string {
		if v != "" && !httpconn.HasSecretRef(v) {
			w, _ := given(field)
			p.errAt(w.value, loc{name, field}, "a credential is not written in the file: give it as ${env:NAME} or ${file:PATH}")
		}
		return httpconn.AbsSecretFiles(v, p.dir)
	}
	api := httpconn.API{
		Method: d.Method, Body: d.Body, BodyTemplate: d.BodyTemplate, ContentType: d.ContentType,
		IdempotencyHeader: d.IdempotencyHeader, RejectedWhen: d.RejectedWhen, Result: d.Result,
		Headers: p.headers(name, "headers", d.Headers, mustRef),
	}
	if _, ok := given("basic_auth"); ok {
		api.BasicAuth = &httpconn.BasicAuth{
			Username: httpconn.AbsSecretFiles(d.BasicAuth.Username, p.dir),
			Password: mustRef("basic_auth.password", d.BasicAuth.Password),
		}
		if d.BasicAuth.Password == "" {
			p.errAt(nil, loc{name, "basic_auth.password"}, "required")
		}
	}
	if _, ok := given("oauth2"); ok {
		o := d.OAuth2
		api.OAuth2 = &httpconn.OAuth2{
			TokenURL: o.TokenURL, ClientID: httpconn.AbsSecretFiles(o.ClientID, p.dir),
			ClientSecret: mustRef("oauth2.client_secret", o.ClientSecret), Scopes: o.Scopes,
		}
		for f, v := range map[string]string{"token_url": o.TokenURL, "client_id": o.ClientID, "client_secret": o.ClientSecret} {
			if v == "" {
				p.errAt(nil, loc{name, "oauth2." + f}, "required")
			}
		}
	}
	abs := func(f string) string {
		if f != "" && !filepath.IsAbs(f) {
			return filepath.Join(p.dir, f)
		}
		return f
	}
	api.TLS = httpconn.TLS{CAFile: abs(d.TLS.CAFile), CertFile: abs(d.TLS.CertFile), KeyFile: abs(d.TLS.KeyFile), ServerName: d.TLS.ServerName}
	if _, ok := given("signing"); ok {
		api.Signing = &httpconn.Signing{Secret: mustRef("signing.secret", d.Signing.Secret)}
		if d.Signing.Secret == "" {
			p.errAt(nil, loc{name, "signing.secret"}, "required")
		}
	}
	api.Statuses = httpconn.Statuses{Ambiguous: d.Statuses.Ambiguous, NotDone: d.Statuses.NotDone}
	if len(d.Statuses.NotDone) > 0 && !a.IdempotentByKey {
		// A code said "not done" is sent again without a confirmation;
		// if it was in fact taken (a 409 while the first request still
		// ran), only an API that answers the key's second request with
		// the first's result keeps that a single effect (G3).
		w, _ := given("statuses.not_done")
		p.errAt(w.key, loc{name, "statuses.not_done"}, "only with idempotent_by_key: true: a code listed here is sent again with the same key, unconfirmed, which only an API that deduplicates by the key makes safe")
	}
	if _, ok := given("confirm"); ok {
		c := d.Confirm
		api.Confirm = &httpconn.Confirm{Method: c.Method, URL: c.URL, Found: c.Found, NotFound: c.NotFound, Result: c.Result,
			Headers: p.headers(name, "confirm.headers", c.Headers, mustRef)}
	}
	if len(p.errs) > 0 && slices.ContainsFunc(apiFields, func(f string) bool { return p.bad[loc{name, f}] }) {
		return api
	}
	for _, err := range httpconn.Check(httpconn.Config{URL: a.URL, ConfirmURL: a.ConfirmURL, API: api}) {
		field := ""
		if fe, ok := errors.AsType[*httpconn.FieldError](err); ok {
			field, err = fe.Field, fe.Err
		}
		if p.bad[loc{name, field}] {
			continue // reported by the checks above
		}
		p.errAt(p.nodeOf(name, field), loc{name, field}, "%v", err)
	}
	p.checkDataPaths(name, a, api)
	return api
}

// headers returns hs with credential-looking values checked (mustRef) and
// relative secret files resolved.
func (p *loader) headers(name, field string, hs map[string]string, mustRef func(string, string) string) map[string]string {
	if hs == nil {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		if CredentialHeader(k) {
			out[k] = mustRef(field+"."+k, hs[k])
		} else {
			out[k] = httpconn.AbsSecretFiles(hs[k], p.dir)
		}
	}
	return out
}

// nodeOf is the value node of field, or of the nearest enclosing field
// that was written ("tls.cert_file" → "tls").
func (p *loader) nodeOf(name, field string) ast.Node {
	for f := field; f != ""; {
		if w, ok := p.index[loc{name, f}]; ok {
			if w.value != nil {
				return w.value
			}
			return w.key
		}
		i := strings.LastIndexByte(f, '.')
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return nil
}

// checkDataPaths refuses a template that reads a data field the action's
// schema does not declare ({data.ordr_id} when the schema has order_id):
// without a schema only the syntax is checked.
func (p *loader) checkDataPaths(name string, a *Action, api httpconn.API) {
	if a.schema == nil {
		return
	}
	check := func(field, src string) {
		t, err := httpconn.ParseTemplate(src)
		if err != nil {
			return // reported by Check
		}
		for _, path := range t.DataPaths() {
			if err := schemaHas(a.schema, path); err != nil {
				p.errAt(p.nodeOf(name, field), loc{name, field}, "{data.%s}: %v (schema %s)", strings.Join(path, "."), err, a.Schema)
			}
		}
	}
	check("url", a.URL)
	if api.Body == httpconn.BodyTemplate {
		check("body_template", api.BodyTemplate)
	}
	if api.Confirm != nil {
		check("confirm.url", api.Confirm.URL)
	}
}

// schemaHas reports whether a schema declares path. A schema that lists no
// properties at some step (or composes others) says nothing, and is taken
// to allow it.
func schemaHas(s *jsonschema.Schema, path []string) error {
	for i, step := range path {
		for s.Ref != nil && s.Properties == nil {
			s = s.Ref
		}
		if s.Properties == nil {
			return nil
		}
		next, ok := s.Properties[step]
		if !ok {
			return fmt.Errorf("%s is not a property of the schema (it has %s)", strings.Join(path[:i+1], "."), strings.Join(slices.Sorted(maps.Keys(s.Properties)), ", "))
		}
		s = next
	}
	return nil
}
