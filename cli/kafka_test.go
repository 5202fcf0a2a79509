package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/broker"
	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/proctest"
	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/kafkaconf"
)

// execCLI runs a command line in process under ctx (run's own signal
// context cannot be cancelled by a test) and returns its exit code and
// output.
func execCLI(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr testlog.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	_, err := root.ExecuteContextC(ctx)
	code := exitOK
	if err != nil {
		code = exitCode(err)
		fmt.Fprintf(&stderr, "onceflight: %v\n", err)
	}
	return code, stdout.String(), stderr.String()
}

// freeAddr returns a local address nothing listens on right now, outside
// the ports other tests' listeners on :0 are given (proctest.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// serveSecured runs `serve` with conn (the -X flags) against addr in the
// background until the test ends, waits until it is ready and returns a
// channel with its stderr once it has stopped.
func serveSecured(t *testing.T, addr, actions string, conn []string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte(actions), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	args := append([]string{"serve", "--brokers", addr, "--config", cfg, "--data-dir", dir, "--http", httpAddr,
		"--group", "secured", "--partitions", "2", "--session-timeout", "6s", "--executor-id", "secured"}, conn...)
	go func() {
		code, _, errOut := execCLI(ctx, args...)
		done <- fmt.Sprintf("exit %d\n%s", code, errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if out := <-done; t.Failed() {
			t.Logf("serve: %s", out)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case out := <-done:
			done <- out
			t.Fatalf("serve stopped before it was ready: %s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve not ready within 60s")
		}
	}
}

// submitAndAudit submits a command to each action, waits for its outcome,
// and audits the topics, all with the connection flags conn.
func submitAndAudit(t *testing.T, addr string, conn []string, actions ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, action := range actions {
		args := append([]string{"submit", "--brokers", addr, "--action", action, "--entity", fmt.Sprint("order-", i),
			"--key", fmt.Sprint("k-", i), "--data", `{"amount":1}`, "--wait"}, conn...)
		code, out, errOut := execCLI(ctx, args...)
		if code != exitOK || !strings.Contains(out, `"succeeded"`) {
			t.Fatalf("submit %s: exit %d, out %q, stderr %q", action, code, out, errOut)
		}
	}
	code, out, errOut := execCLI(ctx, append([]string{"outcomes", "--brokers", addr, "--offset", "beginning", "--until", "now"}, conn...)...)
	if code != exitOK || strings.Count(out, "\n") != len(actions) {
		t.Fatalf("outcomes: exit %d, out %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = execCLI(ctx, append([]string{"audit", "--brokers", addr, "--group", "secured"}, conn...)...)
	if code != exitOK {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errOut)
	}
}

func TestServeSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			addr := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser(mech, "app", "s3cret"))
			props := filepath.Join(t.TempDir(), "client.properties")
			file := fmt.Sprintf("# test cluster\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism: %s\nsasl.username=app\nsasl.password=wrong\n", mech)
			if err := os.WriteFile(props, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			// The file has the wrong password; -X overrides it.
			conn := []string{"--kafka-config", props, "-X", "sasl.password=s3cret"}

			// The kafka action connects with its own properties, which
			// the actions file gives.
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, mustConf(t, "SASL_PLAINTEXT", mech).Opts()...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "effects"); err != nil {
				t.Fatal(err)
			}
			actions := fmt.Sprintf(`actions:
  noop.ping:
    connector: noop
  events.publish:
    connector: kafka
    topic: effects
    kafka:
      brokers: [%q]
      properties:
        security.protocol: SASL_PLAINTEXT
        sasl.mechanism: %s
        sasl.username: app
        sasl.password: s3cret
`, addr, mech)
			serveSecured(t, addr, actions, conn)
			submitAndAudit(t, addr, conn, "noop.ping", "events.publish")
			n := 0
			err = client.Read(context.Background(), cl, "effects", true, false, func(*kgo.Record) error { n++; return nil })
			if err != nil || n != 1 {
				t.Errorf("the kafka action wrote %d records (%v), want 1", n, err)
			}
		})
	}
}

func mustConf(t *testing.T, kv ...string) *kafkaconf.Config {
	t.Helper()
	c, err := kafkaconf.New([]kafkaconf.Property{
		{Key: "security.protocol", Value: kv[0]}, {Key: "sasl.mechanism", Value: kv[1]},
		{Key: "sasl.username", Value: "app"}, {Key: "sasl.password", Value: "s3cret"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestServeTLS(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	addr := kafkatest.Start(t, kfake.TLS(certs.Server))
	conn := []string{"-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + certs.CA}
	serveSecured(t, addr, "actions:\n  noop.ping:\n    connector: noop\n", conn)
	submitAndAudit(t, addr, conn, "noop.ping")
}

// A wrong password stops serve and every client command at start with the
// login error, instead of leaving them in franz-go's retries.
func TestWrongPassword(t *testing.T) {
	addr := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "app", "s3cret"))
	conn := []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=app", "-X", "sasl.password=wrong"}
	cfg := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte("actions:\n  noop.ping:\n    connector: noop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// resolve checks its key file before it talks to Kafka.
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	if code, _, errOut := runCLI("keygen", "--out", keyFile); code != exitOK {
		t.Fatalf("keygen: exit %d, %s", code, errOut)
	}
	for _, args := range [][]string{
		{"serve", "--config", cfg, "--data-dir", t.TempDir(), "--http", "127.0.0.1:0"},
		{"submit", "--action", "noop.ping", "--entity", "e", "--wait"},
		{"outcomes"},
		{"status", "k"},
		{"resolve", "k", "--as", "failed", "--reason", "r", "--by", "me", "--control-key-file", keyFile},
		{"audit"},
	} {
		code, _, errOut := execCLI(ctx, append(append(args, "--brokers", addr), conn...)...)
		if code != exitError || !strings.Contains(errOut, "log in to Kafka "+addr+" with SCRAM-SHA-512") || strings.Contains(errOut, "wrong") {
			t.Errorf("%s: exit %d, stderr %q", args[0], code, errOut)
		}
	}

	// The executor's own login is right, a kafka action's is not.
	other := kafkatest.Start(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "fx", "right"))
	actions := fmt.Sprintf("actions:\n  fx.send:\n    connector: kafka\n    topic: t\n    kafka:\n      brokers: [%q]\n      properties: {security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN, sasl.username: fx, sasl.password: nope}\n", other)
	if err := os.WriteFile(cfg, []byte(actions), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := execCLI(ctx, "serve", "--config", cfg, "--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--brokers", addr,
		"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=app", "-X", "sasl.password=s3cret")
	if code != exitError || !strings.Contains(errOut, `action "fx.send": log in to Kafka `+other+" with PLAIN") {
		t.Errorf("serve with a kafka action's wrong password: exit %d, stderr %q", code, errOut)
	}
}

func TestKafkaFlagErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	props := filepath.Join(t.TempDir(), "client.properties")
	if err := os.WriteFile(props, []byte("security.protocol=SSL\nssl.truststore.location=/x.jks\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--action", "a", "--entity", "e", "-X", "linger.ms=1"}, `-X: property "linger.ms": unknown property`},
		{[]string{"outcomes", "-X", "sasl.mechanism=PLAIN"}, `security.protocol is PLAINTEXT`},
		{[]string{"status", "k", "--kafka-config", props}, props + `:2: property "ssl.truststore.location": not supported`},
		{[]string{"audit", "-X", "nokey"}, `is not key=value`},
		{[]string{"serve", "-X", "security.protocol=SSL"}, `-X and --kafka-config need --brokers`},
	} {
		code, _, errOut := execCLI(ctx, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// testBroker starts the embedded broker until the test ends and returns
// its address and a client of it.
func testBroker(ctx context.Context, t *testing.T) (string, *kgo.Client) {
	t.Helper()
	b, err := broker.Start(ctx, "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := client.New([]string{b.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return b.Addr(), cl
}
