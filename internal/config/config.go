// Package config loads the actions file (docs/configuration.md): which command types
// Onceflight executes, through which connector, and with which safeguards.
//
// The file is validated completely at load time (URLs, durations, schemas,
// connector-specific fields) so that a mistake stops `onceflight serve` at
// start-up with a precise message instead of turning into `rejected` or
// `unresolved` executions later. All problems are reported at once, each
// naming the file, the action, the field and, where the YAML parser knows it,
// the line and column.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/kafkaconf"
)

// Connector names accepted in an action's `connector` field (docs/connectors.md).
const (
	ConnectorHTTP  = "http"
	ConnectorKafka = "kafka"
	ConnectorNoop  = "noop"
)

// Values of an action's `on_duplicate` field (docs/configuration.md#actions).
const (
	OnDuplicateReject = "reject"
	OnDuplicateHold   = "hold"
)

// Defaults of the actions file that are not a connector policy's. The
// policy defaults (timeout, max_attempts, confirm_timeout, give_up_after)
// are defined once, in internal/connectors/effect (DefaultTimeout, …), which
// applies them to policies built in code too; setDefaults fills them in
// here so that a described action shows the values it runs with.
const (
	DefaultReconcileEvery = 5 * time.Minute
	DefaultReconcileFor   = 24 * time.Hour
)

// DefaultPath is the actions file the commands read without --config.
const DefaultPath = "onceflight.yaml"

// KeyPlaceholder is replaced in ConfirmURL by the URL-escaped idempotency
// key (docs/connectors.md#http). A confirm URL without it could not identify the attempt it
// asks about, so Parse rejects one.
const KeyPlaceholder = "{key}"

// Action is one configured command type. Commands whose CloudEvents `type`
// has no Action are rejected `unknown_action`.
type Action struct {
	// Name is the action's key in the file and the commands' `type`.
	Name string
	// Connector executes the effect: "http", "kafka", "noop", or a kind
	// the program registered (consumer.WithConnector). Required, because
	// guessing how to perform a refund is not an option.
	Connector string
	// Settings are a registered connector's own keys (`settings:`), as
	// written; built-in connectors have fields instead.
	Settings map[string]string
	// URL receives the Execute POST (http only; required there).
	URL string
	// ConfirmURL is queried with GET after an ambiguous result; it must
	// contain {key}. Optional (http only): without it an ambiguous result
	// becomes `unresolved` unless IdempotentByKey is set (G3, docs/guarantees.md#g3-no-blind-retry).
	ConfirmURL string
	// Topic receives the data (kafka only; required there).
	Topic string
	// Brokers and Kafka (kafka only, the `kafka:` section's `brokers` and
	// `properties`) connect the action to another cluster, or to the same
	// one with other credentials. With neither, the action uses the
	// executor's brokers and connection properties. With either, it uses
	// exactly these properties (none: PLAINTEXT), never the executor's, so
	// the executor's credentials are not sent to another cluster; missing
	// Brokers are the executor's. See OwnConnection.
	Brokers []string
	Kafka   *kafkaconf.Config
	// Timeout bounds one attempt; the execution deadline handed to the
	// connector derives from it. Default 2s.
	Timeout time.Duration
	// MaxAttempts bounds executions of one key, counting retries of
	// "not done" answers and re-executions after a negative confirmation.
	// Default 5.
	MaxAttempts int
	// ConfirmTimeout is how long confirmation is retried before the record
	// becomes `unresolved`. Default 30s.
	ConfirmTimeout time.Duration
	// LookupLag is how long after an attempt's deadline (plus
	// --clock-drift) the connector's lookup may still not show a write the
	// attempt made (effect.Policy.LookupLag): a "not found" before then is
	// asked again, not trusted. For an API whose list or search answers
	// from an eventually consistent index. Default 0: the lookup shows a
	// write as soon as it is made.
	LookupLag time.Duration
	// IdempotentByKey declares that the external system deduplicates by
	// the Idempotency-Key header, which makes a blind retry safe.
	IdempotentByKey bool
	// Schema is the JSON Schema file for command data, as written in the
	// file: relative paths are relative to the config file's directory.
	// It is compiled at load; see ValidateData.
	Schema string
	// UniqueBy lists data fields (dotted paths) that, with the entity and
	// the action, identify a business change (docs/configuration.md): at most one
	// execution in_progress, succeeded (within dedupe_retention),
	// unresolved or held per tuple of their canonical values.
	UniqueBy []string
	// Redact lists data fields (dotted paths; a step that meets a list
	// applies to each of its items) that are personal or secret, such as a
	// customer's name or IBAN: the record API and the console show them as
	// "[redacted]" (docs/http.md#who-may-read-the-records). The journal and
	// the connector still get the whole data: redaction is about who reads
	// records over HTTP, not about what the executor stores.
	Redact []string
	// OnDuplicate says what happens to a command that violates UniqueBy:
	// "reject" (default) or "hold" for an operator.
	OnDuplicate string
	// AllowedSources restricts the CloudEvents `source` of commands; each
	// entry is a pattern where * matches any run of characters. Empty
	// means every source is allowed.
	AllowedSources []string
	// System names the external system under `systems:` whose limits
	// and breaker the action's requests go through; several actions
	// calling one system share them. Empty: the action is a system of its
	// own, named after it, limited by the executor's --max-inflight.
	System string
	// GiveUpAfter bounds how long "not done" answers (429, 503,
	// connection refused) are retried and the system's limits waited for,
	// before the record is failed connector_unavailable. Default 1h.
	GiveUpAfter time.Duration
	// EffectsFile (noop only) is a file the noop connector appends to on
	// every execution, so tests and demos can count real executions.
	// Relative paths are resolved against the config file's directory at
	// load, so the value is usable as is.
	EffectsFile string
	// API is how an http action calls a real API: credentials (as
	// references, resolved by the connector), request shape, the API's own
	// lookup (docs/connectors.md#calling-a-real-api). Zero: Onceflight's
	// own protocol.
	API httpconn.API

	schema *jsonschema.Schema
}

// OwnConnection reports whether a kafka action connects with its own
// brokers or properties instead of the executor's (see Brokers).
func (a *Action) OwnConnection() bool { return a.Kafka != nil || len(a.Brokers) > 0 }

// ReconcileConfig controls the background re-confirmation of `unresolved`
// executions: connectors that could not answer within ConfirmTimeout are
// asked again Every interval, for up to For after the execution started.
type ReconcileConfig struct {
	// Every is the interval between reconciliation passes. Default 5m.
	Every time.Duration
	// For is how long after its start an execution is still reconciled
	// automatically; after that only an operator resolves it. Default 24h.
	For time.Duration
}

// Config is a loaded and validated actions file.
type Config struct {
	// Path is the file the configuration came from, as given to Load or
	// Parse; it prefixes error messages and anchors relative paths.
	Path string
	// Actions maps action names (command types) to their configuration.
	Actions map[string]*Action
	// Reconcile controls re-confirmation of unresolved executions.
	Reconcile ReconcileConfig
	// DedupeRetention is how long execution records (with results) are kept
	// and replayed for repeats. Default 7d.
	DedupeRetention time.Duration
	// KeyMemory is how long a key is remembered at all, counted like
	// DedupeRetention from the execution; a repeat after DedupeRetention but
	// within KeyMemory is rejected `key_expired` instead of executing again.
	// It must not be shorter than DedupeRetention. Default 90d.
	KeyMemory time.Duration
	// Systems are the external systems with limits of their own
	// (`systems:`), by name; actions refer to them with System.
	Systems map[string]*System
}

// System is one external system's protection (docs/connectors.md#protecting-the-external-system):
// limits enforced per process, before a request is sent, across all the
// actions that name it.
type System struct {
	Name string
	// MaxConcurrent is the ceiling of requests in flight to the system;
	// the executor adapts below it to the system's answers. 0: the
	// executor's --max-inflight.
	MaxConcurrent int
	// Rate is requests per second; 0: none.
	Rate float64
	// Burst is how many requests may leave at once under Rate; 0: Rate
	// rounded up.
	Burst int
	// BreakerAfter consecutive "down" answers (connection refused, 503)
	// open the breaker; 0: 5.
	BreakerAfter int
	// ProbeEvery is how often an open breaker lets one request through;
	// 0: 1s.
	ProbeEvery time.Duration
	// HTTP is how the http actions naming the system connect to it
	// (`http:`: idle connections kept, timeouts); zero fields take
	// httpconn's defaults.
	HTTP httpconn.Transport
}

// setDefaults fills fields the file left out. Parse calls it after
// validation, which already refused explicit zero or negative values, so a
// zero here always means "not set".
func (c *Config) setDefaults() {
	c.Reconcile.setDefaults()
	if c.DedupeRetention == 0 {
		c.DedupeRetention = wire.DefaultDedupeRetention
	}
	if c.KeyMemory == 0 {
		c.KeyMemory = wire.DefaultKeyMemory
	}
	for _, a := range c.Actions {
		a.setDefaults()
	}
}

// setDefaults fills Every (5m) and For (24h) when unset.
func (r *ReconcileConfig) setDefaults() {
	if r.Every == 0 {
		r.Every = DefaultReconcileEvery
	}
	if r.For == 0 {
		r.For = DefaultReconcileFor
	}
}

// setDefaults fills Timeout (2s), MaxAttempts (5), ConfirmTimeout (30s),
// OnDuplicate ("reject") and GiveUpAfter (1h) when unset.
func (a *Action) setDefaults() {
	if a.Timeout == 0 {
		a.Timeout = effect.DefaultTimeout
	}
	if a.MaxAttempts == 0 {
		a.MaxAttempts = effect.DefaultMaxAttempts
	}
	if a.ConfirmTimeout == 0 {
		a.ConfirmTimeout = effect.DefaultConfirmTimeout
	}
	if a.OnDuplicate == "" {
		a.OnDuplicate = OnDuplicateReject
	}
	if a.GiveUpAfter == 0 {
		a.GiveUpAfter = effect.DefaultGiveUpAfter
	}
}

// Load reads and parses the actions file at path.
func Load(path string) (*Config, error) { return LoadWith(path, nil) }

// LoadWith is Load accepting the registered connector kinds (ParseWith).
func LoadWith(path string, kinds []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseWith(path, data, kinds)
}

// Action returns the action named name, if configured.
func (c *Config) Action(name string) (*Action, bool) {
	a, ok := c.Actions[name]
	return a, ok
}

// ValidateData checks command data against the action's JSON Schema. Without
// a schema every data is accepted here (that data is a JSON object at all is
// the command decoder's concern). Absent data (nil or empty) is validated as
// {} so that a schema with required properties rejects a command without
// data instead of letting it through.
func (a *Action) ValidateData(data json.RawMessage) error {
	if a.schema == nil {
		return nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = json.RawMessage("{}")
	}
	// jsonschema.UnmarshalJSON keeps numbers as json.Number, so large
	// integers are validated exactly rather than as float64.
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("action %q: data is not valid JSON: %w", a.Name, err)
	}
	if err := a.schema.Validate(v); err != nil {
		return fmt.Errorf("action %q: data does not match schema %s: %w", a.Name, a.Schema, err)
	}
	return nil
}

// SourceAllowed reports whether a command with CloudEvents source may run
// this action: true when AllowedSources is empty, otherwise when source
// matches one of the patterns. In a pattern only * is special and matches
// any run of characters, including "/", so "https://shop.example/*" covers
// every path below it; path.Match would stop at "/".
func (a *Action) SourceAllowed(source string) bool {
	if len(a.AllowedSources) == 0 {
		return true
	}
	for _, p := range a.AllowedSources {
		if globMatch(p, source) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern where * matches any (possibly empty)
// run of characters. It is linear-time greedy matching with backtracking to
// the last star, so hostile patterns cannot blow up.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}
