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
// work: the program's test runs a real executor with a connector of its
// own against kfake, submits and awaits through client, subscribes, and
// audits with audit.Run.
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

// externalTest is the other module's test: only public packages. It runs
// a real executor with a connector kind of its own (consumer.WithConnector,
// configured from the actions file), submits and awaits through client,
// reads the record, subscribes, and audits with audit.Run.
const externalTest = `package user

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

// greeter is this module's own connector: it greets the entity.
type greeter struct{ greeting string }

func (g greeter) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	res, _ := json.Marshal(map[string]string{"said": g.greeting + ", " + req.Entity})
	return connectors.Result{Kind: connectors.Succeeded, Result: res}
}

func TestUseFromAnotherModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	dir := t.TempDir()
	path := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  greet.say:\n    connector: greeter\n    settings: {greeting: hello}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	actions, err := consumer.LoadActions(path, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := consumer.New(consumer.Config{Brokers: brokers, DataDir: filepath.Join(dir, "state"), Partitions: 3, SessionTimeout: 6 * time.Second, ExecutorID: "user",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))},
		actions, consumer.WithRegisterer(prometheus.NewRegistry()),
		consumer.WithConnector("greeter", func(a *consumer.Action) (connectors.Connector, error) {
			return greeter{a.Settings["greeting"]}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ex.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("executor: %v", err)
		}
	}()
	for !ex.Ready() {
		if ctx.Err() != nil {
			t.Fatal("executor not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}

	conf, err := kafkaconf.FromMap(map[string]string{"client.id": "user"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.WithBrokers(brokers...), client.WithKafkaConfig(conf), client.WithSource("user"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Submit(ctx, client.Command{Action: "greet.say", Entity: "order-1", Key: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := p.Wait(ctx)
	if err != nil || o.Status != schemas.StatusSucceeded || o.Key != "k-1" || string(o.Result) != ` + "`" + `{"said":"hello, order-1"}` + "`" + ` {
		t.Fatalf("Wait = %+v, %v", o, err)
	}
	again, err := c.Submit(ctx, client.Command{Action: "greet.say", Entity: "order-1", Key: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := again.Wait(ctx); err != nil || !o.Replayed {
		t.Fatalf("repeat = %+v, %v", o, err)
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
	rec, err := c.Status(ctx, "k-1", "order-1")
	if err != nil || rec.Status != schemas.StatusSucceeded {
		t.Fatalf("Status = %+v, %v", rec, err)
	}
	rep, err := audit.Run(ctx, audit.Options{Brokers: brokers, Kafka: conf.Opts(), MaxViolations: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Counts.Commands != 2 || rep.Counts.Outcomes != 2 || rep.Counts.JournalRecords == 0 {
		t.Fatalf("audit: %+v", rep)
	}
}
`
