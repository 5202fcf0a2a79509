package httpconn

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/onceflight/onceflight/connectors"
)

// confirmByLookup asks the API's own lookup (API.Confirm) whether an
// attempt took effect. Only an answer on which exactly one of found and
// not_found holds decides; everything else — no answer, a body the rules
// cannot read, both or neither holding — is unknown (Ambiguous), so Perform
// asks again and, at confirm_timeout, leaves the record unresolved. Reading
// an empty list as "it happened" would be the worst answer the product can
// give; reading an error page as "it did not" the second worst.
func (c *Connector) confirmByLookup(ctx context.Context, req connectors.Request) connectors.Result {
	l := c.shape.lookup
	unknown := func(format string, args ...any) connectors.Result {
		return connectors.Result{Kind: connectors.Ambiguous, Message: "confirm: " + fmt.Sprintf(format, args...)}
	}
	ctx, cancel := c.requestContext(ctx, time.Time{})
	defer cancel()
	data, err := decodeData(req.Data)
	if err != nil {
		return unknown("%v", err)
	}
	u, err := l.url.expand(req, data, modeURL)
	if err != nil {
		return unknown("%v", err)
	}
	// The zero deadline disarms the guard of a reused connection, which
	// may still hold an earlier Execute's deadline.
	st := &sendState{}
	hr, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, st.trace(time.Time{})), l.method, u, nil)
	if err != nil {
		return unknown("build request: %v", err)
	}
	hr.Header.Set(c.shape.idemHeader, req.Key)
	token, err := c.shape.authorize(ctx, hr, l.headers)
	if err != nil {
		return unknown("%v", err)
	}
	resp, err := c.client.Do(hr)
	if err != nil {
		c.dropConnections()
		return unknown("%v", err)
	}
	defer resp.Body.Close()
	raw, truncated, rerr := c.readBody(resp.Body)
	if rerr != nil {
		return unknown("HTTP %d: read body: %v", resp.StatusCode, rerr)
	}
	if resp.StatusCode == http.StatusUnauthorized && token != "" {
		c.shape.renewToken(token) // the next confirmation asks with a new one
	}
	if truncated && (l.found.readsBody || l.notFound.readsBody) {
		// Longer than the connector reads: a rule over the body sees a
		// part, and "the key is not in it" is not "not found".
		return unknown("HTTP %d: the rules read the body, which is longer than the %d bytes the connector reads", resp.StatusCode, c.cfg.MaxResultBytes)
	}
	a := newAnswer(req, resp.StatusCode, resp.Header, raw)
	found, ferr := l.found.holds(a)
	notFound, nerr := l.notFound.holds(a)
	switch {
	case ferr == nil && nerr == nil && found && !notFound:
		return connectors.Result{Kind: connectors.Succeeded, Result: c.mapped(l.result, a, truncated)}
	case ferr == nil && nerr == nil && notFound && !found:
		return connectors.Result{Kind: connectors.NotFound}
	case found && notFound:
		return unknown("HTTP %d: both found and not_found hold", resp.StatusCode)
	}
	var why []string
	for _, e := range []error{ferr, nerr} {
		if e != nil {
			why = append(why, e.Error())
		}
	}
	if len(why) == 0 {
		why = append(why, "neither found nor not_found holds")
	}
	return unknown("HTTP %d: %s: %s", resp.StatusCode, strings.Join(why, "; "), c.message(raw))
}
