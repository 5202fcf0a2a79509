package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/kafkaconf"
)

// fileDoc is the shape of an actions file (docs/configuration.md). A key
// without a field here is refused: a misspelt optional key (`confirm_ulr`)
// would otherwise silently disable a safeguard. Top-level keys starting
// with "x-" are the exception, free to hold anchors shared by actions.
type fileDoc struct {
	Actions   map[string]actionDoc `yaml:"actions"`
	Reconcile struct {
		Every Days `yaml:"every"`
		For   Days `yaml:"for"`
	} `yaml:"reconcile"`
	DedupeRetention Days                 `yaml:"dedupe_retention"`
	KeyMemory       Days                 `yaml:"key_memory"`
	Systems         map[string]systemDoc `yaml:"systems"`
}

// systemDoc is one external system's limits as written; System documents
// the fields.
type systemDoc struct {
	MaxConcurrent int  `yaml:"max_concurrent"`
	Rate          Rate `yaml:"rate"`
	Burst         int  `yaml:"burst"`
	Breaker       struct {
		After      int      `yaml:"after"`
		ProbeEvery Duration `yaml:"probe_every"`
	} `yaml:"breaker"`
	HTTP struct {
		MaxIdleConns        int      `yaml:"max_idle_conns"`
		IdleTimeout         Duration `yaml:"idle_timeout"`
		MaxConns            int      `yaml:"max_conns"`
		DialTimeout         Duration `yaml:"dial_timeout"`
		TLSHandshakeTimeout Duration `yaml:"tls_handshake_timeout"`
		KeepAlive           Duration `yaml:"keep_alive"`
		Client              string   `yaml:"client"`
	} `yaml:"http"`
}

// Rate is requests per second: an integer or a decimal number, positive.
type Rate float64

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (r *Rate) UnmarshalYAML(n ast.Node) error {
	var text string
	switch v := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		text = v.GetToken().Value
	default:
		return errors.New("must be a number of requests per second, such as 50 or 0.5")
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("invalid rate %q", text)
	}
	if f <= 0 {
		return fmt.Errorf("must be positive, got %s", text)
	}
	*r = Rate(f)
	return nil
}

// actionDoc is one action as written; Action documents the fields.
type actionDoc struct {
	Connector       string            `yaml:"connector"`
	URL             string            `yaml:"url"`
	ConfirmURL      string            `yaml:"confirm_url"`
	Topic           string            `yaml:"topic"`
	Kafka           kafkaDoc          `yaml:"kafka"`
	Timeout         Duration          `yaml:"timeout"`
	ConfirmTimeout  Duration          `yaml:"confirm_timeout"`
	LookupLag       Lag               `yaml:"lookup_lag"`
	MaxAttempts     int               `yaml:"max_attempts"`
	IdempotentByKey bool              `yaml:"idempotent_by_key"`
	Schema          string            `yaml:"schema"`
	UniqueBy        []string          `yaml:"unique_by"`
	Redact          []string          `yaml:"redact"`
	OnDuplicate     string            `yaml:"on_duplicate"`
	AllowedSources  []string          `yaml:"allowed_sources"`
	EffectsFile     string            `yaml:"effects_file"`
	Settings        map[string]string `yaml:"settings"`

	// Calling a real API (http only; http.go, Action.API).
	Method            string            `yaml:"method"`
	Body              string            `yaml:"body"`
	BodyTemplate      string            `yaml:"body_template"`
	ContentType       string            `yaml:"content_type"`
	IdempotencyHeader string            `yaml:"idempotency_header"`
	Headers           map[string]string `yaml:"headers"`
	BasicAuth         basicAuthDoc      `yaml:"basic_auth"`
	OAuth2            oauth2Doc         `yaml:"oauth2"`
	TLS               tlsDoc            `yaml:"tls"`
	Signing           signingDoc        `yaml:"signing"`
	Confirm           confirmDoc        `yaml:"confirm"`
	RejectedWhen      string            `yaml:"rejected_when"`
	Result            string            `yaml:"result"`
	Statuses          statusesDoc       `yaml:"statuses"`

	// Per external system limits (docs/connectors.md#protecting-the-external-system).
	System      string   `yaml:"system"`
	GiveUpAfter Duration `yaml:"give_up_after"`
}

// kafkaDoc is a kafka action's own connection:
//
//	kafka:
//	  brokers: [kafka-1.example:9093]
//	  properties:
//	    security.protocol: SASL_SSL
//	    sasl.mechanism: SCRAM-SHA-512
//
// The properties are checked by kafkaconf.New, the parser of the -X and
// --kafka-config flags, so the file accepts exactly what the command line
// does.
type kafkaDoc struct {
	Brokers    []string          `yaml:"brokers"`
	Properties map[string]string `yaml:"properties"`
}

// Duration is a Go duration ("2s", "1h30m"), for the per-attempt fields,
// where a day would always be a mistake.
//
// Zero is refused as well as negatives: every field has a default for "not
// set", and an explicit 0 would silently mean the default.
type Duration time.Duration

// Days is a Duration that may also start with a whole-day count ("7d",
// "1d12h"): retention periods are naturally stated in days, and
// time.ParseDuration has no day unit.
type Days time.Duration

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (d *Duration) UnmarshalYAML(n ast.Node) error {
	v, err := durationNode(n, false)
	*d = Duration(v)
	return err
}

// Lag is a Duration that may be zero ("0s": none), for a setting whose
// default is none.
type Lag time.Duration

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (d *Lag) UnmarshalYAML(n ast.Node) error {
	if v, ok := n.(*ast.StringNode); ok {
		switch z, err := time.ParseDuration(v.Value); {
		case err == nil && z == 0:
			*d = 0
			return nil
		case err == nil && z < 0:
			return fmt.Errorf("must not be negative, got %q", v.Value)
		}
	}
	v, err := durationNode(n, false)
	*d = Lag(v)
	return err
}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (d *Days) UnmarshalYAML(n ast.Node) error {
	v, err := durationNode(n, true)
	*d = Days(v)
	return err
}

func durationNode(n ast.Node, days bool) (time.Duration, error) {
	var text string
	switch v := n.(type) {
	case *ast.StringNode:
		text = v.Value
	case *ast.IntegerNode, *ast.FloatNode:
		t := v.GetToken().Value
		return 0, fmt.Errorf("invalid duration %q: a unit is required, e.g. \"%ss\"", t, t)
	default:
		return 0, errors.New(`must be a duration such as "30s"`)
	}
	d, ok := parseDuration(text, days)
	if !ok {
		return 0, fmt.Errorf("invalid duration %q", text)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", text)
	}
	return d, nil
}

var dayPrefix = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// parseDuration is time.ParseDuration accepting, with days, a leading
// whole-day count.
func parseDuration(s string, days bool) (time.Duration, bool) {
	m := dayPrefix.FindStringSubmatch(s)
	if !days || m == nil {
		d, err := time.ParseDuration(s)
		return d, err == nil
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > int64(math.MaxInt64/(24*time.Hour)) {
		return 0, false
	}
	d := time.Duration(n) * 24 * time.Hour
	if m[2] == "" {
		return d, true
	}
	rest, err := time.ParseDuration(m[2])
	return d + rest, err == nil && rest >= 0 && rest <= math.MaxInt64-d
}

// formatDays prints whole days as "7d" and anything else as Go does, to
// echo retention values the way they are usually written.
func formatDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// ParseWith parses and validates an actions file. path is used in
// messages and as the base for relative schema and effects paths; it is
// not read. kinds are the connector kinds registered by the program
// (consumer.WithConnector), whose actions take their own keys under
// `settings:`.
//
// Every problem is reported, each with its line and column where there is
// one: see decoder. Anchors, aliases and merge keys (<<) are resolved.
func ParseWith(path string, data []byte, kinds []string) (*Config, error) {
	p := &loader{
		decoder: decoder{file: path, index: map[loc]written{}, bad: map[loc]bool{}},
		dir:     filepath.Dir(path),
		kinds:   map[string]bool{},
	}
	for _, k := range kinds {
		p.kinds[k] = true
	}
	if path == "" {
		p.dir = "."
	}
	var doc fileDoc
	if body, ok := p.document(data); ok {
		if body != nil {
			p.aliases = linkAliases(body)
			p.decode(body, reflect.ValueOf(&doc).Elem(), nil)
		}
		cfg := p.validate(&doc)
		if len(p.errs) == 0 {
			cfg.setDefaults()
			return cfg, nil
		}
	}
	return nil, errors.Join(p.errs...)
}

// loader carries the state of one Parse call.
type loader struct {
	decoder
	dir   string          // base of relative paths
	kinds map[string]bool // registered connector kinds (ParseWith)
}

// document parses data into its one document's body, nil for an empty
// file; ok is false after a syntax error or a second document.
func (p *loader) document(data []byte) (body ast.Node, ok bool) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		e := p.errorAt(nil, loc{}, err.Error())
		if ye, ok := errors.AsType[yaml.Error](err); ok {
			e = p.errorAt(ye.GetToken(), loc{}, ye.GetMessage())
		}
		p.errs = append(p.errs, e)
		return nil, false
	}
	docs := slices.DeleteFunc(f.Docs, func(d *ast.DocumentNode) bool { return d == nil || d.Body == nil })
	switch len(docs) {
	case 0:
		return nil, true
	case 1:
		return docs[0].Body, true
	}
	p.errAt(docs[1], loc{}, "the file must contain a single YAML document")
	return nil, false
}

// validate applies the rules no struct tag can state and builds the Config.
// A field whose value did not decode (bad) was reported already and gets no
// further checks.
func (p *loader) validate(doc *fileDoc) *Config {
	cfg := &Config{
		Path:            p.file,
		Actions:         map[string]*Action{},
		Reconcile:       ReconcileConfig{Every: time.Duration(doc.Reconcile.Every), For: time.Duration(doc.Reconcile.For)},
		DedupeRetention: time.Duration(doc.DedupeRetention),
		KeyMemory:       time.Duration(doc.KeyMemory),
		Systems:         map[string]*System{},
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Systems)) {
		cfg.Systems[name] = p.system(name, doc.Systems[name])
	}
	actions := loc{"", "actions"}
	if w, ok := p.index[actions]; !ok {
		p.errAt(nil, actions, "required")
	} else if len(doc.Actions) == 0 && !p.bad[actions] {
		p.errAt(w.key, actions, "must declare at least one action")
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Actions)) {
		if strings.TrimSpace(name) == "" {
			p.errAt(p.index[loc{name, ""}].key, loc{}, "action name must not be empty")
			continue
		}
		cfg.Actions[name] = p.action(name, doc.Actions[name])
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Actions)) {
		a := cfg.Actions[name]
		if n, ok := p.index[loc{name, "system"}]; ok && !p.bad[loc{name, "system"}] {
			if _, ok := cfg.Systems[a.System]; !ok {
				p.errAt(n.value, loc{name, "system"}, "no system %q under systems:", a.System)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Systems)) {
		// An action without system: is its own system, named after it
		// in metrics and logs; a declared system of the same name that
		// the action does not use would share its label.
		if a, ok := cfg.Actions[name]; ok && a.System != name {
			p.errAt(p.index[loc{"", "systems." + name}].key, loc{"", "systems." + name},
				"has the name of action %q, which does not use it; an action without system: is a system of its own by its name", name)
		}
	}
	if cfg.DedupeRetention != 0 || cfg.KeyMemory != 0 {
		ret := cmp.Or(cfg.DedupeRetention, wire.DefaultDedupeRetention)
		mem := cmp.Or(cfg.KeyMemory, wire.DefaultKeyMemory)
		if mem < ret {
			p.errAt(nil, loc{"", "key_memory"}, "%s is shorter than dedupe_retention %s: a key would be forgotten while its result is still replayed", formatDays(mem), formatDays(ret))
		}
	}
	return cfg
}

// kafkaTopic is Kafka's legal topic name alphabet and length.
var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// action checks one action and builds it.
func (p *loader) action(name string, d actionDoc) *Action {
	a := &Action{
		Name: name, Connector: d.Connector, Settings: d.Settings,
		URL: d.URL, ConfirmURL: d.ConfirmURL, Topic: d.Topic, Brokers: d.Kafka.Brokers,
		Timeout: time.Duration(d.Timeout), MaxAttempts: d.MaxAttempts, ConfirmTimeout: time.Duration(d.ConfirmTimeout),
		LookupLag:       time.Duration(d.LookupLag),
		IdempotentByKey: d.IdempotentByKey, Schema: d.Schema, UniqueBy: d.UniqueBy, OnDuplicate: d.OnDuplicate, Redact: d.Redact,
		AllowedSources: d.AllowedSources, EffectsFile: d.EffectsFile,
		System: d.System, GiveUpAfter: time.Duration(d.GiveUpAfter),
	}
	// given reports whether field was written, and where its value is;
	// valid also that its value decoded, so that it can be checked further.
	given := func(field string) (ast.Node, bool) {
		w, ok := p.index[loc{name, field}]
		return w.value, ok
	}
	valid := func(field string) (ast.Node, bool) {
		n, ok := given(field)
		return n, ok && !p.bad[loc{name, field}]
	}
	fail := func(n ast.Node, field, format string, args ...any) {
		p.errAt(n, loc{name, field}, format, args...)
	}

	switch a.Connector {
	case ConnectorHTTP:
		if _, ok := given("url"); !ok {
			fail(nil, "url", "required for connector http")
		} else if n, ok := valid("url"); ok {
			if err := checkURL(a.URL, a.URL); err != nil {
				fail(n, "url", "%v", err)
			}
		}
		if n, ok := valid("confirm_url"); ok {
			if !strings.Contains(a.ConfirmURL, KeyPlaceholder) {
				fail(n, "confirm_url", "must contain %s, replaced by the idempotency key", KeyPlaceholder)
			} else if err := checkURL(strings.ReplaceAll(a.ConfirmURL, KeyPlaceholder, "k"), a.ConfirmURL); err != nil {
				fail(n, "confirm_url", "%v", err)
			}
		}
	case ConnectorKafka:
		if _, ok := given("topic"); !ok {
			fail(nil, "topic", "required for connector kafka")
		} else if n, ok := valid("topic"); ok && (!kafkaTopic.MatchString(a.Topic) || a.Topic == "." || a.Topic == "..") {
			fail(n, "topic", "invalid Kafka topic name %q", a.Topic)
		}
	case ConnectorNoop:
	case "":
		if n, ok := given("connector"); !ok {
			fail(nil, "connector", "required")
		} else if _, ok := valid("connector"); ok {
			fail(n, "connector", "must not be empty")
		}
	default:
		if !p.kinds[a.Connector] {
			n, _ := given("connector")
			fail(n, "connector", "unknown connector %q (want %s)", a.Connector, p.kindList())
		}
	}
	if n, ok := given("settings"); ok && !p.kinds[a.Connector] {
		fail(n, "settings", "only valid for a connector registered by the program (built-in connectors take their own fields)")
	}
	// A field written for a connector that ignores it, such as a
	// confirm_url on a kafka action, is a misunderstanding worth stopping on.
	for _, only := range []struct{ field, connector string }{
		{"url", ConnectorHTTP}, {"confirm_url", ConnectorHTTP}, {"topic", ConnectorKafka},
		{"kafka", ConnectorKafka}, {"effects_file", ConnectorNoop},
	} {
		if n, ok := given(only.field); ok && a.Connector != "" && a.Connector != only.connector {
			fail(n, only.field, "only valid for connector %s", only.connector)
		}
	}

	if n, ok := valid("max_attempts"); ok && a.MaxAttempts < 1 {
		fail(n, "max_attempts", "must be at least 1, got %d", a.MaxAttempts)
	}
	if n, ok := valid("on_duplicate"); ok && a.OnDuplicate != OnDuplicateReject && a.OnDuplicate != OnDuplicateHold {
		fail(n, "on_duplicate", "must be reject or hold, got %q", a.OnDuplicate)
	}
	for _, paths := range []struct {
		field string
		list  []string
	}{{"unique_by", a.UniqueBy}, {"redact", a.Redact}} {
		n, _ := given(paths.field)
		seen := map[string]bool{}
		for _, f := range paths.list {
			switch {
			case strings.TrimSpace(f) == "":
				fail(n, paths.field, "field names must not be empty")
			case seen[f]:
				fail(n, paths.field, "field %q listed twice", f)
			case slices.Contains(strings.Split(f, "."), ""):
				// A dotted path with an empty step names no field of any
				// data: under unique_by every command would be rejected
				// invalid_command, under redact nothing would be hidden.
				fail(n, paths.field, "field %q has an empty path step (dotted paths like order.id)", f)
			}
			seen[f] = true
		}
	}
	if slices.Contains(a.AllowedSources, "") {
		n, _ := given("allowed_sources")
		fail(n, "allowed_sources", "patterns must not be empty")
	}
	if n, ok := valid("effects_file"); ok && a.Connector == ConnectorNoop {
		if a.EffectsFile == "" {
			fail(n, "effects_file", "must not be empty")
		} else if !filepath.IsAbs(a.EffectsFile) {
			a.EffectsFile = filepath.Join(p.dir, a.EffectsFile)
		}
	}
	if n, ok := valid("schema"); ok {
		sch, err := p.compileSchema(a.Schema)
		if err != nil {
			fail(n, "schema", "%v", err)
		}
		a.schema = sch
	}
	if n, ok := valid("kafka.brokers"); ok {
		if len(a.Brokers) == 0 {
			fail(n, "kafka.brokers", "must list at least one host:port")
		}
		for _, b := range a.Brokers {
			if strings.TrimSpace(b) == "" || strings.ContainsAny(b, " ,") {
				fail(n, "kafka.brokers", "invalid broker %q (want host:port)", b)
			}
		}
	}
	if _, ok := valid("kafka.properties"); ok {
		a.Kafka = p.kafkaProperties(name, d.Kafka.Properties)
	}
	a.API = p.apiOf(name, d, a)
	if n, ok := given("lookup_lag"); ok && a.Connector == ConnectorHTTP && a.ConfirmURL == "" && a.API.Confirm == nil {
		// Only a confirmation asks a lookup: without one the setting
		// does nothing, and whoever wrote it expects a protection.
		fail(n, "lookup_lag", "only valid for an action that confirms (confirm_url or confirm:)")
	}
	return a
}

// system checks one external system's limits and builds them.
func (p *loader) system(name string, d systemDoc) *System {
	at := func(field string) loc { return loc{"", "systems." + name + "." + field} }
	valid := func(field string) (ast.Node, bool) {
		w, ok := p.index[at(field)]
		return w.value, ok && !p.bad[at(field)]
	}
	if strings.TrimSpace(name) == "" {
		p.errAt(p.index[loc{"", "systems." + name}].key, loc{"", "systems"}, "system name must not be empty")
	}
	s := &System{Name: name, MaxConcurrent: d.MaxConcurrent, Rate: float64(d.Rate), Burst: d.Burst,
		BreakerAfter: d.Breaker.After, ProbeEvery: time.Duration(d.Breaker.ProbeEvery),
		HTTP: httpconn.Transport{MaxIdleConns: d.HTTP.MaxIdleConns, IdleTimeout: time.Duration(d.HTTP.IdleTimeout), MaxConns: d.HTTP.MaxConns,
			DialTimeout: time.Duration(d.HTTP.DialTimeout), TLSHandshakeTimeout: time.Duration(d.HTTP.TLSHandshakeTimeout), KeepAlive: time.Duration(d.HTTP.KeepAlive),
			Client: d.HTTP.Client}}
	if n, ok := valid("http.client"); ok && d.HTTP.Client != httpconn.ClientFast && d.HTTP.Client != httpconn.ClientNetHTTP {
		p.errAt(n, at("http.client"), "must be %s or %s, got %q", httpconn.ClientFast, httpconn.ClientNetHTTP, d.HTTP.Client)
	}
	for _, f := range []struct {
		field string
		v     int
	}{{"max_concurrent", d.MaxConcurrent}, {"burst", d.Burst}, {"breaker.after", d.Breaker.After},
		{"http.max_idle_conns", d.HTTP.MaxIdleConns}, {"http.max_conns", d.HTTP.MaxConns}} {
		if n, ok := valid(f.field); ok && f.v < 1 {
			p.errAt(n, at(f.field), "must be at least 1, got %d", f.v)
		}
	}
	if n, ok := valid("burst"); ok && d.Rate == 0 && !p.bad[at("rate")] {
		p.errAt(n, at("burst"), "only valid with rate")
	}
	return s
}

// kindList names the accepted connector kinds for an error message.
func (p *loader) kindList() string {
	ks := append(slices.Collect(maps.Keys(p.kinds)), ConnectorHTTP, ConnectorKafka, ConnectorNoop)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	return strings.Join(ks[:len(ks)-1], ", ") + " or " + ks[len(ks)-1]
}

// kafkaProperties builds the Config of a kafka section's properties; nil
// when they are invalid (the errors are recorded). Relative ssl.*.location
// paths are relative to the actions file, like schema. kafkaconf's errors
// are placed on the property they concern.
func (p *loader) kafkaProperties(action string, props map[string]string) *kafkaconf.Config {
	const field = "kafka.properties"
	list := make([]kafkaconf.Property, 0, len(props))
	for _, k := range slices.Sorted(maps.Keys(props)) {
		if p.bad[loc{action, field + "." + k}] {
			return nil
		}
		v := props[k]
		if kafkaconf.IsFile(k) && v != "" && !filepath.IsAbs(v) {
			v = filepath.Join(p.dir, v)
		}
		list = append(list, kafkaconf.Property{Key: k, Value: v})
	}
	conf, err := kafkaconf.New(list)
	if err == nil {
		return conf
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, err := range errs {
		// A missing property has no line of its own: point at the
		// properties section. An unknown one is wrong in its name, a
		// known one in its value.
		n := p.index[loc{action, field}].key
		if ke, ok := errors.AsType[*kafkaconf.Error](err); ok {
			if w, ok := p.index[loc{action, field + "." + ke.Property}]; ok {
				n = w.key
				if slices.Contains(kafkaconf.Names(), ke.Property) {
					n = w.value
				}
			}
		}
		p.errAt(n, loc{action, field}, "%v", err)
	}
	return nil
}

// checkURL accepts absolute http and https URLs only: connectors POST and
// GET over HTTP, and a relative or scheme-less URL is always a typo. shown is
// the URL as written, for the message (s may have {key} substituted).
func checkURL(s, shown string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL %q", shown)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("invalid URL %q: scheme must be http or https", shown)
	}
	if u.Host == "" {
		return fmt.Errorf("invalid URL %q: host missing", shown)
	}
	return nil
}
