// Package inspect answers "what protects this action?" and "what happened
// to this key?" for people: `onceflight actions`, `onceflight explain`,
// `config validate`'s warnings and serve's GET /v1/actions.
//
// The action description is derived from the executor's own construction
// (consumer.Protections) and the connectors' own classification functions
// (effect.NextStep, the http and kafka Classify functions), never from a
// second reading of the file: a description that can drift from what the
// executor does would be worse than none.
package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	kafkaconn "github.com/onceflight/onceflight/internal/connectors/kafka"
)

// Action describes one configured action.
type Action struct {
	Name       string      `json:"name"`
	Connector  string      `json:"connector"`
	Endpoints  Endpoints   `json:"endpoints"`
	Identity   Identity    `json:"identity"`
	Limits     Limits      `json:"limits"`
	Answers    []Answer    `json:"answers"`
	Guarantees []Guarantee `json:"guarantees"`
	Warnings   []string    `json:"warnings"`
}

// Endpoints are where the effect goes and where it is confirmed.
type Endpoints struct {
	URL        string   `json:"url,omitempty"`
	ConfirmURL string   `json:"confirm_url,omitempty"`
	Topic      string   `json:"topic,omitempty"`
	Brokers    []string `json:"brokers,omitempty"`
	// Confirm names how an ambiguous attempt is confirmed, or "none".
	Confirm string `json:"confirm"`
	// Request and ConfirmRule describe a real API's call and lookup
	// (api.go); absent for Onceflight's own protocol.
	Request     *Request `json:"request,omitempty"`
	ConfirmRule string   `json:"confirm_rule,omitempty"`
}

// Identity is how the operation identity of a command is formed (SPEC §2–§3).
type Identity struct {
	Key         string   `json:"key"`
	Scope       string   `json:"scope"`
	Fingerprint string   `json:"fingerprint"`
	UniqueBy    []string `json:"unique_by,omitempty"`
	OnDuplicate string   `json:"on_duplicate,omitempty"`
}

// Limits bound what a command of the action may be and how long it runs.
type Limits struct {
	// MaxDataBytes is the executor's --max-data-bytes; 0 when unknown
	// (the CLI describing a file, not a running executor).
	MaxDataBytes   int      `json:"max_data_bytes,omitempty"`
	Schema         string   `json:"schema,omitempty"`
	AllowedSources []string `json:"allowed_sources"`
	Timeout        string   `json:"timeout"`
	MaxAttempts    int      `json:"max_attempts"`
	ConfirmTimeout string   `json:"confirm_timeout"`
	// LookupLag is the action's lookup_lag; "" for none.
	LookupLag string `json:"lookup_lag,omitempty"`
	Deadline  string `json:"deadline"`
	// GiveUpAfter bounds how long "not done" answers are retried.
	GiveUpAfter string `json:"give_up_after"`
	// System is the external system's protection the action's requests
	// go through (docs/connectors.md#protecting-the-external-system).
	System System `json:"system"`
}

// System is an external system's limits as the executor applies them.
type System struct {
	Name string `json:"name"`
	// Shared is false when the action is a system of its own (no
	// system: in the file).
	Shared bool `json:"shared"`
	// MaxConcurrent is the ceiling of requests in flight, a number or
	// "--max-inflight"; the executor adapts below it.
	MaxConcurrent string  `json:"max_concurrent"`
	Rate          float64 `json:"rate,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	BreakerAfter  int     `json:"breaker_after"`
	ProbeEvery    string  `json:"probe_every"`
}

// Answer is one kind of connector answer and what the executor does then.
type Answer struct {
	// Answer is what the external system did, e.g. "HTTP 5xx (500, 502, 504)".
	Answer string `json:"answer"`
	// Kind is the connector's classification (connectors.Kind).
	Kind string `json:"kind"`
	// Step is effect.NextStep's choice for it on a first attempt.
	Step string `json:"step"`
	// Then says the whole path to a final record.
	Then string `json:"then"`
}

// Guarantee says whether G1–G3 hold by Onceflight alone for the action.
type Guarantee struct {
	ID string `json:"id"`
	// Holds is "fully" or "relies on the external system".
	Holds string `json:"holds"`
	Why   string `json:"why"`
}

// The values of Guarantee.Holds.
const (
	HoldsFully    = "fully"
	HoldsExternal = "relies on the external system"
)

// moneyWords mark action names that move money, where a second business
// change under a new key is the costly mistake unique_by prevents.
var moneyWords = []string{"refund", "payment", "payout", "transfer", "charge"}

// Describe describes every action of cfg, sorted by name. maxDataBytes is
// the executor's data limit, 0 if unknown; exOpts are the executor's
// consumer.WithConnector options, so that a registered connector kind is
// described as the executor builds it.
func Describe(cfg *config.Config, maxDataBytes int, exOpts ...consumer.Option) ([]Action, error) {
	prot, err := consumer.Protections(cfg, exOpts...)
	if err != nil {
		return nil, err
	}
	out := make([]Action, 0, len(cfg.Actions))
	for _, name := range slices.Sorted(maps.Keys(cfg.Actions)) {
		out = append(out, describe(cfg.Actions[name], prot[name], maxDataBytes))
	}
	return out, nil
}

// Warnings returns "action NAME: warning" for every risky combination in
// cfg, for `config validate`; exOpts as for Describe.
func Warnings(cfg *config.Config, exOpts ...consumer.Option) ([]string, error) {
	acts, err := Describe(cfg, 0, exOpts...)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range acts {
		for _, w := range a.Warnings {
			out = append(out, fmt.Sprintf("action %s: %s", a.Name, w))
		}
	}
	return out, nil
}

func describe(a *config.Action, p consumer.Protection, maxDataBytes int) Action {
	d := Action{
		Name: a.Name, Connector: a.Connector,
		Endpoints: Endpoints{URL: a.URL, ConfirmURL: a.ConfirmURL, Topic: a.Topic, Brokers: a.Brokers, Confirm: confirmHow(a, p)},
		Identity: Identity{
			Key:         `the command's idempotencykey; default source + "/" + id (every command new work)`,
			Scope:       "the entity (CloudEvents subject): the same key for another entity is another operation",
			Fingerprint: "SHA-256 of type, subject and canonical data: the key again with other data is rejected idempotency_key_reused",
			UniqueBy:    a.UniqueBy,
		},
		Limits: Limits{
			MaxDataBytes: maxDataBytes, Schema: a.Schema, AllowedSources: a.AllowedSources,
			Timeout: p.Timeout.String(), MaxAttempts: p.MaxAttempts, ConfirmTimeout: p.ConfirmTimeout.String(),
			Deadline:    "optional per command: not started by then → rejected expired",
			GiveUpAfter: p.GiveUpAfter.String(),
			System:      systemOf(p.System),
		},
		Warnings: []string{},
	}
	if len(a.UniqueBy) > 0 {
		d.Identity.OnDuplicate = a.OnDuplicate
	}
	if d.Limits.AllowedSources == nil {
		d.Limits.AllowedSources = []string{"*"}
	}
	if p.LookupLag > 0 {
		d.Limits.LookupLag = p.LookupLag.String()
	}
	for _, r := range answersOf(a) {
		step := effect.NextStep(r.kind, p.CanConfirm, p.IdempotentByKey, false)
		how := then(step, p, d.Endpoints.Confirm)
		if r.inFlight {
			// Perform: an earlier request may yet take effect, so the
			// bound ends in unresolved rather than failed.
			how = strings.TrimSuffix(how, "then failed (connector_unavailable)") + "then unresolved (ambiguous): the earlier request may yet take effect"
		}
		d.Answers = append(d.Answers, Answer{Answer: r.label, Kind: r.kind.String(), Step: step.String(), Then: how})
	}
	d.Endpoints.Request, d.Endpoints.ConfirmRule = requestOf(a), confirmRule(a)
	d.Guarantees = apiGuarantees(a, p, guarantees(a, p))
	d.Warnings = append(d.Warnings, warnings(a, p)...)
	d.Warnings = append(d.Warnings, apiWarnings(a)...)
	return d
}

func systemOf(s consumer.SystemLimits) System {
	out := System{Name: s.Name, Shared: !s.Own, MaxConcurrent: "--max-inflight", Rate: s.Rate, Burst: s.Burst,
		BreakerAfter: s.BreakerAfter, ProbeEvery: s.ProbeEvery.String()}
	if s.MaxConcurrent > 0 {
		out.MaxConcurrent = fmt.Sprint(s.MaxConcurrent)
	}
	return out
}

// answer is a connector answer and its classification; inFlight as
// connectors.Result.InFlight.
type answer struct {
	label    string
	kind     connectors.Kind
	inFlight bool
}

// answersOf lists the answers of a's connector, classified by the
// connector's own functions.
func answersOf(a *config.Action) []answer {
	switch a.Connector {
	case config.ConnectorHTTP:
		st := a.API.Statuses
		as := statusAnswers(st)
		other := ""
		if !st.IsZero() {
			other = ", other than those above"
		}
		as = append(as,
			answer{"timeout (request sent, no response)", httpconn.ClassifyTransportError(true), false},
			answer{"HTTP 5xx (500, 502, 504" + other + ")", httpconn.ClassifyStatus(500), false})
		if !slices.Contains(st.Ambiguous, 503) && !slices.Contains(st.NotDone, 503) {
			as = append(as, answer{"HTTP 503", httpconn.ClassifyStatus(503), false})
		}
		as = append(as,
			answer{"HTTP 4xx (not 408, 425, 429" + other + ")", httpconn.ClassifyStatus(400), false},
			answer{"HTTP 429 (and 408, 425" + other + ")", httpconn.ClassifyStatus(429), false},
			answer{"connection refused (not sent)", httpconn.ClassifyTransportError(false), false})
		return append(as, apiAnswers(a)...)
	case config.ConnectorKafka:
		return []answer{
			{"timeout (no acknowledgement)", kafkaconn.ClassifyProduceError(context.DeadlineExceeded), false},
			{"retriable broker error", kafkaconn.ClassifyProduceError(kerr.NotLeaderForPartition), false},
			{"record refused (non-retriable, e.g. too large)", kafkaconn.ClassifyProduceError(kerr.MessageTooLarge), false},
		}
	}
	if a.EffectsFile != "" {
		return []answer{{"effects file appended", connectors.Succeeded, false}, {"effects file append failed", connectors.Ambiguous, false}}
	}
	return []answer{{"always", connectors.Succeeded, false}}
}

// statusAnswers are the rows of the codes an API reclassifies
// (statuses), classified as Execute classifies them.
func statusAnswers(st httpconn.Statuses) []answer {
	var out []answer
	for _, l := range st.Lists() {
		for _, c := range l.Codes {
			out = append(out, answer{fmt.Sprintf("HTTP %d (%s)", c, l.Field), st.ClassifyStatus(c), st.InFlight(c)})
		}
	}
	return out
}

func confirmHow(a *config.Action, p consumer.Protection) string {
	switch {
	case !p.CanConfirm:
		return "none"
	case a.Connector == config.ConnectorHTTP && a.API.Confirm != nil:
		return or(strings.ToUpper(a.API.Confirm.Method), "GET") + " " + a.API.Confirm.URL
	case a.Connector == config.ConnectorHTTP:
		return "GET " + a.ConfirmURL
	case a.Connector == config.ConnectorKafka:
		return "read back " + a.Topic
	}
	return "effects file"
}

// then says what a step leads to under p.
func then(s effect.Step, p consumer.Protection, how string) string {
	n := p.MaxAttempts
	retry := fmt.Sprintf("retry up to %d attempts, then failed (connector_unavailable)", n)
	if n == 1 {
		retry = "failed (connector_unavailable), no retry: max_attempts is 1"
	}
	switch s {
	case effect.StepSucceed:
		return "succeeded"
	case effect.StepFail:
		return "failed (connector_rejected), not retried"
	case effect.StepRetry:
		return fmt.Sprintf("retry after backoff or Retry-After, using up no attempt, until give_up_after (%s) or the deadline, then failed (connector_unavailable)", p.GiveUpAfter)
	case effect.StepConfirm:
		notFound := "not found"
		if p.LookupLag > 0 {
			notFound = fmt.Sprintf("not found once lookup_lag (%s) has passed after the attempt's deadline plus --clock-drift (asked again until then)", p.LookupLag)
		}
		return fmt.Sprintf("confirm (%s) for up to %s: found → succeeded; %s → %s; no answer → unresolved (confirmation_timeout)",
			how, p.ConfirmTimeout, notFound, strings.TrimSuffix(retry, ", then failed (connector_unavailable)"))
	case effect.StepReexecute:
		return fmt.Sprintf("execute again with the same key, up to %d attempts (the external system deduplicates it), then unresolved (ambiguous_no_confirm)", n)
	case effect.StepUnresolved:
		return "unresolved (ambiguous_no_confirm) at once: an operator resolves it"
	}
	return s.String()
}

func guarantees(a *config.Action, p consumer.Protection) []Guarantee {
	if p.Effectless {
		why := "the connector has no effect outside the process"
		return []Guarantee{{"G1", HoldsFully, why}, {"G2", HoldsFully, why}, {"G3", HoldsFully, why}}
	}
	g1 := Guarantee{"G1", HoldsFully, "one owner per entity; an attempt is not sent after its deadline, and a new owner waits past it"}
	if a.Connector == config.ConnectorHTTP {
		g1 = Guarantee{"G1", HoldsExternal, "a paused old owner's late request is refused only if the endpoint honours Onceflight-Deadline and refuses a lower Onceflight-Fencing-Token"}
	}
	var g2, g3 Guarantee
	switch {
	case p.CanConfirm:
		g2 = Guarantee{"G2", HoldsExternal, "executed again only after the confirmation said not found: relies on it answering truthfully"}
		switch a.Connector {
		case config.ConnectorKafka:
			g2.Holds, g2.Why = HoldsFully, "executed again only after reading the topic back found no record of the key and none is outstanding"
		case config.ConnectorNoop:
			g2.Holds, g2.Why = HoldsFully, "executed again only after the effects file showed no line for the key"
		}
		g3 = Guarantee{"G3", g2.Holds, "an ambiguous answer is confirmed before anything else"}
	case p.IdempotentByKey:
		g2 = Guarantee{"G2", HoldsExternal, "an ambiguous attempt is sent again with the same Idempotency-Key: relies on the external system deduplicating it"}
		g3 = Guarantee{"G3", HoldsExternal, "retried without confirmation, declared safe by idempotent_by_key"}
	default:
		g2 = Guarantee{"G2", HoldsFully, "never executed again once an attempt may have taken effect"}
		g3 = Guarantee{"G3", HoldsFully, "an ambiguous answer becomes unresolved for an operator; never retried blindly"}
	}
	return []Guarantee{g1, g2, g3}
}

func warnings(a *config.Action, p consumer.Protection) []string {
	var w []string
	if !p.Effectless && !p.CanConfirm && !p.IdempotentByKey {
		w = append(w, "no confirm_url and not idempotent_by_key: every timeout or 5xx becomes unresolved and waits for an operator")
	}
	if !p.Effectless && !p.CanConfirm && p.MaxAttempts > 1 {
		if p.IdempotentByKey {
			w = append(w, fmt.Sprintf("max_attempts %d with no confirmation: after a timeout the same key is sent again up to %d times, safe only if the external system really deduplicates %s", p.MaxAttempts, p.MaxAttempts, dedupedBy(a)))
		} else {
			w = append(w, fmt.Sprintf("max_attempts %d with no confirmation: no attempt that may have taken effect is repeated, so it limits nothing; answers that say the effect did not happen (429, 503, connection refused) are retried until give_up_after (%s)", p.MaxAttempts, p.GiveUpAfter))
		}
	}
	if len(a.UniqueBy) == 0 {
		lower := strings.ToLower(a.Name)
		for _, m := range moneyWords {
			if strings.Contains(lower, m) {
				w = append(w, fmt.Sprintf("the name suggests money (%s) and there is no unique_by: two keys for one business change both execute", m))
				break
			}
		}
	}
	return w
}

// WriteJSON writes acts as an indented JSON document {"actions": [...]}.
func WriteJSON(w io.Writer, acts []Action) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"actions": acts}); err != nil {
		return fmt.Errorf("write actions: %w", err)
	}
	return nil
}

// WriteText writes acts for a terminal: one block per action, each of its
// three parts (facts, answers, guarantees) aligned on its own.
func WriteText(w io.Writer, acts []Action) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// section ends an aligned part: tabwriter aligns a column over every
	// line written before a flush.
	section := func() { _ = tw.Flush() }
	for i, a := range acts {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s (%s)\n", a.Name, a.Connector)
		e := a.Endpoints
		for _, kv := range [][2]string{{"url", e.URL}, {"topic", e.Topic}, {"brokers", strings.Join(e.Brokers, ",")}} {
			if kv[1] != "" {
				fmt.Fprintf(tw, "  %s:\t%s\n", kv[0], kv[1])
			}
		}
		fmt.Fprintf(tw, "  confirm:\t%s\n", e.Confirm)
		writeRequest(tw, e)
		fmt.Fprintf(tw, "  key:\t%s\n  scope:\t%s\n  fingerprint:\t%s\n", a.Identity.Key, a.Identity.Scope, a.Identity.Fingerprint)
		if len(a.Identity.UniqueBy) > 0 {
			fmt.Fprintf(tw, "  unique_by:\t%s (on duplicate: %s)\n", strings.Join(a.Identity.UniqueBy, ", "), a.Identity.OnDuplicate)
		} else {
			fmt.Fprintf(tw, "  unique_by:\tnone\n")
		}
		l := a.Limits
		size := "serve's --max-data-bytes"
		if l.MaxDataBytes > 0 {
			size = fmt.Sprintf("%d bytes", l.MaxDataBytes)
		}
		schema := l.Schema
		if schema == "" {
			schema = "none"
		}
		fmt.Fprintf(tw, "  data:\tat most %s, schema %s, sources %s\n", size, schema, strings.Join(l.AllowedSources, ", "))
		lag := ""
		if l.LookupLag != "" {
			lag = ", lookup lag " + l.LookupLag
		}
		fmt.Fprintf(tw, "  time:\tattempt %s, max_attempts %d, confirm %s%s, give up on \"not done\" after %s; deadline %s\n", l.Timeout, l.MaxAttempts, l.ConfirmTimeout, lag, l.GiveUpAfter, l.Deadline)
		fmt.Fprintf(tw, "  system:\t%s\n", l.System.Line())
		section()
		fmt.Fprintf(tw, "  answer\tkind\tthen\n")
		for _, r := range a.Answers {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Answer, r.Kind, r.Then)
		}
		section()
		for _, g := range a.Guarantees {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.ID, g.Holds, g.Why)
		}
		for _, wn := range a.Warnings {
			fmt.Fprintf(tw, "  WARNING\t%s\n", wn)
		}
		section()
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write actions: %w", err)
	}
	return nil
}

// Line is the system's limits in one line, for a terminal and the
// console's Actions page.
func (s System) Line() string {
	own := "its own"
	if s.Shared {
		own = "shared by name"
	}
	rate := "no rate limit"
	if s.Rate > 0 {
		rate = fmt.Sprintf("rate %g/s (burst %d)", s.Rate, s.Burst)
	}
	return fmt.Sprintf("%s (%s): at most %s requests in flight (adapted to its answers), %s, breaker after %d down answers, probe every %s",
		s.Name, own, s.MaxConcurrent, rate, s.BreakerAfter, s.ProbeEvery)
}

// timeString is RFC 3339 with milliseconds in UTC, the timeline's format.
func timeString(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
