package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/cli/internal/demo"
	"github.com/onceflight/onceflight/internal/broker"
	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/schemas"
)

func newDemoCmd() *cobra.Command {
	var (
		keep        bool
		serviceOnly bool
		listen      string
		consoleAddr string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run everything on the embedded broker with a demo service, and show the outcomes",
		Long: `Start the embedded broker, one executor and a built-in (deliberately not
idempotent) refunds service, then publish a handful of commands that show a
first execution, a replay, a reused key, an unknown action, a malformed
record, a timeout settled by confirmation, an unresolved record resolved
by an operator, and a suspected duplicate refund (same order_id, another
key) held and then approved by an operator. Operator decisions are signed
with a control key the demo creates, as 'onceflight keygen' does. Prints a table and exits 0 when every outcome is as expected.

With --service-only it runs just the demo refunds service on --listen until
interrupted (POST /refunds, GET /refunds/{key}, POST /messages), for an
executor started elsewhere, as in deploy/compose/.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if serviceOnly {
				return runDemoService(cmd.Context(), cmd.OutOrStdout(), listen)
			}
			if cmd.Flags().Changed("listen") {
				return usageErrorf("--listen is only for --service-only")
			}
			stay := cmd.Flags().Changed("console")
			return runDemo(cmd.Context(), cmd.OutOrStdout(), keep, consoleAddr, stay)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's data directory")
	cmd.Flags().BoolVar(&serviceOnly, "service-only", false, "run only the demo refunds service, on --listen")
	cmd.Flags().StringVar(&consoleAddr, "console", "127.0.0.1:0", "address of the operator console; given, the demo keeps running after the table until interrupted, so the console can be explored")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "address of the demo service with --service-only")
	return cmd
}

type demoStep struct {
	what   string
	cmd    schemas.Command
	raw    *kgo.Record // a malformed record instead of cmd
	want   schemas.Status
	code   string
	replay bool
	// decide, instead of a command, publishes a signed operator decision
	// of this type on key decideKey of entity decideEntity.
	decide, decideKey, decideEntity, decideAs string
	// resolveCause is the id of the command whose record is decided: the
	// decision is published as that command's new outcome.
	resolveCause string
}

func runDemo(ctx context.Context, out io.Writer, keep bool, consoleAddr string, stay bool) error {
	dir, err := os.MkdirTemp("", "onceflight-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	// The demo's own logs would drown the table: warnings only.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slog.SetDefault(log)

	b, err := broker.Start(ctx, "127.0.0.1:0", filepath.Join(dir, "broker"), broker.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close()

	svc := demo.NewService()
	svc.SlowAfterApply = 1500 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	yaml := fmt.Sprintf(`actions:
  noop.ping:
    connector: noop
  payments.refund:
    connector: http
    url: http://%[1]s/refunds
    confirm_url: http://%[1]s/refunds/{key}
    timeout: 500ms
    confirm_timeout: 10s
  payments.order_refund:
    connector: http
    url: http://%[1]s/refunds
    confirm_url: http://%[1]s/refunds/{key}
    timeout: 500ms
    unique_by: [order_id]
    on_duplicate: hold
  messages.send:
    connector: http
    url: http://%[1]s/messages
    timeout: 500ms
`, ln.Addr())
	cfgPath := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}

	// The control key, as `onceflight keygen --out FILE` writes it (Ed25519,
	// private half included; verifiers could do with its public copy): the
	// executor verifies operator decisions with it, the operator signs.
	key, err := schemas.NewOperatorKey("demo-operator")
	if err != nil {
		return err
	}
	keys := &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}
	keyFile := filepath.Join(dir, "control-keys.json")
	if err := os.WriteFile(keyFile, keys.Encode(), 0o600); err != nil {
		return err
	}

	kf := &kafkaFlags{Brokers: []string{b.Addr()}, Topics: schemas.DefaultTopics()}
	runCtx, stopServe := context.WithCancel(ctx)
	serveDone := make(chan error, 1)
	httpAddr := make(chan string, 1)
	consoleURL := make(chan string, 1)
	go func() {
		serveDone <- runServe(runCtx, &serveOptions{
			kf: kf, cfg: cfg, group: "onceflight-demo", httpAddr: "127.0.0.1:0", dataDir: filepath.Join(dir, "executor"),
			executorID: "demo", controlKeyFile: keyFile, sessionTimeout: 6 * time.Second, clockDrift: 200 * time.Millisecond,
			maxInflight: 16, partitions: 3, maxDataBytes: schemas.DefaultMaxDataBytes,
			started:     func(_ []string, addr string) { httpAddr <- addr },
			consoleAddr: consoleAddr, consoleStarted: func(addr string) { consoleURL <- "http://" + addr + "/" },
		})
	}()
	defer func() {
		stopServe()
		<-serveDone
	}()
	var api string
	select {
	case api = <-httpAddr:
	case err := <-serveDone:
		return fmt.Errorf("executor: %w", err)
	}
	if err := waitReady(ctx, "http://"+api+"/readyz"); err != nil {
		return err
	}
	fmt.Fprintf(out, "operator console: %s\n\n", <-consoleURL)

	cl, err := client.New(kf.Brokers)
	if err != nil {
		return err
	}
	defer cl.Close()

	data := func(s string) json.RawMessage { return json.RawMessage(s) }
	refund := schemas.Command{Source: "https://shop.example/demo", Type: "payments.refund", Subject: "order-1042", IdempotencyKey: "refund-1042", Data: data(`{"amount":25}`)}
	steps := []demoStep{
		{what: "first execution", cmd: refund, want: schemas.StatusSucceeded},
		{what: "same key again", cmd: refund, want: schemas.StatusSucceeded, replay: true},
		{what: "same key, other data", cmd: withData(refund, `{"amount":99}`), want: schemas.StatusRejected, code: schemas.CodeKeyReused},
		{what: "unknown action", cmd: schemas.Command{Source: "demo", Type: "payments.teleport", Subject: "order-7", IdempotencyKey: "tp-7"}, want: schemas.StatusRejected, code: schemas.CodeUnknownAction},
		{what: "malformed record", raw: &kgo.Record{Key: []byte("order-8"), Value: []byte(`{"not":"a cloudevent"`)}, want: schemas.StatusRejected, code: schemas.CodeInvalidCommand},
		{what: "timeout, then confirmed", cmd: schemas.Command{Source: "demo", Type: "payments.refund", Subject: "order-2001", IdempotencyKey: "refund-2001", Data: data(`{"amount":40,"slow":true}`)}, want: schemas.StatusSucceeded},
		{what: "500 after sending, no confirm", cmd: schemas.Command{Source: "demo", Type: "messages.send", Subject: "customer-9", IdempotencyKey: "msg-9", Data: data(`{"text":"your refund is on its way"}`)}, want: schemas.StatusUnresolved, code: schemas.CodeAmbiguous},
		{what: "repeat of unresolved key", cmd: schemas.Command{Source: "demo", Type: "messages.send", Subject: "customer-9", IdempotencyKey: "msg-9", Data: data(`{"text":"your refund is on its way"}`)}, want: schemas.StatusUnresolved, replay: true},
		{what: "operator resolves it", decide: schemas.TypeResolve, decideKey: "msg-9", decideEntity: "customer-9", decideAs: "succeeded", resolveCause: "demo-6", want: schemas.StatusSucceeded},
		{what: "refund for order o-77", cmd: schemas.Command{Source: "demo", Type: "payments.order_refund", Subject: "customer-77", IdempotencyKey: "refund-o77-a", Data: data(`{"order_id":"o-77","amount":30}`)}, want: schemas.StatusSucceeded},
		{what: "same order, another key: held", cmd: schemas.Command{Source: "demo", Type: "payments.order_refund", Subject: "customer-77", IdempotencyKey: "refund-o77-b", Data: data(`{"order_id":"o-77","amount":30}`)}, want: schemas.StatusHeld, code: schemas.CodeDuplicateBusinessKey},
		{what: "operator approves it", decide: schemas.TypeApprove, decideKey: "refund-o77-b", decideEntity: "customer-77", resolveCause: "demo-10", want: schemas.StatusSucceeded},
	}

	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tACTION\tKEY\tSTATUS\tREPLAYED\tCODE\tEFFECTS")
	var failed []string
	var effected []string // keys with an effect column, in table order
	for i, st := range steps {
		o, err := demoRun(ctx, cl, kf.Topics, keys, i, st)
		if err != nil {
			return fmt.Errorf("step %q: %w", st.what, err)
		}
		rec := o.Record
		code := ""
		if rec.Error != nil {
			code = rec.Error.Code
		}
		effects := "-"
		if strings.HasPrefix(rec.Action, "payments.") || strings.HasPrefix(rec.Action, "messages.") {
			effects = fmt.Sprint(svc.Effects(rec.IdempotencyKey))
			if !slices.Contains(effected, rec.IdempotencyKey) {
				effected = append(effected, rec.IdempotencyKey)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\n", st.what, rec.Action, rec.IdempotencyKey, rec.Status, o.Replayed, code, effects)
		if rec.Status != st.want || o.Replayed != st.replay || (st.code != "" && code != st.code) {
			failed = append(failed, fmt.Sprintf("%s: got %s/%s replayed=%v, want %s/%s replayed=%v", st.what, rec.Status, code, o.Replayed, st.want, st.code, st.replay))
		}
	}
	tw.Flush()
	// Every key the table shows an effect column for, with its effects
	// as the service counts them now: one each, never two.
	var counts []string
	for _, k := range effected {
		counts = append(counts, fmt.Sprintf("%s=%d", k, svc.Effects(k)))
	}
	fmt.Fprintf(out, "\neffects at the refunds service: %s (never executed twice; the held duplicate only after its approval)\n", strings.Join(counts, " "))
	fmt.Fprintf(out, "the malformed record is on topic %s with its reason in headers\n", kf.Topics.Deadletter)
	if err := demoInspect(ctx, out, kf.Brokers, cfg, schemas.DefaultMaxDataBytes, "refund-2001", "msg-9"); err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if len(failed) > 0 {
		return errors.New("demo outcomes differ from the expected ones:\n  " + strings.Join(failed, "\n  "))
	}
	if stay {
		// Two executions left waiting, so the console has decisions to
		// offer: an unresolved message and a held duplicate refund.
		left := []demoStep{
			{what: "left unresolved", cmd: schemas.Command{Source: "demo", Type: "messages.send", Subject: "customer-10", IdempotencyKey: "msg-10", Data: data(`{"text":"your parcel has shipped"}`)}, want: schemas.StatusUnresolved},
			{what: "left held", cmd: schemas.Command{Source: "demo", Type: "payments.order_refund", Subject: "customer-77", IdempotencyKey: "refund-o77-c", Data: data(`{"order_id":"o-77","amount":30}`)}, want: schemas.StatusHeld},
		}
		for i, st := range left {
			if _, err := demoRun(ctx, cl, kf.Topics, keys, len(steps)+i, st); err != nil {
				return fmt.Errorf("step %q: %w", st.what, err)
			}
		}
		fmt.Fprintf(out, "\nleft for you in the console: msg-10 (unresolved) and refund-o77-c (held)\nthe demo keeps running for the console; Ctrl-C ends it\n")
		<-ctx.Done()
	}
	return nil
}

func withData(c schemas.Command, d string) schemas.Command {
	c.Data = json.RawMessage(d)
	return c
}

// demoRun publishes one step and waits for its outcome.
func demoRun(ctx context.Context, cl *kgo.Client, t schemas.Topics, keys *schemas.ControlKeys, i int, st demoStep) (schemas.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	from, err := client.EndOffsets(ctx, cl, t.Outcomes)
	if err != nil {
		return schemas.Outcome{}, err
	}
	var r *kgo.Record
	causation := ""
	switch {
	case st.raw != nil:
		r = st.raw
	case st.decide != "":
		id := fmt.Sprintf("demo-decision-%d", i)
		d, _ := json.Marshal(schemas.Decision{Key: st.decideKey, As: st.decideAs, Reason: "checked by the demo operator", By: "demo-operator",
			NotAfter: time.Now().Add(schemas.DecisionValidity).UTC().Truncate(time.Second)})
		c := schemas.Command{ID: id, Source: "onceflight-cli", Type: st.decide, Subject: st.decideEntity,
			IdempotencyKey: st.decide + "/" + st.decideKey + "/" + id, Data: d}
		if err := keys.SignControl(&c); err != nil {
			return schemas.Outcome{}, err
		}
		if r, err = schemas.EncodeCommand(c, schemas.Binary); err != nil {
			return schemas.Outcome{}, err
		}
		causation = id
	default:
		c := st.cmd
		c.ID = fmt.Sprintf("demo-%d", i)
		if r, err = schemas.EncodeCommand(c, schemas.Binary); err != nil {
			return schemas.Outcome{}, err
		}
		causation = c.ID
	}
	r.Topic = t.Commands
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return schemas.Outcome{}, err
	}
	if st.raw != nil {
		causation = fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	}
	if st.decide != "" {
		// The decision's own outcome, then the original command's new one.
		o, err := client.WaitOutcome(ctx, cl, t.Outcomes, causation, from)
		if err != nil {
			return o, err
		}
		if o.Record.Status != schemas.StatusSucceeded {
			return o, fmt.Errorf("%s refused: %+v", st.decide, o.Record.Error)
		}
		return client.WaitOutcome(ctx, cl, t.Outcomes, st.resolveCause, from)
	}
	return client.WaitOutcome(ctx, cl, t.Outcomes, causation, from)
}

func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("executor not ready after 30s: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runDemoService serves the demo refunds service on listen until ctx ends.
// It lets the compose stack show the demo's service behind real executors
// without a second program to build.
func runDemoService(ctx context.Context, out io.Writer, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	hs := &http.Server{Handler: demo.NewService().Handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(out, "demo refunds service listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("demo service: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("demo service shutdown: %w", err)
	}
	return nil
}
