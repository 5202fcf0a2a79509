// Package brokertest starts a real broker — Redpanda or Apache Kafka — in
// a container, for the tests that must meet one: every other test runs on
// kfake, and the hand-issued KIP-447 offset commits, fencing and
// transaction handling are only known to behave the same on a real broker
// where these tests run (.github/workflows/brokers.yml). Where no Docker
// engine answers, a test that asks for a broker is skipped with one line
// that names what is missing.
package brokertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/brokerfeatures"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvImage names the broker image; DefaultImage when unset. Images of
// redpandadata/redpanda run Redpanda; confluentinc/confluent-local (the
// Apache Kafka broker as Confluent packages it: 7.9.x is Kafka 3.9, 8.x is
// Kafka 4.x, where transactions v2 — KIP-890 part 2 — is on by default)
// run Kafka in KRaft mode.
const EnvImage = "ONCEFLIGHT_TEST_BROKER"

// DefaultImage is the broker started when EnvImage is unset.
const DefaultImage = "docker.redpanda.com/redpandadata/redpanda:v24.2.7"

// minSession is the shortest consumer-group session the brokers accept:
// the executors under test run with sessions of 3–6 s, below Kafka's and
// Redpanda's 6 s default minimum.
const minSession = time.Second

// Image returns the broker image the tests use.
func Image() string {
	if v := strings.TrimSpace(os.Getenv(EnvImage)); v != "" {
		return v
	}
	return DefaultImage
}

// Start starts a fresh single-node broker of Image() for this test and
// returns its bootstrap addresses; the container is removed when the test
// ends. Without a Docker engine the test is skipped.
func Start(t testing.TB) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("real broker: skipped in -short mode")
	}
	img := Image()
	if err := dockerHealthy(); err != nil {
		t.Skipf("real broker %s: skipped, no Docker engine answers (%v); these tests run where Docker does (.github/workflows/brokers.yml), or locally with DOCKER_HOST set", img, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		seeds []string
		ctr   testcontainers.Container
		err   error
	)
	switch {
	case strings.Contains(img, "redpanda"):
		var c *redpanda.Container
		c, err = redpanda.Run(ctx, img, redpanda.WithAutoCreateTopics(),
			redpanda.WithBootstrapConfig("group_min_session_timeout_ms", minSession.Milliseconds()))
		if c != nil {
			ctr = c
		}
		if err == nil {
			var seed string
			seed, err = c.KafkaSeedBroker(ctx)
			seeds = []string{seed}
		}
	case strings.Contains(img, "confluent-local"):
		var c *kafka.KafkaContainer
		c, err = kafka.Run(ctx, img, kafka.WithClusterID("onceflight-test"),
			testcontainers.WithEnv(map[string]string{"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": fmt.Sprint(minSession.Milliseconds())}))
		if c != nil {
			ctr = c
		}
		if err == nil {
			seeds, err = c.Brokers(ctx)
		}
	default:
		t.Fatalf("%s=%s: not a broker image these tests know; use redpandadata/redpanda:TAG or confluentinc/confluent-local:TAG", EnvImage, img)
	}
	if ctr != nil {
		t.Cleanup(func() { _ = testcontainers.TerminateContainer(ctr) })
	}
	if err != nil {
		t.Fatalf("start broker %s: %v", img, err)
	}
	t.Logf("real broker %s at %v", img, seeds)
	checkFeatures(t, ctx, img, seeds)
	return seeds
}

// EnvExpectTxV2, when "1", makes Start fail unless the broker has
// transactions v2 (KIP-890 part 2) on: the workflow's Kafka 4.x job sets
// it, so that the suite is known to have met the v2 protocol.
const EnvExpectTxV2 = "ONCEFLIGHT_TEST_BROKER_TXV2"

func checkFeatures(t testing.TB, ctx context.Context, img string, seeds []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := brokerfeatures.Read(ctx, cl)
	if err != nil {
		t.Fatalf("broker %s: %v", img, err)
	}
	t.Logf("broker %s: %s", img, f)
	if os.Getenv(EnvExpectTxV2) == "1" && !f.TransactionsV2() {
		t.Fatalf("broker %s: %s=1 but transactions v2 is off (%s)", img, EnvExpectTxV2, f)
	}
}

// dockerHealthy reports why no Docker engine can run a container, or nil.
// testcontainers panics on some broken setups; that is an answer too.
func dockerHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx)
}
