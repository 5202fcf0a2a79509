package httpconn

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Secrets are written in the actions file as references, ${env:NAME} or
// ${file:PATH}, and read when the connector is built. The file holds only
// the reference, so it can be committed, printed by `onceflight actions`
// and echoed in error messages; the value lives in the connector's
// unexported fields and in the requests it sends, nowhere else. As a second
// line of defence every message and result the connector returns is
// scrubbed of the values it read (redactor), because an API may echo a
// request header into its error body.

// secretRef is one reference; the name or path is the second group.
var secretRef = regexp.MustCompile(`\$\{(env|file):([^}]*)\}`)

// Redacted replaces a secret value wherever the connector would otherwise
// show it.
const Redacted = "[redacted]"

// HasSecretRef reports whether s contains a ${env:…} or ${file:…} reference.
func HasSecretRef(s string) bool { return secretRef.MatchString(s) }

// SecretRefs lists the references in s as written, e.g. "${env:PAY_KEY}".
func SecretRefs(s string) []string { return secretRef.FindAllString(s, -1) }

// CheckSecretSyntax refuses a "${" that is not a reference: a misspelt
// ${evn:KEY} would otherwise be sent as literal text.
func CheckSecretSyntax(s string) error {
	rest := secretRef.ReplaceAllString(s, "")
	if i := strings.Index(rest, "${"); i >= 0 {
		return fmt.Errorf("%q is not a secret reference: write ${env:NAME} or ${file:PATH}", cut(rest[i:], 24))
	}
	for _, m := range secretRef.FindAllStringSubmatch(s, -1) {
		if strings.TrimSpace(m[2]) == "" {
			return fmt.Errorf("%s names no %s", m[0], map[string]string{"env": "variable", "file": "file"}[m[1]])
		}
	}
	return nil
}

func cut(s string, n int) string {
	if end := strings.IndexByte(s, '}'); end >= 0 && end < n {
		return s[:end+1]
	}
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// AbsSecretFiles makes every relative ${file:PATH} in s relative to dir
// (the actions file's directory, like schema paths).
func AbsSecretFiles(s, dir string) string {
	return secretRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretRef.FindStringSubmatch(m)
		if sub[1] != "file" || filepath.IsAbs(sub[2]) {
			return m
		}
		return "${file:" + filepath.Join(dir, sub[2]) + "}"
	})
}

// ResolveSecrets returns s with every reference replaced by its value, and
// the values. An unset or empty variable, or an unreadable or empty file,
// is an error naming the variable or file, never a value. A file's
// trailing newline is dropped (files written by echo or by Kubernetes
// secrets often have one).
func ResolveSecrets(s string) (string, []string, error) {
	if err := CheckSecretSyntax(s); err != nil {
		return "", nil, err
	}
	var values []string
	var firstErr error
	out := secretRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretRef.FindStringSubmatch(m)
		v, err := resolveOne(sub[1], sub[2])
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return ""
		}
		values = append(values, v)
		return v
	})
	if firstErr != nil {
		return "", nil, firstErr
	}
	return out, values, nil
}

func resolveOne(kind, name string) (string, error) {
	switch kind {
	case "env":
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		if v == "" {
			return "", fmt.Errorf("environment variable %s is empty", name)
		}
		return v, nil
	default:
		b, err := os.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("secret file: %w", err) // *PathError names the file
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("secret file %s is empty", name)
		}
		return v, nil
	}
}

// redactor scrubs known secret values from text the connector returns.
// Tokens fetched later (OAuth2) are added as they arrive (addToken), the
// last maxRedactedTokens of them kept.
type redactor struct {
	// mu guards the values: added by New and by each new OAuth2 token,
	// read by every answer's redaction. A leaf lock.
	mu struct {
		sync.RWMutex
		// values are scanned for: the configured secrets' forms
		// (values[:fixed]), then the kept tokens'.
		values []string
		fixed  int
		tokens []string // the kept tokens, oldest first
	}
}

// maxRedactedTokens is how many OAuth2 access tokens are redacted: the
// latest ones. Every token fetched used to stay — with tokens of an hour
// 8 760 a year, of five minutes 105 000, each answer's redaction a scan per
// value. A token is shown only by an answer to a request that carried it,
// and a request carries the token of its time: one renewed 16 times since
// is on no request still waiting for its answer.
const maxRedactedTokens = 16

// forms are v and, when it differs, v as it is written inside a JSON
// string (a result body).
func forms(v string) []string {
	if b, err := json.Marshal(v); err == nil {
		if esc := string(b[1 : len(b)-1]); esc != v {
			return []string{v, esc}
		}
	}
	return []string{v}
}

func (r *redactor) add(vs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range vs {
		if v == "" || slices.Contains(r.mu.values[:r.mu.fixed], v) {
			continue
		}
		f := forms(v)
		r.mu.values = slices.Insert(r.mu.values, r.mu.fixed, f...)
		r.mu.fixed += len(f)
	}
}

// addToken adds an OAuth2 access token, dropping the oldest kept when
// there are more than maxRedactedTokens. A token renewed after a 401 may
// come back the same: it is kept once.
func (r *redactor) addToken(tok string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok == "" || slices.Contains(r.mu.tokens, tok) {
		return
	}
	r.mu.tokens = append(r.mu.tokens, tok)
	if len(r.mu.tokens) > maxRedactedTokens {
		r.mu.tokens = slices.Delete(r.mu.tokens, 0, 1)
	}
	r.mu.values = r.mu.values[:r.mu.fixed]
	for _, t := range r.mu.tokens {
		r.mu.values = append(r.mu.values, forms(t)...)
	}
}

func (r *redactor) string(s string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, v := range r.mu.values {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

func (r *redactor) bytes(b []byte) []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, v := range r.mu.values {
		if bytes.Contains(b, []byte(v)) {
			b = bytes.ReplaceAll(b, []byte(v), []byte(Redacted))
		}
	}
	return b
}

// minPartial is the shortest start of a secret that trimPartial takes
// off a cut text's end: a shorter one tells next to nothing of the secret,
// and would take ordinary text off every answer that happens to end with a
// secret's first letters.
const minPartial = 4

// trimPartial replaces the start of a secret at b's end — b was cut
// short (a body longer than the connector reads, or broken off), perhaps
// inside a secret — by Redacted: cut in two, the secret no longer matches
// the redaction of the whole, and its first part would be shown. b is not
// written to (it may be a pooled buffer).
func (r *redactor) trimPartial(b []byte) []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, v := range r.mu.values {
		for k := min(len(v)-1, len(b)); k >= minPartial; k-- {
			if bytes.HasSuffix(b, []byte(v[:k])) {
				return append(b[:len(b)-k:len(b)-k], Redacted...)
			}
		}
	}
	return b
}

// basicValue is the Authorization value for basic auth; it is a secret
// too, since it decodes to the password.
func basicValue(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// TLS is a connector's TLS settings (the action's `tls:` section): a CA
// bundle that replaces the system roots, a client certificate, and the name
// expected in the server's certificate. Paths are files, not references:
// a key file is read, never printed.
type TLS struct {
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
}

// IsZero reports whether no TLS setting is given (the system's defaults).
func (t TLS) IsZero() bool { return t == TLS{} }

// Config loads the files and builds the tls.Config. Errors are
// *FieldError naming the field and the file, never the content.
func (t TLS) Config() (*tls.Config, error) {
	c := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &FieldError{"tls.ca_file", fmt.Errorf("read CA bundle: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &FieldError{"tls.ca_file", fmt.Errorf("%s holds no PEM certificate", t.CAFile)}
		}
		c.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &FieldError{"tls.cert_file", fmt.Errorf("client certificate %s / key %s: %w", t.CertFile, t.KeyFile, err)}
		}
		c.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, &FieldError{"tls.key_file", errors.New("required with cert_file")}
	case t.KeyFile != "":
		return nil, &FieldError{"tls.cert_file", errors.New("required with key_file")}
	}
	return c, nil
}
