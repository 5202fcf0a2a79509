package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Check names, in report order. Scripts read them from the JSON report, so
// they never change.
const (
	CheckHashChain    = "hash_chain"
	CheckAnswered     = "commands_answered"
	CheckOutcomeIDs   = "outcome_ids"
	CheckOncePerKey   = "once_per_key"
	CheckSingleFlight = "single_flight"
	// CheckDecisionsSigned: every operator decision the executor accepted
	// (resolve, approve, release with a succeeded outcome) carries a valid
	// signature of a key in Options.ControlKeys. Checked only when keys
	// are given.
	CheckDecisionsSigned = "decisions_signed"
	// CheckOutcomesMatch: every outcome event states what the journal
	// states: its record is the journal record of its key current when
	// it was published, unchanged, or an answer the executor gives
	// without one (audit/outcomesmatch.go).
	CheckOutcomesMatch = "outcomes_match"
	// CheckEvidence: every record's status has the evidence its
	// established_by claims (docs/events.md#evidence).
	CheckEvidence = "evidence"
)

// guarantees says which docs/guarantees.md guarantee each check evidences, so a failed
// line in the report points at the promise that was broken.
var guarantees = map[string]string{
	CheckHashChain:       "G5",
	CheckAnswered:        "G4",
	CheckOutcomeIDs:      "G4",
	CheckOutcomesMatch:   "G4",
	CheckOncePerKey:      "G2",
	CheckSingleFlight:    "G1",
	CheckDecisionsSigned: "control commands",
	CheckJournalSigned:   "signed journal",
	CheckEvidence:        "G3",
}

// Violation is one record that breaks a check, named by where it is so an
// operator can read it with any Kafka tool.
type Violation struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key,omitempty"`
	Message   string `json:"message"`
}

// String names the violation's place; one about a whole topic (Partition
// -1) names the topic alone.
func (v Violation) String() string {
	if v.Partition < 0 {
		return v.Topic + ": " + v.Message
	}
	s := fmt.Sprintf("%s partition %d offset %d", v.Topic, v.Partition, v.Offset)
	if v.Key != "" {
		s += fmt.Sprintf(" key %q", v.Key)
	}
	return s + ": " + v.Message
}

// CheckResult is one check's verdict. Count is the number of violations
// found; Violations holds only the first Options.MaxViolations of them, so a
// systematic failure does not flood the report.
type CheckResult struct {
	Name       string      `json:"name"`
	Guarantee  string      `json:"guarantee"`
	OK         bool        `json:"ok"`
	Count      int         `json:"count"`
	Violations []Violation `json:"violations"`
}

// Counts summarises what was audited, so a reader can tell an "ok" over a
// thousand commands from an "ok" over none.
type Counts struct {
	Commands       int `json:"commands"`
	Outcomes       int `json:"outcomes"`
	JournalRecords int `json:"journal_records"`
	Keys           int `json:"keys"`
	UnresolvedKeys int `json:"unresolved_keys"`
	Republications int `json:"republications"`
	Pending        int `json:"pending"`
	Deadlettered   int `json:"deadlettered"`
	Forwarded      int `json:"forwarded"`
	// LegacyHashes counts records hashed the round-1 way (before RFC 8785).
	LegacyHashes int `json:"legacy_hashes,omitempty"`
	// WithoutEstablishedBy counts settled journal records written before
	// records said how their status was established (accepted as they are).
	WithoutEstablishedBy int `json:"without_established_by,omitempty"`
	// Decisions counts operator decisions (resolve, approve, release) on
	// the commands topic; RefusedDecisions those that failed the signature
	// check and were refused by the executor (not a violation).
	Decisions        int `json:"decisions,omitempty"`
	RefusedDecisions int `json:"refused_decisions,omitempty"`
	// UnjournaledOutcomes counts outcomes the executor publishes without
	// a journal record by design (outcomes_match): rejections that keep
	// the key's record, answers of deadlettered commands, executor_error.
	UnjournaledOutcomes int `json:"unjournaled_outcomes,omitempty"`
	// OutcomesPastRetention counts outcomes whose record is not in a
	// journal partition whose start retention deleted: not compared.
	OutcomesPastRetention int `json:"outcomes_past_retention,omitempty"`
}

// Report is the result of an audit.
type Report struct {
	Checks []CheckResult `json:"checks"`
	Counts Counts        `json:"counts"`
	// Notes are observations that are not violations but change how the
	// result should be read (retention, partial partitions, key_memory).
	Notes []string `json:"notes,omitempty"`
}

// OK reports whether every check holds.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Failed is the number of checks that do not hold.
func (r Report) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// WriteText writes the report for a human: one line per check, its listed
// violations indented under it, then the counts and notes.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		if c.OK {
			fmt.Fprintf(&b, "%-18s (%s) ok\n", c.Name, c.Guarantee)
			continue
		}
		fmt.Fprintf(&b, "%-18s (%s) FAILED (%d)\n", c.Name, c.Guarantee, c.Count)
		for _, v := range c.Violations {
			fmt.Fprintf(&b, "    %s\n", v)
		}
		if more := c.Count - len(c.Violations); more > 0 {
			fmt.Fprintf(&b, "    ... and %d more (--max-violations)\n", more)
		}
	}
	n := r.Counts
	fmt.Fprintf(&b, "commands %d, outcomes %d, journal records %d, keys %d, unresolved keys %d, republications %d, pending %d, deadlettered %d, forwarded %d\n",
		n.Commands, n.Outcomes, n.JournalRecords, n.Keys, n.UnresolvedKeys, n.Republications, n.Pending, n.Deadlettered, n.Forwarded)
	if n.RefusedDecisions > 0 {
		fmt.Fprintf(&b, "note: %d of %d operator decisions did not verify and were refused by the executor\n", n.RefusedDecisions, n.Decisions)
	}
	if n.WithoutEstablishedBy > 0 {
		fmt.Fprintf(&b, "note: %d journal records were written before records said how their status was established; their evidence is not checked\n", n.WithoutEstablishedBy)
	}
	if n.UnjournaledOutcomes > 0 {
		fmt.Fprintf(&b, "note: %d outcomes answer without a journal record by design (rejections that keep the key's record, deadlettered commands, executor errors)\n", n.UnjournaledOutcomes)
	}
	if n.OutcomesPastRetention > 0 {
		fmt.Fprintf(&b, "note: %d outcomes carry a journal record retention deleted; they were not compared with the journal\n", n.OutcomesPastRetention)
	}
	if n.LegacyHashes > 0 {
		fmt.Fprintf(&b, "note: %d journal records carry the round-1 hash (before RFC 8785); they were checked with it\n", n.LegacyHashes)
	}
	for _, note := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one indented JSON object. Violations is
// always an array (never null) so consumers need no nil case.
func (r Report) WriteJSON(w io.Writer) error {
	r.Checks = slices.Clone(r.Checks) // not the caller's backing array
	for i := range r.Checks {
		if r.Checks[i].Violations == nil {
			r.Checks[i].Violations = []Violation{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
