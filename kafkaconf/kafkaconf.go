// Package kafkaconf turns the Kafka connection properties that Java and
// librdkafka users already know (security.protocol, sasl.*, ssl.*,
// client.id) into franz-go options, so that one set of names configures
// every Kafka client of Onceflight: serve, the CLI commands and the kafka
// connector (docs/configuration.md "Kafka connections").
//
// Properties come from a properties file and `-X key=value` arguments (Load:
// the `--kafka-config FILE` and -X flags), from the actions file (a kafka
// action's `properties`) and from Go code (FromMap). New checks a list of them as a whole, later ones overriding
// earlier ones, and returns a Config whose Opts are appended to a client's
// options.
//
// Only the properties listed in docs/configuration.md are accepted. Anything else, even a
// real librdkafka property such as linger.ms, is an error naming the
// property: silently ignoring a setting the user believes is in force (a
// truststore, a Kerberos principal) is how a client ends up talking
// plaintext to the wrong listener. Certificates and keys are read when the
// Config is built, so a missing file stops a process at start-up rather
// than at its first connection.
//
// Check and Ping make one metadata request with a deadline: franz-go
// retries a failing connection quietly, so without them a wrong password
// looks like a hang.
//
//	security.protocol=SASL_SSL
//	sasl.mechanism=SCRAM-SHA-512
//	sasl.username=onceflight
//	sasl.password=secret
//	ssl.ca.location=/etc/kafka/ca.pem
package kafkaconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Property names accepted by New (docs/configuration.md).
const (
	propSecurityProtocol       = "security.protocol"
	propSASLMechanism          = "sasl.mechanism"
	propSASLUsername           = "sasl.username"
	propSASLPassword           = "sasl.password"
	propSSLCALocation          = "ssl.ca.location"
	propSSLCertificateLocation = "ssl.certificate.location"
	propSSLKeyLocation         = "ssl.key.location"
	propSSLEndpointIDAlgorithm = "ssl.endpoint.identification.algorithm"
	propClientID               = "client.id"
	propEnableMetricsPush      = "enable.metrics.push"
)

// Values of security.protocol.
const (
	protoPlaintext     = "PLAINTEXT"
	protoSSL           = "SSL"
	protoSASLPlaintext = "SASL_PLAINTEXT"
	protoSASLSSL       = "SASL_SSL"
)

// Values of sasl.mechanism.
const (
	mechPlain       = "PLAIN"
	mechScramSHA256 = "SCRAM-SHA-256"
	mechScramSHA512 = "SCRAM-SHA-512"
)

// known lists the accepted property names; see Names.
var known = []string{propSecurityProtocol, propSASLMechanism, propSASLUsername, propSASLPassword,
	propSSLCALocation, propSSLCertificateLocation, propSSLKeyLocation, propSSLEndpointIDAlgorithm, propClientID, propEnableMetricsPush}

// Names returns the accepted property names, for help texts and callers
// that place errors (New also accepts librdkafka's sasl.mechanisms for
// sasl.mechanism).
func Names() []string { return slices.Clone(known) }

// IsFile reports whether property key names a file (a CA, a certificate, a
// key): a caller that reads properties from a file of its own resolves such
// a value relative to that file, as the actions file does.
func IsFile(key string) bool {
	switch key {
	case propSSLCALocation, propSSLCertificateLocation, propSSLKeyLocation:
		return true
	}
	return false
}

// aliases are other spellings of accepted properties: librdkafka (and so
// kcat) documents sasl.mechanisms, Java sasl.mechanism.
var aliases = map[string]string{"sasl.mechanisms": propSASLMechanism}

// unsupportedHints explains real Java/librdkafka properties that are
// refused, so the user learns what to do instead of only "unknown".
var unsupportedHints = map[string]string{
	"ssl.truststore.location":    "Java keystores are not supported; give the CA certificates as a PEM file in ssl.ca.location",
	"ssl.truststore.password":    "Java keystores are not supported; give the CA certificates as a PEM file in ssl.ca.location",
	"ssl.truststore.type":        "Java keystores are not supported; give the CA certificates as a PEM file in ssl.ca.location",
	"ssl.keystore.location":      "Java keystores are not supported; give ssl.certificate.location and ssl.key.location as PEM files",
	"ssl.keystore.password":      "Java keystores are not supported; give ssl.certificate.location and ssl.key.location as PEM files",
	"ssl.keystore.type":          "Java keystores are not supported; give ssl.certificate.location and ssl.key.location as PEM files",
	"ssl.key.password":           "encrypted private keys are not supported; give an unencrypted PEM key in ssl.key.location",
	"sasl.jaas.config":           "give sasl.username and sasl.password instead",
	"sasl.kerberos.service.name": "GSSAPI (Kerberos) is not supported",
	"bootstrap.servers":          "give the brokers with --brokers (or brokers: in the actions file)",
	"metadata.broker.list":       "give the brokers with --brokers (or brokers: in the actions file)",
}

// Property is one key and value with where it was written, for messages.
type Property struct {
	Key, Value string
	// Source is where the property was written: "FILE:LINE" for a
	// properties file, "-X" for a flag, "" when the caller reports
	// positions itself (the actions file).
	Source string
}

// Error is a problem with one property. New joins several with
// errors.Join; errors.As finds the first.
type Error struct {
	Property string // the property concerned; "" for a problem of the file
	Source   string // as in Property.Source
	Msg      string
}

// Error names the property, where it was written and the problem.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Property != "" {
		fmt.Fprintf(&b, "property %q: ", e.Property)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Config is a checked set of connection properties. The zero value is a
// PLAINTEXT connection with franz-go's defaults, except that the client
// pushes no metrics to the broker (MetricsPush).
type Config struct {
	// Protocol is security.protocol, upper case; "" means PLAINTEXT.
	Protocol string
	// Mechanism is sasl.mechanism, upper case; set exactly when Protocol
	// is SASL_PLAINTEXT or SASL_SSL.
	Mechanism          string
	Username, Password string
	// ClientID is client.id; "" keeps franz-go's default.
	ClientID string
	// MetricsPush is enable.metrics.push: send KIP-714 client metrics to
	// a broker that subscribes to them. Off unless set to true, unlike
	// Java and librdkafka: the executor exports its own metrics, and a
	// subscribed client rolls its metrics up and sends them every push
	// interval from each of its clients (the embedded broker subscribes
	// every client to all of them: ~25 MB allocated per 30 s while
	// draining a backlog, BENCHMARKS.md "Round 7 (mem)").
	MetricsPush bool

	tls *tls.Config // nil unless Protocol is SSL or SASL_SSL
}

// New checks props and builds their Config. A property given twice takes
// its last value, so flags listed after a file override it. Every problem
// is reported, each as an *Error naming the property and where it was
// written; the password is never repeated in a message.
func New(props []Property) (*Config, error) {
	last := map[string]Property{}
	var errs []error
	for _, p := range props {
		key := strings.TrimSpace(p.Key)
		if canonical, ok := aliases[key]; ok {
			key = canonical
		}
		if !slices.Contains(known, key) {
			msg := "unknown property"
			if hint, ok := unsupportedHints[key]; ok {
				msg = "not supported: " + hint
			} else if key == "" {
				msg = "empty property name"
			} else {
				msg += " (supported: " + strings.Join(known, ", ") + ")"
			}
			errs = append(errs, &Error{Property: key, Source: p.Source, Msg: msg})
			continue
		}
		p.Key = key
		last[key] = p
	}
	c := &Config{}
	fail := func(key, format string, args ...any) {
		errs = append(errs, &Error{Property: key, Source: last[key].Source, Msg: fmt.Sprintf(format, args...)})
	}
	get := func(key string) (string, bool) {
		p, ok := last[key]
		return p.Value, ok
	}

	proto, _ := get(propSecurityProtocol)
	c.Protocol = strings.ToUpper(proto)
	switch c.Protocol {
	case "", protoPlaintext, protoSSL, protoSASLPlaintext, protoSASLSSL:
	default:
		fail(propSecurityProtocol, "%q is not one of %s, %s, %s, %s", proto, protoPlaintext, protoSSL, protoSASLPlaintext, protoSASLSSL)
	}
	if c.Protocol == protoPlaintext {
		c.Protocol = ""
	}
	isSASL := c.Protocol == protoSASLPlaintext || c.Protocol == protoSASLSSL
	isTLS := c.Protocol == protoSSL || c.Protocol == protoSASLSSL

	mech, hasMech := get(propSASLMechanism)
	c.Username, _ = get(propSASLUsername)
	c.Password, _ = get(propSASLPassword)
	if isSASL {
		c.Mechanism = strings.ToUpper(mech)
		switch {
		case !hasMech:
			fail(propSecurityProtocol, "%s needs %s (%s, %s or %s)", c.Protocol, propSASLMechanism, mechPlain, mechScramSHA256, mechScramSHA512)
		case c.Mechanism != mechPlain && c.Mechanism != mechScramSHA256 && c.Mechanism != mechScramSHA512:
			fail(propSASLMechanism, "%q is not supported (want %s, %s or %s)", mech, mechPlain, mechScramSHA256, mechScramSHA512)
		}
		for _, k := range []string{propSASLUsername, propSASLPassword} {
			if v, ok := get(k); !ok || v == "" {
				fail(k, "required with security.protocol %s", c.Protocol)
			}
		}
	} else {
		for _, k := range []string{propSASLMechanism, propSASLUsername, propSASLPassword} {
			if _, ok := last[k]; ok {
				fail(k, "set, but security.protocol is %s; use %s or %s to authenticate", orPlaintext(c.Protocol), protoSASLSSL, protoSASLPlaintext)
			}
		}
	}

	if isTLS {
		t, terrs := buildTLS(last)
		c.tls = t
		errs = append(errs, terrs...)
	} else {
		for _, k := range []string{propSSLCALocation, propSSLCertificateLocation, propSSLKeyLocation, propSSLEndpointIDAlgorithm} {
			if _, ok := last[k]; ok {
				fail(k, "set, but security.protocol is %s; use %s or %s for TLS", orPlaintext(c.Protocol), protoSSL, protoSASLSSL)
			}
		}
	}
	c.ClientID, _ = get(propClientID)
	if _, ok := last[propClientID]; ok && strings.TrimSpace(c.ClientID) == "" {
		fail(propClientID, "must not be empty")
	}
	if v, ok := get(propEnableMetricsPush); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			c.MetricsPush = true
		case "false":
		default:
			fail(propEnableMetricsPush, "%q is not true or false", v)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func orPlaintext(proto string) string {
	if proto == "" {
		return protoPlaintext
	}
	return proto
}

// buildTLS reads the CA, certificate and key files now, so a missing or
// malformed file is reported at start-up with its path.
func buildTLS(props map[string]Property) (*tls.Config, []error) {
	var errs []error
	fail := func(key, format string, args ...any) {
		errs = append(errs, &Error{Property: key, Source: props[key].Source, Msg: fmt.Sprintf(format, args...)})
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if p, ok := props[propSSLCALocation]; ok {
		pem, err := readPEMFile(p.Value)
		switch {
		case err != nil:
			fail(propSSLCALocation, "read CA file: %v", err)
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				fail(propSSLCALocation, "%s holds no PEM certificate", p.Value)
			}
			t.RootCAs = pool
		}
	}
	cert, hasCert := props[propSSLCertificateLocation]
	key, hasKey := props[propSSLKeyLocation]
	switch {
	case hasCert && !hasKey:
		fail(propSSLCertificateLocation, "needs %s too (the private key of the client certificate)", propSSLKeyLocation)
	case hasKey && !hasCert:
		fail(propSSLKeyLocation, "needs %s too (the client certificate of the key)", propSSLCertificateLocation)
	case hasCert && hasKey:
		certPEM, err := readPEMFile(cert.Value)
		var keyPEM []byte
		if err == nil {
			keyPEM, err = readPEMFile(key.Value)
		}
		var pair tls.Certificate
		if err == nil {
			pair, err = tls.X509KeyPair(certPEM, keyPEM)
		}
		if err != nil {
			fail(propSSLCertificateLocation, "load client certificate %s with key %s: %v", cert.Value, key.Value, err)
		} else {
			t.Certificates = []tls.Certificate{pair}
		}
	}
	if p, ok := props[propSSLEndpointIDAlgorithm]; ok {
		switch strings.ToLower(p.Value) {
		case "https":
		case "none", "":
			// Java and librdkafka spell "off" as none or the empty
			// string. The chain is still verified against the CA, only
			// the host name is not: franz-go sets ServerName per broker,
			// so verification is done here instead of by crypto/tls.
			t.InsecureSkipVerify = true
			t.VerifyConnection = verifyChainOnly(t.RootCAs)
		default:
			fail(propSSLEndpointIDAlgorithm, "%q is not supported (want https or none)", p.Value)
		}
	}
	return t, errs
}

// maxPEMFile bounds the certificate and key files read: a CA bundle of
// every public root is far below it, and a path such as /dev/zero given
// by mistake fails instead of exhausting memory.
const maxPEMFile = 8 << 20

func readPEMFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxPEMFile {
		return nil, fmt.Errorf("%s is larger than %d MiB: not a PEM file", path, maxPEMFile>>20)
	}
	return b, nil
}

// verifyChainOnly checks the broker's chain against roots (the system pool
// when nil) without checking the host name, which is what
// ssl.endpoint.identification.algorithm=none means: brokers reached by IP
// or through a load balancer whose certificates name other hosts.
func verifyChainOnly(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("kafka broker sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		if err != nil {
			return fmt.Errorf("kafka broker certificate: %w", err)
		}
		return nil
	}
}

// Opts returns the franz-go options of c: TLS dialing, the SASL mechanism,
// the client id, no client metrics unless MetricsPush. Append them after a
// client's other options. A nil Config has the zero Config's. The slice is
// never nil, even when empty: consumer.Config takes nil KafkaOpts for "no
// properties given".
func (c *Config) Opts() []kgo.Opt {
	if c == nil {
		c = &Config{}
	}
	opts := []kgo.Opt{}
	if !c.MetricsPush {
		opts = append(opts, kgo.DisableClientMetrics())
	}
	if c.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(c.tls.Clone()))
	}
	switch c.Mechanism {
	case mechPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism()))
	case mechScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism()))
	case mechScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism()))
	}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	return opts
}

// String describes c without its password, for logs.
func (c *Config) String() string {
	if c == nil {
		return protoPlaintext
	}
	s := orPlaintext(c.Protocol)
	if c.Mechanism != "" {
		s += fmt.Sprintf(" %s user %q", c.Mechanism, c.Username)
	}
	return s
}

// checkTimeout bounds Check when its context has no earlier
// deadline: long enough for a TLS and SASL handshake across regions,
// short enough that a misconfigured process stops instead of seeming hung.
const checkTimeout = 10 * time.Second

// Check builds a client from opts (seed brokers, Opts), Pings with it and
// closes it: the start-up check of a process whose clients are built
// elsewhere.
func Check(ctx context.Context, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	return Ping(ctx, cl)
}

// Ping asks cl's brokers for metadata once, within checkTimeout, 10s (or
// ctx's earlier deadline). franz-go retries a refused login or handshake in
// the background without surfacing it, so a process with a wrong password
// would otherwise wait forever; Ping turns that into an error that carries
// the broker's message (for SASL, its SASL_AUTHENTICATION_FAILED text) and
// says which settings to check. Brokers that close the connection instead
// of answering a failed login (kfake, some proxies) leave only an EOF,
// which Ping explains when SASL is in use.
func Ping(ctx context.Context, cl *kgo.Client) error {
	seeds := strings.Join(seedsOf(cl), ",")
	mechs, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	start := time.Now()
	err := cl.Ping(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("no Kafka broker of %s answered within %s (is the address right, and does security.protocol match the listener? a TLS listener does not answer plaintext): %w",
			seeds, time.Since(start).Round(time.Millisecond), err)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("log in to Kafka %s with %s: check sasl.username, sasl.password and sasl.mechanism: %w", seeds, mechNames(mechs), err)
	case len(mechs) > 0 && closedDuringLogin(err):
		return fmt.Errorf("log in to Kafka %s with %s: the broker closed the connection, which is how some brokers refuse a login: check sasl.username, sasl.password and sasl.mechanism: %w", seeds, mechNames(mechs), err)
	default:
		return fmt.Errorf("connect to Kafka %s: %w", seeds, err)
	}
}

// closedDuringLogin reports whether err is the broker hanging up after the
// connection was set up, which with SASL configured is a refused login.
// kgo's ErrFirstReadEOF is a hang-up on the first request instead (TLS
// expected or not, SASL missing), and already says so.
func closedDuringLogin(err error) bool {
	if _, first := errors.AsType[*kgo.ErrFirstReadEOF](err); first {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// seedsOf returns the seed brokers cl was built with, for messages.
func seedsOf(cl *kgo.Client) []string {
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	return seeds
}

func mechNames(ms []sasl.Mechanism) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name()
	}
	return strings.Join(names, "/")
}

// WireCompression is the batch compression of every producer of Onceflight's
// topics: none. The topics are a wire contract read by clients in other
// languages, and franz-go's default (snappy) is unreadable by common ones
// (kafkajs without a codec plugin, examples/kafkajs).
func WireCompression() kgo.Opt { return kgo.ProducerBatchCompression(kgo.NoCompression()) }
