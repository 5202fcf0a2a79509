// Package kafkatest starts kfake clusters secured the way managed Kafka
// services are (SASL users, a TLS listener with a generated CA), for the
// tests of the packages that connect to Kafka. It exists so that those
// tests share one certificate generator instead of each growing its own.
// It also holds the small readers of what a test's executors published
// (HeaderValue, OneOutcomeEach, Gauge) and ShortHeartbeats: they need no
// executor, so the executor's, the audit's and the command line's tests
// share them from this floor.
package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Certs are PEM files written by NewCerts, and the broker side's TLS
// configuration.
type Certs struct {
	// CA is the CA certificate (ssl.ca.location).
	CA string
	// ClientCert and ClientKey are a client certificate signed by the CA
	// and its key (ssl.certificate.location, ssl.key.location).
	ClientCert, ClientKey string
	// Server is a TLS config for kfake.TLS: a certificate for 127.0.0.1
	// and localhost signed by the CA.
	Server *tls.Config
	// ServerOtherName is like Server with a certificate, signed by the
	// CA, that names only broker.invalid: a host name mismatch.
	ServerOtherName *tls.Config
	// OtherCA is a CA that signed nothing here, to test a wrong trust
	// anchor.
	OtherCA string
}

// NewCerts generates a CA, a server certificate for 127.0.0.1 and
// localhost and a client certificate, and writes the PEM files to a
// temporary directory of t.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCA(t, "onceflight test CA")
	_, _, otherCADER := newCA(t, "unrelated CA")
	c := &Certs{
		CA:         writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER),
		OtherCA:    writePEM(t, filepath.Join(dir, "other-ca.pem"), "CERTIFICATE", otherCADER),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	serverDER, serverKey := leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	otherDER, otherKey := leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "broker.invalid"},
		DNSNames:    []string{"broker.invalid"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	clientDER, clientKey := leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "onceflight-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	writePEM(t, c.ClientCert, "CERTIFICATE", clientDER)
	writePEM(t, c.ClientKey, "PRIVATE KEY", clientKey)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	pair := tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: mustParseKey(t, serverKey)}
	c.Server = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	c.ServerOtherName = c.Server.Clone()
	c.ServerOtherName.Certificates = []tls.Certificate{{Certificate: [][]byte{otherDER}, PrivateKey: mustParseKey(t, otherKey)}}
	return c
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

// leaf signs tmpl with the CA and returns the certificate and its PKCS #8
// key, both DER.
func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (der, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if der, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey); err != nil {
		t.Fatal(err)
	}
	if key, err = x509.MarshalPKCS8PrivateKey(k); err != nil {
		t.Fatal(err)
	}
	return der, key
}

func mustParseKey(t testing.TB, der []byte) any {
	t.Helper()
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Start starts a one-broker kfake cluster with opts (e.g. kfake.EnableSASL,
// kfake.Superuser, kfake.TLS), closed when t ends, and returns its address.
// The group session minimum is lowered so executors under test can use
// short sessions.
func Start(t testing.TB, opts ...kfake.Opt) string {
	t.Helper()
	base := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	c, err := kfake.NewCluster(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
