package kafkaconf

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/kafkatest"
)

func props(kv ...string) []Property {
	var out []Property
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Property{Key: kv[i], Value: kv[i+1], Source: "-X"})
	}
	return out
}

func TestNewRejects(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	notPEM := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		props []Property
		want  []string // all must appear in the error
	}{
		{"unknown", props("linger.ms", "5"), []string{`property "linger.ms"`, "unknown property", "-X: "}},
		{"keystore", props("ssl.keystore.location", "/k.jks"), []string{`"ssl.keystore.location"`, "not supported", "PEM"}},
		{"jaas", props("sasl.jaas.config", "x"), []string{`"sasl.jaas.config"`, "sasl.username"}},
		{"bad protocol", props("security.protocol", "TLS"), []string{`"security.protocol"`, `"TLS"`, "SASL_SSL"}},
		{"sasl without mechanism", props("security.protocol", "SASL_SSL", "sasl.username", "u", "sasl.password", "p"), []string{"needs sasl.mechanism"}},
		{"gssapi", props("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "GSSAPI", "sasl.username", "u", "sasl.password", "p"), []string{`"GSSAPI" is not supported`}},
		{"no password", props("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN", "sasl.username", "u"), []string{`"sasl.password"`, "required"}},
		{"empty user", props("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN", "sasl.username", "", "sasl.password", "p"), []string{`"sasl.username"`, "required"}},
		{"mechanism on plaintext", props("sasl.mechanism", "PLAIN"), []string{`"sasl.mechanism"`, "security.protocol is PLAINTEXT"}},
		{"password on ssl", props("security.protocol", "SSL", "sasl.password", "secret"), []string{`"sasl.password"`, "security.protocol is SSL"}},
		{"ca on plaintext", props("ssl.ca.location", certs.CA), []string{`"ssl.ca.location"`, "for TLS"}},
		{"ca on sasl plaintext", props("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN", "sasl.username", "u", "sasl.password", "p", "ssl.ca.location", certs.CA), []string{"security.protocol is SASL_PLAINTEXT"}},
		{"unreadable ca", props("security.protocol", "SSL", "ssl.ca.location", missing), []string{`"ssl.ca.location"`, missing}},
		{"ca not pem", props("security.protocol", "SSL", "ssl.ca.location", notPEM), []string{notPEM, "no PEM certificate"}},
		{"cert without key", props("security.protocol", "SSL", "ssl.certificate.location", certs.ClientCert), []string{`"ssl.certificate.location"`, "ssl.key.location"}},
		{"key without cert", props("security.protocol", "SSL", "ssl.key.location", certs.ClientKey), []string{`"ssl.key.location"`, "ssl.certificate.location"}},
		{"cert with wrong key", props("security.protocol", "SSL", "ssl.certificate.location", certs.ClientCert, "ssl.key.location", certs.CA), []string{"load client certificate", certs.ClientCert}},
		{"endless ca", props("security.protocol", "SSL", "ssl.ca.location", "/dev/zero"), []string{"/dev/zero is larger than 8 MiB"}},
		{"missing key file", props("security.protocol", "SSL", "ssl.certificate.location", certs.ClientCert, "ssl.key.location", missing), []string{"load client certificate", missing}},
		{"endpoint algorithm", props("security.protocol", "SSL", "ssl.endpoint.identification.algorithm", "dns"), []string{`"dns" is not supported`}},
		{"empty client id", props("client.id", " "), []string{`"client.id"`, "must not be empty"}},
		{"empty key", props(" ", "x"), []string{"empty property name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.props)
			if err == nil {
				t.Fatalf("New accepted %v: %v", tc.props, c)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Errorf("error %v is not a *Error", err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	_, err := New(props("linger.ms", "1", "acks", "all", "security.protocol", "nope"))
	for _, w := range []string{"linger.ms", "acks", `"nope"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}

func TestNewAccepts(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	c, err := New(props("security.protocol", "sasl_ssl", "sasl.mechanism", "scram-sha-512",
		"sasl.username", "u", "sasl.password", "p", "ssl.ca.location", certs.CA, "client.id", "me",
		"ssl.certificate.location", certs.ClientCert, "ssl.key.location", certs.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	if c.Protocol != protoSASLSSL || c.Mechanism != mechScramSHA512 || c.ClientID != "me" {
		t.Errorf("config = %+v", c)
	}
	if tc := c.tlsConfig(); tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.InsecureSkipVerify {
		t.Errorf("TLS = %+v", tc)
	}
	if len(c.Opts()) != 4 {
		t.Errorf("Opts: %d options, want TLS, SASL, client id and no client metrics", len(c.Opts()))
	}
	if strings.Contains(c.String(), "p\"") || !strings.Contains(c.String(), "SCRAM-SHA-512") {
		t.Errorf("String() = %q", c.String())
	}

	c, err = New(props("security.protocol", "SASL_PLAINTEXT", "sasl.mechanisms", "PLAIN", "sasl.username", "u", "sasl.password", "p"))
	if err != nil || c.Mechanism != mechPlain {
		t.Errorf("librdkafka's sasl.mechanisms: %+v, %v", c, err)
	}

	// Later properties win: a flag after the file turns TLS off.
	c, err = New(append(props("security.protocol", "SSL"), props("security.protocol", "PLAINTEXT")...))
	if err != nil || c.tlsConfig() != nil || len(c.Opts()) != 1 {
		t.Errorf("override: %+v, %v", c, err)
	}
	var nilConf *Config
	if len(nilConf.Opts()) != 1 || nilConf.tlsConfig() != nil {
		t.Error("a nil Config has other options than the zero Config")
	}
}

// TestMetricsPush: KIP-714 client metrics are off unless
// enable.metrics.push=true asks for them, for a zero or nil Config too.
func TestMetricsPush(t *testing.T) {
	disabled := func(c *Config) bool {
		t.Helper()
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, c.Opts()...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return cl.OptValue(kgo.DisableClientMetrics).(bool)
	}
	for _, tc := range []struct {
		props []Property
		want  bool // disabled
	}{
		{nil, true},
		{props("enable.metrics.push", "false"), true},
		{props("enable.metrics.push", "true"), false},
		{props("enable.metrics.push", " TRUE "), false},
	} {
		c, err := New(tc.props)
		if err != nil {
			t.Fatal(err)
		}
		if c.Opts() == nil {
			t.Errorf("%v: Opts is nil", tc.props)
		}
		if got := disabled(c); got != tc.want {
			t.Errorf("%v: client metrics disabled = %v, want %v", tc.props, got, tc.want)
		}
	}
	if !disabled(nil) {
		t.Error("a nil Config pushes client metrics")
	}
	if _, err := New(props("enable.metrics.push", "yes")); err == nil || !strings.Contains(err.Error(), `"yes" is not true or false`) {
		t.Errorf("enable.metrics.push=yes: %v", err)
	}
}

func TestParseProperties(t *testing.T) {
	in := "\ufeff# a comment\n! another\n\n  security.protocol = SASL_SSL\nsasl.mechanism: PLAIN\nsasl.password=a=b:c \n"
	got, err := parseProperties("k.properties", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Property{
		{Key: "security.protocol", Value: "SASL_SSL", Source: "k.properties:4"},
		{Key: "sasl.mechanism", Value: "PLAIN", Source: "k.properties:5"},
		{Key: "sasl.password", Value: "a=b:c", Source: "k.properties:6"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("property %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	for in, w := range map[string]string{
		"a=1\nsecurity.protocol SSL\n": "k.properties:2: expected key=value",
		"=x\n":                         "k.properties:1: missing property name",
		"sasl mechanism=PLAIN\n":       "k.properties:1: property name \"sasl mechanism\" contains white space",
		"a=b\x00\n":                    "k.properties:1: control character",
		"sasl.password=abc\\\ndef\n":   "k.properties:1: property \"sasl.password\": line continuations",
		strings.Repeat("x", 70<<10):    "k.properties:1: read",
		" \ufeffclient.id=x\n":         "k.properties:1: byte-order mark",
		"a=1\n\ufeffb=2\n":             "k.properties:2: byte-order mark",
	} {
		if _, err := parseProperties("k.properties", strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("ParseProperties(%.20q) error = %v, want %q", in, err, w)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "client.properties")
	if err := os.WriteFile(file, []byte("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\nlinger.ms=5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(file, nil)
	if err == nil || !strings.Contains(err.Error(), file+":5: property \"linger.ms\": unknown property") {
		t.Fatalf("unknown property in a file: %v", err)
	}
	if err := os.WriteFile(file, []byte("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(file, []string{"sasl.mechanism=SCRAM-SHA-256", "sasl.password=x=y"})
	if err != nil || c.Mechanism != mechScramSHA256 || c.Password != "x=y" {
		t.Fatalf("-X over the file: %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing"), nil); err == nil || !strings.Contains(err.Error(), "--kafka-config") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load("", []string{"sasl.password"}); err == nil || !strings.Contains(err.Error(), "not key=value") {
		t.Errorf("-X without =: %v", err)
	}
	if _, err := Load("", []string{"sasl.passwordsecret"}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("-X without = repeats what may be a password: %v", err)
	}
}

// connect checks and uses a client built from the properties against addr:
// Check must pass and a produce must be acknowledged.
func connect(t *testing.T, addr string, kv ...string) error {
	t.Helper()
	c, err := New(props(kv...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation()}, c.Opts()...)
	if err := Check(ctx, opts...); err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr()
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{mechPlain, mechScramSHA256, mechScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			addr := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser(mech, "app", "s3cret"))
			base := []string{"security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", mech, "sasl.username", "app"}
			if err := connect(t, addr, append(base, "sasl.password", "s3cret")...); err != nil {
				t.Fatalf("right password: %v", err)
			}
			err := connect(t, addr, append(base, "sasl.password", "wrong")...)
			if err == nil || !strings.Contains(err.Error(), "check sasl.username, sasl.password") || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), mech) {
				t.Fatalf("wrong password: %v", err)
			}
		})
	}
}

func TestTLS(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	addr := kafkatest.Start(t, kfake.TLS(certs.Server))
	if err := connect(t, addr, "security.protocol", "SSL", "ssl.ca.location", certs.CA); err != nil {
		t.Fatalf("TLS: %v", err)
	}
	err := connect(t, addr, "security.protocol", "SSL", "ssl.ca.location", certs.OtherCA)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS with a CA that did not sign the broker: %v", err)
	}
	err = connect(t, addr, "security.protocol", "SSL", "ssl.ca.location", certs.OtherCA, "ssl.endpoint.identification.algorithm", "none")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("no host name check must still check the chain: %v", err)
	}

	// A broker whose certificate names another host passes only without
	// host name verification.
	other := kafkatest.Start(t, kfake.TLS(certs.ServerOtherName))
	if err := connect(t, other, "security.protocol", "SSL", "ssl.ca.location", certs.CA); err == nil || !strings.Contains(err.Error(), "doesn't contain any IP SANs") {
		t.Fatalf("host name not verified: %v", err)
	}
	if err := connect(t, other, "security.protocol", "SSL", "ssl.ca.location", certs.CA, "ssl.endpoint.identification.algorithm", "none"); err != nil {
		t.Fatalf("algorithm none: %v", err)
	}
}

func TestMutualTLSAndSASLSSL(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	server := certs.Server.Clone()
	server.ClientAuth = tls.RequireAndVerifyClientCert
	addr := kafkatest.Start(t, kfake.TLS(server), kfake.EnableSASL(), kfake.Superuser(mechScramSHA512, "app", "pw"))
	base := []string{"security.protocol", "SASL_SSL", "sasl.mechanism", "SCRAM-SHA-512", "sasl.username", "app", "sasl.password", "pw", "ssl.ca.location", certs.CA}
	if err := connect(t, addr, append(base, "ssl.certificate.location", certs.ClientCert, "ssl.key.location", certs.ClientKey)...); err != nil {
		t.Fatalf("mutual TLS with SASL: %v", err)
	}
	if err := connect(t, addr, base...); err == nil {
		t.Fatal("a broker requiring a client certificate accepted none")
	}
}

// A plaintext client at a TLS listener fails with franz-go's explanation,
// not a hang and not a wrong hint about the password.
func TestCheckPlaintextAtTLSListener(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	addr := kafkatest.Start(t, kfake.TLS(certs.Server))
	for _, kv := range [][]string{nil, {"security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN", "sasl.username", "u", "sasl.password", "p"}} {
		err := connect(t, addr, kv...)
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "TLS") || strings.Contains(err.Error(), "check sasl") {
			t.Errorf("%v: Check = %v", kv, err)
		}
	}
}

// The README's example properties file must be one this package accepts;
// only its CA file does not exist here.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```properties\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("README has no properties example")
	}
	props, err := parseProperties("README.md", strings.NewReader(block))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(props)
	if err == nil || !strings.Contains(err.Error(), `property "ssl.ca.location": read CA file`) || strings.Count(err.Error(), "property") != 1 {
		t.Fatalf("README example: %v", err)
	}
}

// tlsConfig is c's TLS configuration, or nil without TLS: what Opts dials
// with, for the tests to inspect.
func (c *Config) tlsConfig() *tls.Config {
	if c == nil || c.tls == nil {
		return nil
	}
	return c.tls
}
