package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/cli/internal/console"
	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/dirlock"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// consoleOptions is what the console needs, from `onceflight console`,
// `serve --console` or the demo.
type consoleOptions struct {
	addr, dataDir string
	brokers       []string
	conn          []kgo.Opt
	topics        schemas.Topics
	group         string
	cfg           *config.Config
	maxDataBytes  int
	auth          *httpauth.Authenticator
	controlKeys   *schemas.ControlKeys
	readOnly      bool
	secureCookies bool
	// auditEvery, if positive, runs the audit of the topics that often;
	// the overview shows the last result.
	auditEvery time.Duration
	// trusted, if set, are the executors' public keys: only journal
	// records their seals cover are believed (docs/console.md#signed-journals).
	trusted *trust.TrustedKeys
	log     *slog.Logger
}

// startConsole starts the projection and the console's HTTP server on
// o.addr and returns the address it listens on and a function that stops
// both (server first, so no page reads a closing index). Its callers have
// refused an open address already (refuseOpenConsole), before anything
// started.
func startConsole(ctx context.Context, o consoleOptions) (string, func(), error) {
	acts, err := inspect.Describe(o.cfg, o.maxDataBytes, settingsOf(ctx).executorOptions()...)
	if err != nil {
		return "", nil, err
	}
	popts := []console.ProjectionOption{console.WithKafkaOpts(o.conn...),
		console.WithTopics(schemas.Topics(o.topics)), console.WithGroup(o.group), console.WithLogger(o.log)}
	if o.trusted != nil {
		popts = append(popts, console.WithTrustedKeys(o.trusted, ""))
	}
	p, err := console.OpenProjection(o.dataDir, o.brokers, popts...)
	if err != nil {
		return "", nil, err
	}
	var decider console.Decider
	var oc *client.Client
	if o.controlKeys != nil && !o.readOnly {
		oc, err = client.New(client.WithBrokers(o.brokers...), client.WithKafkaOpts(o.conn...), client.WithTopics(schemas.Topics(o.topics)),
			client.WithControlKeys(o.controlKeys), client.WithSource("onceflight-console"), client.WithLogger(o.log))
		if err != nil {
			_ = p.Close()
			return "", nil, fmt.Errorf("console client: %w", err)
		}
		decider = console.ClientDecider{C: oc}
	}
	var audits *console.Audits
	if o.auditEvery > 0 {
		audits = console.NewAudits(o.auditEvery, func(ctx context.Context) (audit.Report, error) {
			return audit.Run(ctx, audit.Options{Brokers: o.brokers, Kafka: o.conn, Topics: schemas.Topics(o.topics), Group: o.group,
				MaxDataBytes: o.maxDataBytes, KeyMemory: o.cfg.KeyMemory, ControlKeys: o.controlKeys, Trusted: o.trusted})
		}, o.log)
	}
	srv, err := console.New(console.Config{
		Projection: p, Auth: o.auth, LocalUser: defaultBy(), ReadOnly: o.readOnly, Decider: decider, Actions: acts,
		Redact: func(action string) []string {
			if a, ok := o.cfg.Action(action); ok {
				return a.Redact
			}
			return nil
		},
		SecureCookies: o.secureCookies, Logger: o.log, Audits: audits,
	})
	if err == nil {
		var ln net.Listener
		if ln, err = net.Listen("tcp", o.addr); err == nil {
			pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			runDone := make(chan struct{})
			go func() {
				defer close(runDone)
				if err := p.Run(pctx); err != nil {
					o.log.Error("console projection stopped", "err", err)
				}
			}()
			auditDone := make(chan struct{})
			go func() {
				defer close(auditDone)
				if audits != nil {
					audits.Run(pctx)
				}
			}()
			// Requests live in reqCtx, cancelled first at stop, so the
			// live-update streams end and Shutdown need not wait for them.
			reqCtx, endRequests := context.WithCancel(context.Background())
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return reqCtx }}
			go func() {
				if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					o.log.Error("console server", "err", err)
				}
			}()
			o.log.Info("console listening", "addr", ln.Addr().String(), "auth", o.auth.Describe(), "read_only", o.readOnly, "decisions", decider != nil)
			stop := func() {
				sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
				defer c()
				endRequests()
				_ = hs.Shutdown(sctx)
				_ = hs.Close()
				cancel()
				<-runDone
				<-auditDone
				_ = p.Close()
				if oc != nil {
					oc.Close()
				}
			}
			return ln.Addr().String(), stop, nil
		}
		err = fmt.Errorf("console: listen %s: %w", o.addr, err)
	}
	_ = p.Close()
	if oc != nil {
		oc.Close()
	}
	return "", nil, err
}

func newConsoleCmd() *cobra.Command {
	var (
		addr, dataDir, configPath, group, keyFile string
		trustedFile                               string
		access                                    authFlags
		readOnly, secure                          bool
		maxData                                   int
		auditEvery                                time.Duration
		kf                                        *kafkaFlags
	)
	cmd := &cobra.Command{
		Use:   "console --http ADDR --data-dir DIR",
		Short: "Run the operator console: every execution of the cluster, in a browser",
		Long: `Run the operator console (docs/console.md): it reads the journal and outcome
topics of every partition into a local index under --data-dir (resuming
where it stopped after a restart) and serves pages on --http: an overview,
the executions that need a decision, one execution's timeline, search and
the configured actions. With --control-key-file, operators (token role
operator) resolve, approve, reject and release from the pages; the console
signs the control command and records the logged-in identity as its
author. --read-only hides every decision. With --trusted-keys, only journal
records a trusted executor signature covers are believed; others show as
UNSIGNED and take no decision.

On an address other than loopback it needs --http-token-file or a trusted
proxy header, as serve does.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.Default()
			conn, err := kf.conn()
			if err != nil {
				return err
			}
			cfg, err := loadActions(cmd.Context(), configPath)
			if err != nil {
				return usageError{err}
			}
			authn, err := access.authenticator(log)
			if err != nil {
				return err
			}
			if err := refuseOpenConsole("--http", addr, authn); err != nil {
				return err
			}
			if maxData < 1 {
				// As serve refuses it: the Actions page and the audit would
				// take every command's data as too large.
				return usageErrorf("--max-data-bytes must be at least 1, got %d", maxData)
			}
			if auditEvery < 0 || (auditEvery > 0 && auditEvery < time.Minute) {
				return usageErrorf("--audit-every must be 0 (off) or at least 1m: each audit reads the four topics through, got %s", auditEvery)
			}
			var tk *trust.TrustedKeys
			if trustedFile != "" {
				if tk, err = trust.LoadTrustedKeys(trustedFile); err != nil {
					return usageErrorf("--trusted-keys: %w", err)
				}
			}
			var keys *schemas.ControlKeys
			if keyFile != "" {
				if keys, err = schemas.LoadControlKeys(keyFile); err != nil {
					return usageError{err}
				}
			}
			lock, err := dirlock.Acquire(dataDir)
			if err != nil {
				return fmt.Errorf("--data-dir: %w", err)
			}
			defer func() { _ = lock.Release() }()
			got, stop, err := startConsole(cmd.Context(), consoleOptions{addr: addr, dataDir: dataDir, brokers: kf.Brokers, conn: conn,
				topics: kf.Topics, group: group, cfg: cfg, maxDataBytes: maxData, auth: authn, controlKeys: keys,
				readOnly: readOnly, secureCookies: secure, auditEvery: auditEvery, trusted: tk, log: log})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "console: http://%s/\n", got)
			<-cmd.Context().Done()
			stop()
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&addr, "http", "127.0.0.1:8090", "address of the console's pages")
	fs.StringVar(&dataDir, "data-dir", "./onceflight-console", "directory of the console's index (a cache of the journal and outcomes)")
	fs.StringVar(&configPath, "config", config.DefaultPath, "the executors' actions file: the Actions page and the redact lists")
	fs.StringVar(&group, "group", consumer.Defaults().Group, "the executors' consumer group, whose members the overview shows as partition owners")
	fs.StringVar(&keyFile, "control-key-file", "", "control key file (onceflight keygen) whose last key signs decisions taken in the console; without it the console takes none")
	fs.BoolVar(&readOnly, "read-only", false, "hide and refuse every decision")
	fs.StringVar(&trustedFile, "trusted-keys", "", "trusted-keys file: the executors' public keys (docs/trust.md); only journal records a trusted executor signature covers are shown as an execution's state, others are marked UNSIGNED and take no decision")
	access.addFlags(fs, "file of bearer tokens, one NAME:TOKEN[:ROLE] a line (docs/http.md#bearer-tokens); browsers log in with one; decisions need the role operator")
	fs.StringVar(&access.proxyRole, "http-trusted-proxy-role", "reader", "role of identities from the trusted proxy: reader or operator")
	fs.BoolVar(&secure, "secure-cookies", false, "mark the login cookie Secure (set when users reach the console over HTTPS through a proxy)")
	fs.IntVar(&maxData, "max-data-bytes", schemas.DefaultMaxDataBytes, "the executors' --max-data-bytes, for the Actions page and the audit")
	fs.DurationVar(&auditEvery, "audit-every", 0, "run the audit of the topics (onceflight audit) at start and then this often, and show its last result on the overview; 0: off. Each audit reads the four topics through, a partition at a time (docs/memory.md#audit)")
	return cmd
}
