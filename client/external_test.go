package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExternalModule builds and runs, as another module would, a program
// that imports client and audit: a module in a temp dir with a replace
// directive pointing at this repository. It proves the packages are
// importable from outside (nothing they need is internal to callers) and
// work: the program's test submits and awaits through client against kfake,
// with a stand-in executor, subscribes, and audits with audit.Run.
//
// It needs no network: GOPROXY=off and GOFLAGS=-mod=mod resolve every
// module from the module cache that building this repository filled. A
// toolchain that cannot resolve offline skips, saying so.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second module; skipped with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain in PATH")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/onceflight-user\n\ngo 1.26.0\n\n" +
		"require github.com/onceflight/onceflight v0.0.0\n\n" +
		"replace github.com/onceflight/onceflight => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"go.mod":       gomod,
		"go.sum":       string(sum), // the repository's hashes: same modules
		"user_test.go": externalTest,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("mod", "tidy"); err != nil {
		if strings.Contains(out, "GOPROXY=off") || strings.Contains(out, "module lookup disabled") {
			t.Skipf("the module cache cannot resolve the external module's dependencies offline:\n%s", out)
		}
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	if out, err := run("vet", "./..."); err != nil {
		t.Fatalf("go vet of the external module: %v\n%s", err, out)
	}
	if out, err := run("test", "-count=1", "./..."); err != nil {
		t.Fatalf("the external module's test failed: %v\n%s", err, out)
	}
}

// externalTest is the other module's test: only public packages.
const externalTest = `package user

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

func TestUseFromAnotherModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tp := client.DefaultTopics()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, tp.Commands, tp.Outcomes, tp.Journal, tp.Deadletter))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	conf, err := kafkaconf.FromMap(map[string]string{"client.id": "user"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.WithBrokers(brokers...), client.WithKafkaConfig(conf), client.WithSource("user"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	// A stand-in executor: answer each command with a succeeded outcome.
	go func() {
		in, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(tp.Commands), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Error(err)
			return
		}
		defer in.Close()
		for {
			fs := in.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				cmd, err := schemas.DecodeCommand(r, 0)
				if err != nil {
					t.Error(err)
					return
				}
				o, _ := schemas.EncodeOutcome(schemas.Record{IdempotencyKey: cmd.IdempotencyKey, Entity: cmd.Subject,
					Action: cmd.Type, Status: schemas.StatusSucceeded, Command: schemas.CommandRef{ID: cmd.ID}}, cmd.ID, false)
				o.Topic = tp.Outcomes
				in.Produce(ctx, o, nil)
			})
		}
	}()

	p, err := c.Submit(ctx, client.Command{Action: "noop.ping", Entity: "order-1", Key: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := p.Wait(ctx)
	if err != nil || o.Status != schemas.StatusSucceeded || o.Key != "k-1" {
		t.Fatalf("Wait = %+v, %v", o, err)
	}
	n := 0
	for o, err := range c.ReadOutcomes(ctx, client.Range{Start: client.FromBeginning()}) {
		if err != nil {
			t.Fatal(err)
		}
		if o.CommandID == p.ID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("replay found %d outcomes of the command", n)
	}
	if _, err := c.Status(ctx, "k-1", "order-1"); !errors.Is(err, client.ErrNoRecord) {
		t.Fatalf("Status without a journal = %v, want ErrNoRecord", err)
	}

	// The stand-in writes no journal and commits no offsets: the audit
	// finds the command answered, nothing broken.
	rep, err := audit.Run(ctx, audit.Options{Brokers: brokers, Kafka: conf.Opts(), MaxViolations: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Counts.Commands != 1 || rep.Counts.Outcomes != 1 {
		t.Fatalf("audit: %+v", rep)
	}
}
`
