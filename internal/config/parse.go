package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/onceflight/onceflight/kafkaconf"
)

// Parse parses and validates an actions file. path is used in messages and
// as the base for relative schema and effects paths; it is not read.
//
// Decoding is strict: unknown keys are errors, because a misspelt optional
// key (`confirm_ulr`) would otherwise silently disable a safeguard. The file
// is walked on goccy/go-yaml's AST rather than decoded with
// yaml.DisallowUnknownField, since that option aborts at the first unknown
// key (chosen in map order, so not even deterministically) and loses the
// positions of later problems; walking the AST reports every unknown key and
// every invalid value with its line and column. Anchors, aliases and merge
// keys (<<) are resolved; top-level keys starting with "x-" are ignored so
// they can hold anchors shared by several actions.
func Parse(path string, data []byte) (*Config, error) {
	return ParseWith(path, data, nil)
}

// ParseWith is Parse that also accepts the connector kinds in kinds
// (connectors registered by the program, consumer.WithConnector), whose
// actions take their own keys under `settings:`.
func ParseWith(path string, data []byte, kinds []string) (*Config, error) {
	p := &loader{file: path, dir: filepath.Dir(path), kinds: map[string]bool{}}
	for _, k := range kinds {
		p.kinds[k] = true
	}
	if path == "" {
		p.dir = "."
	}
	cfg := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	cfg.setDefaults()
	return cfg, nil
}

// loader carries the state of one Parse call.
type loader struct {
	file    string
	dir     string
	anchors map[string]ast.Node
	budget  int             // entries mappingDepth may still visit; see maxMergeEntries
	kinds   map[string]bool // registered connector kinds (ParseWith)
	errs    []error
}

// entry is one key of a mapping after merge keys have been expanded.
type entry struct {
	key   string
	keyNd ast.Node
	value ast.Node // resolved: never an alias or anchor
}

func (p *loader) errAt(n ast.Node, action, field, format string, args ...any) {
	e := &Error{File: p.file, Action: action, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		if tk := n.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
		}
	}
	p.errs = append(p.errs, e)
}

func (p *loader) parse(data []byte) *Config {
	cfg := &Config{Path: p.file, Actions: map[string]*Action{}}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			e := &Error{File: p.file, Msg: ye.GetMessage()}
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
			p.errs = append(p.errs, e)
		} else {
			p.errs = append(p.errs, &Error{File: p.file, Msg: err.Error()})
		}
		return cfg
	}
	var docs []*ast.DocumentNode
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	switch {
	case len(docs) == 0:
		p.errAt(nil, "", "actions", "required")
		return cfg
	case len(docs) > 1:
		p.errAt(docs[1], "", "", "the file must contain a single YAML document")
		return cfg
	}
	p.anchors = map[string]ast.Node{}
	for _, n := range ast.Filter(ast.AnchorType, docs[0].Body) {
		if a, ok := n.(*ast.AnchorNode); ok && a.Name != nil {
			p.anchors[a.Name.GetToken().Value] = a.Value
		}
	}

	top, ok := p.mapping(docs[0].Body, "", "")
	if !ok {
		return cfg
	}
	seenActions := false
	for _, e := range top {
		switch e.key {
		case "actions":
			seenActions = true
			p.actions(cfg, e)
		case "reconcile":
			p.reconcile(cfg, e)
		case "dedupe_retention":
			cfg.DedupeRetention = p.duration(e, "", e.key, true)
		case "key_memory":
			cfg.KeyMemory = p.duration(e, "", e.key, true)
		default:
			// x- keys are free for anchors shared by several actions,
			// the convention Docker Compose uses for the same purpose.
			if !strings.HasPrefix(e.key, "x-") {
				p.errAt(e.keyNd, "", "", "unknown field %q", e.key)
			}
		}
	}
	if !seenActions {
		p.errAt(nil, "", "actions", "required")
	}
	if cfg.DedupeRetention != 0 || cfg.KeyMemory != 0 {
		ret, mem := cfg.DedupeRetention, cfg.KeyMemory
		if ret == 0 {
			ret = DefaultDedupeRetention
		}
		if mem == 0 {
			mem = DefaultKeyMemory
		}
		if mem < ret {
			p.errAt(nil, "", "key_memory", "%s is shorter than dedupe_retention %s: a key would be forgotten while its result is still replayed", formatDays(mem), formatDays(ret))
		}
	}
	return cfg
}

// resolve follows aliases and strips anchors and tags, so callers see the
// value itself. The depth bound guards against alias cycles.
func (p *loader) resolve(n ast.Node) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			if v.Value == nil {
				return nil
			}
			target, ok := p.anchors[v.Value.GetToken().Value]
			if !ok {
				return v
			}
			n = target
		case *ast.TagNode:
			n = v.Value
		default:
			return n
		}
	}
	return nil
}

// mapping returns the entries of a mapping node with merge keys expanded
// (explicit keys win over merged ones, as YAML specifies). A null value is an
// empty mapping. Anything else is reported and ok is false.
func (p *loader) mapping(n ast.Node, action, field string) (entries []entry, ok bool) {
	p.budget = maxMergeEntries
	return p.mappingDepth(n, action, field, 0)
}

// maxMergeEntries bounds the key/value pairs one mapping may expand to
// through merge keys: aliases make nested merges exponential (a "billion
// laughs" file), and no real actions file comes near the bound.
const maxMergeEntries = 10000

func (p *loader) mappingDepth(n ast.Node, action, field string, depth int) ([]entry, bool) {
	orig := n
	n = p.resolve(n)
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return nil, true
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		what := "must be a mapping"
		if field == "" && action == "" {
			what = "the file must be a mapping with an \"actions\" key"
		}
		p.errAt(orig, action, field, "%s", what)
		return nil, false
	}
	var out, merged []entry
	seen := map[string]bool{}
	for _, mv := range values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if p.budget--; p.budget < 0 {
			p.errAt(mv.Key, action, field, "merge keys expand to more than %d entries", maxMergeEntries)
			return nil, false
		}
		if mv.Key.IsMergeKey() {
			if depth > 8 {
				p.errAt(mv.Key, action, field, "merge keys nested too deeply")
				return nil, false
			}
			src := p.resolve(mv.Value)
			var srcs []ast.Node
			if seq, isSeq := src.(*ast.SequenceNode); isSeq {
				srcs = seq.Values
			} else {
				srcs = []ast.Node{mv.Value}
			}
			for _, s := range srcs {
				es, ok := p.mappingDepth(s, action, field, depth+1)
				if !ok {
					return nil, false
				}
				merged = append(merged, es...)
			}
			continue
		}
		key, ok := p.scalarText(mv.Key)
		if !ok {
			p.errAt(mv.Key, action, field, "keys must be strings")
			continue
		}
		if seen[key] {
			// The parser already rejects duplicate keys; this guards merges
			// of the same mapping.
			continue
		}
		seen[key] = true
		out = append(out, entry{key: key, keyNd: mv.Key, value: p.resolve(mv.Value)})
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out, true
}

// scalarText returns the text of a string, number or boolean scalar; YAML
// types numbers, but a topic or an action may well be named "2024".
func (p *loader) scalarText(n ast.Node) (string, bool) {
	switch v := p.resolve(n).(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return v.GetToken().Value, true
	}
	return "", false
}

func (p *loader) str(e entry, action string) string {
	s, ok := p.scalarText(e.value)
	if !ok {
		p.errAt(e.value, action, e.key, "must be a string")
	}
	return s
}

func (p *loader) strList(e entry, action string) []string {
	switch v := e.value.(type) {
	case nil, *ast.NullNode:
		return nil
	case *ast.SequenceNode:
		out := make([]string, 0, len(v.Values))
		for _, item := range v.Values {
			s, ok := p.scalarText(item)
			if !ok {
				p.errAt(item, action, e.key, "items must be strings")
				continue
			}
			out = append(out, s)
		}
		return out
	}
	p.errAt(e.value, action, e.key, "must be a list of strings")
	return nil
}

func (p *loader) boolean(e entry, action string) bool {
	if b, ok := e.value.(*ast.BoolNode); ok {
		return b.Value
	}
	p.errAt(e.value, action, e.key, "must be true or false")
	return false
}

func (p *loader) integer(e entry, action string) (int, bool) {
	if n, ok := e.value.(*ast.IntegerNode); ok {
		switch v := n.Value.(type) {
		case int64:
			if v >= math.MinInt32 && v <= math.MaxInt32 {
				return int(v), true
			}
		case uint64:
			if v <= math.MaxInt32 {
				return int(v), true
			}
		}
		p.errAt(e.value, action, e.key, "%s is out of range", n.Token.Value)
		return 0, false
	}
	p.errAt(e.value, action, e.key, "must be an integer")
	return 0, false
}

var dayPrefix = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// duration parses a positive Go duration string ("2s", "1h30m"). With days,
// a leading whole-day count ("7d", "1d12h") is accepted too, because
// retention periods are naturally stated in days and time.ParseDuration has
// no day unit. Zero is refused as well as negatives: every field has a
// default for "not set", and an explicit 0 would silently mean the default.
func (p *loader) duration(e entry, action, field string, days bool) time.Duration {
	var text string
	switch v := e.value.(type) {
	case *ast.StringNode:
		text = v.Value
	case *ast.IntegerNode, *ast.FloatNode:
		p.errAt(e.value, action, field, "invalid duration %q: a unit is required, e.g. \"%ss\"", v.GetToken().Value, v.GetToken().Value)
		return 0
	default:
		p.errAt(e.value, action, field, "must be a duration such as \"30s\"")
		return 0
	}
	d, err := parseDuration(text, days)
	if err != nil {
		p.errAt(e.value, action, field, "invalid duration %q", text)
		return 0
	}
	if d <= 0 {
		p.errAt(e.value, action, field, "must be positive, got %q", text)
		return 0
	}
	return d
}

// formatDays prints whole days as "7d" and anything else as Go does, to
// echo retention values the way they are usually written.
func formatDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func parseDuration(s string, days bool) (time.Duration, error) {
	if days {
		if m := dayPrefix.FindStringSubmatch(s); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil || n > int64(math.MaxInt64/(24*time.Hour)) {
				return 0, fmt.Errorf("invalid day count %q", m[1])
			}
			d := time.Duration(n) * 24 * time.Hour
			if m[2] == "" {
				return d, nil
			}
			rest, err := time.ParseDuration(m[2])
			if err != nil || rest < 0 || rest > math.MaxInt64-d {
				return 0, fmt.Errorf("invalid duration %q", s)
			}
			return d + rest, nil
		}
	}
	return time.ParseDuration(s)
}

func (p *loader) reconcile(cfg *Config, e entry) {
	entries, ok := p.mapping(e.value, "", e.key)
	if !ok {
		return
	}
	for _, f := range entries {
		field := "reconcile." + f.key
		switch f.key {
		case "every":
			cfg.Reconcile.Every = p.duration(f, "", field, true)
		case "for":
			cfg.Reconcile.For = p.duration(f, "", field, true)
		default:
			p.errAt(f.keyNd, "", "", "unknown field %q", field)
		}
	}
}

func (p *loader) actions(cfg *Config, e entry) {
	if _, isNull := e.value.(*ast.NullNode); isNull || e.value == nil {
		p.errAt(e.keyNd, "", "actions", "must declare at least one action")
		return
	}
	entries, ok := p.mapping(e.value, "", "actions")
	if !ok {
		return
	}
	if len(entries) == 0 {
		p.errAt(e.keyNd, "", "actions", "must declare at least one action")
	}
	for _, ae := range entries {
		if strings.TrimSpace(ae.key) == "" {
			p.errAt(ae.keyNd, "", "", "action name must not be empty")
			continue
		}
		if a := p.action(ae); a != nil {
			cfg.Actions[a.Name] = a
		}
	}
}

// set records which optional fields were written, so validation can tell
// "absent" from an explicit zero.
type set map[string]ast.Node

func (p *loader) action(ae entry) *Action {
	name := ae.key
	a := &Action{Name: name}
	entries, ok := p.mapping(ae.value, name, "")
	if !ok {
		return nil
	}
	given := set{}
	for _, f := range entries {
		given[f.key] = f.value
		switch f.key {
		case "connector":
			a.Connector = p.str(f, name)
		case "url":
			a.URL = p.str(f, name)
		case "confirm_url":
			a.ConfirmURL = p.str(f, name)
		case "topic":
			a.Topic = p.str(f, name)
		case "kafka":
			a.Brokers, a.Kafka = p.kafka(f, name)
		case "timeout":
			a.Timeout = p.duration(f, name, f.key, false)
		case "confirm_timeout":
			a.ConfirmTimeout = p.duration(f, name, f.key, false)
		case "max_attempts":
			if n, ok := p.integer(f, name); ok {
				if n < 1 {
					p.errAt(f.value, name, f.key, "must be at least 1, got %d", n)
				} else {
					a.MaxAttempts = n
				}
			}
		case "idempotent_by_key":
			a.IdempotentByKey = p.boolean(f, name)
		case "schema":
			a.Schema = p.str(f, name)
		case "unique_by":
			a.UniqueBy = p.strList(f, name)
		case "on_duplicate":
			a.OnDuplicate = p.str(f, name)
		case "allowed_sources":
			a.AllowedSources = p.strList(f, name)
		case "effects_file":
			a.EffectsFile = p.str(f, name)
		case "settings":
			a.Settings = p.settings(f, name)
		default:
			p.errAt(f.keyNd, name, "", "unknown field %q", f.key)
		}
	}
	p.validateAction(a, given)
	return a
}

// kindList names the accepted connector kinds for an error message.
func (p *loader) kindList() string {
	ks := []string{ConnectorHTTP, ConnectorKafka, ConnectorNoop}
	for k := range p.kinds {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks[:len(ks)-1], ", ") + " or " + ks[len(ks)-1]
}

// settings reads a registered connector's `settings:` mapping of scalar
// values, kept as the text written.
func (p *loader) settings(e entry, action string) map[string]string {
	entries, ok := p.mapping(e.value, action, "settings")
	if !ok {
		return nil
	}
	out := make(map[string]string, len(entries))
	for _, s := range entries {
		v, ok := p.scalarText(s.value)
		if !ok {
			p.errAt(s.value, action, "settings."+s.key, "must be a scalar (string, number or boolean)")
			continue
		}
		out[s.key] = v
	}
	return out
}

// kafka reads a kafka action's connection section:
//
//	kafka:
//	  brokers: [kafka-1.example:9093]
//	  properties:
//	    security.protocol: SASL_SSL
//	    sasl.mechanism: SCRAM-SHA-512
//
// The properties are checked by kafkaconf.New, the parser of the -X and
// --kafka-config flags, so the file accepts exactly what the command line
// does; its errors are placed on the property's line. Relative
// ssl.*.location paths are relative to the actions file, like schema.
func (p *loader) kafka(e entry, action string) ([]string, *kafkaconf.Config) {
	entries, ok := p.mapping(e.value, action, "kafka")
	if !ok {
		return nil, nil
	}
	var brokers []string
	var conf *kafkaconf.Config
	for _, f := range entries {
		switch f.key {
		case "brokers":
			brokers = p.strList(entry{key: "kafka.brokers", keyNd: f.keyNd, value: f.value}, action)
			if len(brokers) == 0 {
				p.errAt(f.value, action, "kafka.brokers", "must list at least one host:port")
			}
			for _, b := range brokers {
				if strings.TrimSpace(b) == "" || strings.ContainsAny(b, " ,") {
					p.errAt(f.value, action, "kafka.brokers", "invalid broker %q (want host:port)", b)
				}
			}
		case "properties":
			conf = p.kafkaProperties(f, action)
		default:
			p.errAt(f.keyNd, action, "", "unknown field %q", "kafka."+f.key)
		}
	}
	return brokers, conf
}

// kafkaProperties builds the Config of a kafka section's properties; nil
// when they are invalid (the errors are recorded).
func (p *loader) kafkaProperties(e entry, action string) *kafkaconf.Config {
	const field = "kafka.properties"
	entries, ok := p.mapping(e.value, action, field)
	if !ok {
		return nil
	}
	props := make([]kafkaconf.Property, 0, len(entries))
	byKey := map[string]entry{}
	for _, f := range entries {
		v, ok := p.scalarText(f.value)
		if !ok {
			p.errAt(f.value, action, field, "property %q: must be a string", f.key)
			return nil
		}
		switch f.key {
		case kafkaconf.SSLCALocation, kafkaconf.SSLCertificateLocation, kafkaconf.SSLKeyLocation:
			if v != "" && !filepath.IsAbs(v) {
				v = filepath.Join(p.dir, v)
			}
		}
		props = append(props, kafkaconf.Property{Key: f.key, Value: v})
		byKey[f.key] = f
	}
	conf, err := kafkaconf.New(props)
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
		var n ast.Node = e.keyNd
		if ke, ok := errors.AsType[*kafkaconf.Error](err); ok {
			if f, ok := byKey[ke.Property]; ok {
				n = f.keyNd
				if slices.Contains(kafkaconf.Names(), ke.Property) {
					n = f.value
				}
			}
		}
		p.errAt(n, action, field, "%v", err)
	}
	return nil
}

// kafkaTopic is Kafka's legal topic name alphabet and length.
var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func (p *loader) validateAction(a *Action, given set) {
	name := a.Name
	// onlyFor reports fields written for a connector that ignores them: a
	// confirm_url on a kafka action is a misunderstanding worth stopping on.
	onlyFor := func(field, connector string) {
		if n, ok := given[field]; ok && a.Connector != connector {
			p.errAt(n, name, field, "only valid for connector %s", connector)
		}
	}
	switch a.Connector {
	case ConnectorHTTP:
		if _, ok := given["url"]; !ok {
			p.errAt(nil, name, "url", "required for connector http")
		} else if err := checkURL(a.URL, a.URL); err != nil {
			p.errAt(given["url"], name, "url", "%v", err)
		}
		if n, ok := given["confirm_url"]; ok {
			if !strings.Contains(a.ConfirmURL, KeyPlaceholder) {
				p.errAt(n, name, "confirm_url", "must contain %s, replaced by the idempotency key", KeyPlaceholder)
			} else if err := checkURL(strings.ReplaceAll(a.ConfirmURL, KeyPlaceholder, "k"), a.ConfirmURL); err != nil {
				p.errAt(n, name, "confirm_url", "%v", err)
			}
		}
	case ConnectorKafka:
		if _, ok := given["topic"]; !ok {
			p.errAt(nil, name, "topic", "required for connector kafka")
		} else if !kafkaTopic.MatchString(a.Topic) || a.Topic == "." || a.Topic == ".." {
			p.errAt(given["topic"], name, "topic", "invalid Kafka topic name %q", a.Topic)
		}
	case ConnectorNoop:
	case "":
		if n, ok := given["connector"]; ok {
			p.errAt(n, name, "connector", "must not be empty")
		} else {
			p.errAt(nil, name, "connector", "required")
		}
	default:
		if !p.kinds[a.Connector] {
			p.errAt(given["connector"], name, "connector", "unknown connector %q (want %s)", a.Connector, p.kindList())
		}
	}
	if n, ok := given["settings"]; ok && !p.kinds[a.Connector] {
		p.errAt(n, name, "settings", "only valid for a connector registered by the program (built-in connectors take their own fields)")
	}
	if a.Connector != "" {
		onlyFor("url", ConnectorHTTP)
		onlyFor("confirm_url", ConnectorHTTP)
		onlyFor("topic", ConnectorKafka)
		onlyFor("kafka", ConnectorKafka)
		onlyFor("effects_file", ConnectorNoop)
	}

	if n, ok := given["on_duplicate"]; ok && a.OnDuplicate != OnDuplicateReject && a.OnDuplicate != OnDuplicateHold {
		p.errAt(n, name, "on_duplicate", "must be reject or hold, got %q", a.OnDuplicate)
	}
	seen := map[string]bool{}
	for _, f := range a.UniqueBy {
		switch {
		case strings.TrimSpace(f) == "":
			p.errAt(given["unique_by"], name, "unique_by", "field names must not be empty")
		case seen[f]:
			p.errAt(given["unique_by"], name, "unique_by", "field %q listed twice", f)
		case slices.Contains(strings.Split(f, "."), ""):
			// A dotted path with an empty step names no field of any data,
			// so every command would be rejected invalid_command.
			p.errAt(given["unique_by"], name, "unique_by", "field %q has an empty path step (dotted paths like order.id)", f)
		}
		seen[f] = true
	}
	if slices.Contains(a.AllowedSources, "") {
		p.errAt(given["allowed_sources"], name, "allowed_sources", "patterns must not be empty")
	}
	if n, ok := given["effects_file"]; ok && a.Connector == ConnectorNoop {
		if a.EffectsFile == "" {
			p.errAt(n, name, "effects_file", "must not be empty")
		} else if !filepath.IsAbs(a.EffectsFile) {
			a.EffectsFile = filepath.Join(p.dir, a.EffectsFile)
		}
	}
	if n, ok := given["schema"]; ok {
		sch, err := p.compileSchema(a.Schema)
		if err != nil {
			p.errAt(n, name, "schema", "%v", err)
		}
		a.schema = sch
	}
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

// maxSchemaBytes bounds schema files; a schema is small, and the bound
// keeps a path like /dev/zero from hanging start-up.
const maxSchemaBytes = 4 << 20

// compileSchema compiles the JSON Schema at path (relative to the config
// file's directory). Compiling at load means a broken schema stops start-up
// instead of rejecting every command at run time.
func (p *loader) compileSchema(path string) (*jsonschema.Schema, error) {
	if path == "" {
		return nil, errors.New("must not be empty")
	}
	full := path
	if !filepath.IsAbs(full) {
		full = filepath.Join(p.dir, full)
	}
	full, err := filepath.Abs(full)
	if err != nil {
		return nil, err
	}
	if err := checkSchemaFile(full); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{"file": boundedFileLoader{}})
	sch, err := c.Compile(full)
	if err != nil {
		return nil, fmt.Errorf("invalid schema %s: %v", path, err)
	}
	return sch, nil
}

func checkSchemaFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("schema file %s not found", path)
		}
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("schema %s is not a regular file", path)
	}
	if fi.Size() > maxSchemaBytes {
		return fmt.Errorf("schema %s is larger than %d bytes", path, maxSchemaBytes)
	}
	return nil
}

// boundedFileLoader is jsonschema's file loader with checkSchemaFile applied
// to every file, including those reached through $ref.
type boundedFileLoader struct{}

func (boundedFileLoader) Load(u string) (any, error) {
	path, err := jsonschema.FileLoader{}.ToFile(u)
	if err != nil {
		return nil, err
	}
	if err := checkSchemaFile(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}
