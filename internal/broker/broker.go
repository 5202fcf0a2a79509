// Package broker runs Onceflight's embedded development broker: kfake, the
// Kafka-protocol fake from franz-go, as a single node with its log persisted
// under a data directory.
//
// It exists so that `onceflight serve`, `onceflight broker` and
// `onceflight demo` work on a laptop or in CI with nothing else installed.
// It is not a production broker: one node, no replication, and unless
// SyncWrites is given its durability is the page cache's (it survives a
// process crash, not a host crash). Production deployments
// point --brokers at Kafka or Redpanda instead.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/internal/dirlock"
)

// MinSessionTimeout is the shortest consumer-group session timeout the
// embedded broker accepts. Kafka's (and kfake's) default minimum is 6s; we
// allow far less so tests and demos can fence a paused owner in about a
// second instead of waiting out the production default.
const MinSessionTimeout = 500 * time.Millisecond

// Broker is a running embedded broker. Close it to flush its state to disk.
type Broker struct {
	cluster *kfake.Cluster
	addr    string
	log     *slog.Logger
	// lock keeps other brokers out of the data directory until Close has
	// written the state kfake keeps in memory.
	lock *dirlock.Lock
}

// Option adjusts the embedded broker.
type Option func(*config)

type config struct {
	log        *slog.Logger
	advertise  string
	syncWrites bool
	partitions int
}

// WithLogger routes the broker's own logs (warnings and errors only; kfake's
// info level logs every request) to l. The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// Advertise sets the host:port the broker tells clients to connect to,
// overriding the listen address. Kafka clients reconnect to the advertised
// address after bootstrap, so listening on 0.0.0.0 or behind a proxy needs
// an address that clients can actually reach.
func Advertise(hostport string) Option {
	return func(c *config) { c.advertise = hostport }
}

// SyncWrites makes every produced batch fsync before it is acknowledged. It
// costs throughput (about 5x fewer exactly-once records/s at 100 records
// per transaction, measured on this broker) and buys surviving a host crash.
func SyncWrites() Option {
	return func(c *config) { c.syncWrites = true }
}

// DefaultPartitions sets the partition count of topics created without an
// explicit count (auto-created, or CreateTopics with -1), overriding kfake's
// default of 10.
func DefaultPartitions(n int) Option {
	return func(c *config) { c.partitions = n }
}

// Start starts one broker listening exactly on addr (host:port; port 0 picks
// a free port, see Addr) with its state under dataDir, reloading whatever a
// previous broker left there. ctx bounds only the start itself. A data
// directory another process holds is refused with a *dirlock.HeldError
// naming it and the holder's PID: two brokers on one directory would
// overwrite each other's log.
func Start(ctx context.Context, addr, dataDir string, opts ...Option) (*Broker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := config{log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	if dataDir == "" {
		return nil, errors.New("broker: empty data directory")
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: data directory: %w", err)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("broker: listen address %q: %w", addr, err)
	}
	lock, err := dirlock.Acquire(dataDir)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	started := false
	defer func() {
		if !started {
			_ = lock.Release()
		}
	}()

	// kfake always asks its listen function for 127.0.0.1:<port>. We
	// ignore that address and listen on the one we were given, so the
	// broker can bind another interface. We listen before starting kfake
	// so that a busy port fails here with a plain error.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", addr, err)
	}
	var listener net.Listener = ln
	if cfg.advertise != "" {
		ta, err := net.ResolveTCPAddr("tcp", cfg.advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("broker: advertised address %q: %w", cfg.advertise, err)
		}
		// kfake advertises the listener's Addr() in metadata.
		listener = advertisedListener{ln, ta}
	}
	used := false
	listen := func(string, string) (net.Listener, error) {
		if used {
			return nil, errors.New("broker: embedded broker has exactly one listener")
		}
		used = true
		return listener, nil
	}

	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(listen),
		kfake.DataDir(dataDir),
		kfake.ClusterID("onceflight-dev"),
		kfake.GroupMinSessionTimeout(MinSessionTimeout),
		kfake.WithLogger(slogAdapter{cfg.log}),
		// Like Kafka's auto.create.topics.enable default; a client only
		// gets a topic created this way if it asks for it.
		kfake.AllowAutoTopicCreation(),
		// Transactions (the executor's exactly-once path) need no
		// option: kfake serves InitProducerID, AddPartitionsToTxn,
		// TxnOffsetCommit and EndTxn, and persists their state in
		// dataDir like everything else.
	}
	if cfg.syncWrites {
		kopts = append(kopts, kfake.SyncWrites())
	}
	if cfg.partitions > 0 {
		kopts = append(kopts, kfake.DefaultNumPartitions(cfg.partitions))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		ln.Close() // kfake closes only listeners it registered.
		return nil, fmt.Errorf("broker: start: %w", err)
	}
	b := &Broker{cluster: c, addr: listener.Addr().String(), log: cfg.log, lock: lock}
	started = true
	b.log.Info("embedded broker started", "addr", b.addr, "data_dir", dataDir)
	return b, nil
}

// Addr returns the host:port the broker listens on (with a port 0 request
// resolved to the real port), or the advertised address if one was set.
func (b *Broker) Addr() string { return b.addr }

// Close stops accepting connections and writes the broker's state to its
// data directory. It is safe to call more than once.
func (b *Broker) Close() {
	b.cluster.Close()
	// After the cluster's own close, which writes the data directory.
	if err := b.lock.Release(); err != nil {
		b.log.Warn("embedded broker", "err", err)
	}
	b.log.Info("embedded broker stopped", "addr", b.addr)
}

// advertisedListener reports a chosen address instead of the bound one,
// because kfake advertises whatever Addr() returns.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// slogAdapter forwards kfake's warnings and errors to slog. kfake's info and
// debug levels describe single requests and would drown everything else.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Logf(level kfake.LogLevel, format string, args ...any) {
	var lvl slog.Level
	switch level {
	case kfake.LogLevelError:
		lvl = slog.LevelError
	case kfake.LogLevelWarn:
		lvl = slog.LevelWarn
	default:
		return
	}
	a.l.Log(context.Background(), lvl, fmt.Sprintf(format, args...), "component", "kfake")
}
