package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/onceflight/onceflight/internal/httpauth"
)

// httpAccess are serve's flags deciding who reaches what over HTTP
// (docs/http.md#who-may-read-the-records).
type httpAccess struct {
	metricsAddr string
	auth        authFlags
}

// authFlags are the flags serve and console share that say who may read
// over HTTP: bearer tokens, and the user's name from an authenticating
// reverse proxy (docs/http.md#who-may-read-the-records).
type authFlags struct {
	tokenFile   string
	proxyHeader string
	proxies     []string
	// proxyRole is the role of the proxy's users (console's
	// --http-trusted-proxy-role); "" is reader, all serve's records need.
	proxyRole string
}

func (h *httpAccess) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&h.metricsAddr, "metrics-http", "", "address of a listener serving only /healthz, /readyz and /metrics, without authentication (for probes and Prometheus); off when empty")
	h.auth.addFlags(fs, "file of bearer tokens that may read the records on --http, one NAME:TOKEN[:ROLE] a line (docs/http.md#who-may-read-the-records); mode 0600 or 0640")
}

// addFlags registers the flags serve and console share, with one spelling
// and one meaning; tokenHelp says what the tokens open in that command.
// The console's --http-trusted-proxy-role is its own (serve's records need
// no more than reader).
func (f *authFlags) addFlags(fs *pflag.FlagSet, tokenHelp string) {
	fs.StringVar(&f.tokenFile, "http-token-file", "", tokenHelp)
	fs.StringVar(&f.proxyHeader, "http-trusted-proxy-header", "", "header carrying the user's name set by an authenticating reverse proxy (oauth2-proxy: X-Forwarded-User); honoured only from --http-trusted-proxies")
	fs.StringSliceVar(&f.proxies, "http-trusted-proxies", nil, "addresses or CIDR ranges of the reverse proxies whose --http-trusted-proxy-header is believed (127.0.0.1 for a sidecar)")
}

// authenticator is the authentication the flags describe; each error
// names the flag to fix.
func (f authFlags) authenticator(log *slog.Logger) (*httpauth.Authenticator, error) {
	opts := []httpauth.Option{httpauth.WithLogger(log)}
	if f.tokenFile != "" {
		ts, err := httpauth.LoadTokenFile(f.tokenFile)
		if err != nil {
			return nil, usageErrorf("--http-token-file: %v", err)
		}
		opts = append(opts, httpauth.WithTokens(ts...))
	}
	switch {
	case f.proxyHeader != "" && len(f.proxies) == 0:
		return nil, usageErrorf("--http-trusted-proxy-header %s needs --http-trusted-proxies: the addresses of the proxies that set it (anyone else could send it too); the two go together", f.proxyHeader)
	case f.proxyHeader == "" && len(f.proxies) > 0:
		return nil, usageErrorf("--http-trusted-proxies needs --http-trusted-proxy-header: the header those proxies set to the user's name; the two go together")
	case f.proxyHeader != "":
		ps, err := httpauth.ParseProxies(f.proxies)
		if err != nil {
			return nil, usageErrorf("--http-trusted-proxies: %v", err)
		}
		role := httpauth.RoleReader
		if f.proxyRole != "" {
			if role, err = httpauth.ParseRole(f.proxyRole); err != nil {
				return nil, usageErrorf("--http-trusted-proxy-role: %v", err)
			}
		}
		opts = append(opts, httpauth.WithTrustedProxy(f.proxyHeader, ps, role))
	}
	a, err := httpauth.New(opts...)
	if err != nil {
		return nil, usageErrorf("http authentication: %v", err)
	}
	return a, nil
}

// authenticator builds the record API's authentication from the flags and
// refuses to serve records on httpAddr without it unless httpAddr is a
// loopback address: records hold customer data, and an executor in a pod
// or VM listening on 0.0.0.0 is reachable by everything on that network.
// There is deliberately no flag to override this; a deployment whose
// network is private anyway states that with a token.
func (h *httpAccess) authenticator(httpAddr string, log *slog.Logger) (*httpauth.Authenticator, error) {
	a, err := h.auth.authenticator(log)
	if err != nil {
		return nil, err
	}
	if err := refuseOpen("--http", httpAddr, a, "would serve the execution records (customer data) to anyone who reaches it",
		"listen on 127.0.0.1 and serve only health and metrics to the network with --metrics-http ADDR"); err != nil {
		return nil, err
	}
	if !a.Enabled() {
		log.Info("records on --http are readable without authentication: it is a loopback address", "http", httpAddr)
	}
	return a, nil
}

// refuseOpen is the one rule for every listener that shows customer data
// (serve's --http, the console): without authentication, only on a
// loopback address. flag names the listener in the error, what says what
// it would expose, and instead is the way out besides authentication.
func refuseOpen(flag, addr string, a *httpauth.Authenticator, what, instead string) error {
	if a.Enabled() || httpauth.Loopback(addr) {
		return nil
	}
	return usageErrorf("%s %s is not a loopback address and %s: "+
		"give --http-token-file FILE (or --http-trusted-proxy-header with --http-trusted-proxies), or %s", flag, addr, what, instead)
}

// refuseOpenConsole is refuseOpen for the console, on whichever flag
// carries its address.
func refuseOpenConsole(flag, addr string, a *httpauth.Authenticator) error {
	return refuseOpen(flag, addr, a, "the console would show every execution record (customer data) to anyone who reaches it", "listen on 127.0.0.1")
}

// serveMetrics serves h (health, readiness, metrics) on addr; the caller
// shuts the server down beside the main one, so probes keep answering
// while the executor drains.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--metrics-http %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return srv, ln.Addr().String(), nil
}
