package schemas

// The default topic names (docs/README.md), each overridable by a flag.
// They are wire values like the headers: the executor, the client and the
// CLI must agree on them, so they are defined here once.
const (
	DefaultCommandsTopic   = "onceflight.commands"
	DefaultOutcomesTopic   = "onceflight.outcomes"
	DefaultJournalTopic    = "onceflight.journal"
	DefaultDeadletterTopic = "onceflight.deadletter"
	DefaultStatusTopic     = "onceflight.status"
)

// Topics names the topics of one deployment (docs/README.md): the
// executor, the client, the audit and the CLI take this one type, so one
// value configures them all. An empty field means its default
// (WithDefaults).
type Topics struct {
	// Commands is where commands are submitted.
	Commands string
	// Outcomes is where the executor publishes outcome events.
	Outcomes string
	// Journal holds the execution records, the source of truth.
	Journal string
	// Deadletter holds commands that could not be decoded.
	Deadletter string
	// Status holds each executor's latest status (ExecutorStatus):
	// compacted, one partition, not part of All (nothing of an execution
	// is in it, and its partition count is not the commands topic's).
	Status string
}

// DefaultTopics returns the default topic names.
func DefaultTopics() Topics {
	return Topics{DefaultCommandsTopic, DefaultOutcomesTopic, DefaultJournalTopic, DefaultDeadletterTopic, DefaultStatusTopic}
}

// All returns the topic names, commands first.
func (t Topics) All() []string {
	return []string{t.Commands, t.Journal, t.Outcomes, t.Deadletter}
}

// WithDefaults returns t with every empty field set to its default, so
// that a deployment that renamed one topic sets only that field.
func (t Topics) WithDefaults() Topics {
	d := DefaultTopics()
	for _, f := range []struct {
		v *string
		d string
	}{
		{&t.Commands, d.Commands}, {&t.Outcomes, d.Outcomes}, {&t.Journal, d.Journal}, {&t.Deadletter, d.Deadletter},
		{&t.Status, d.Status},
	} {
		if *f.v == "" {
			*f.v = f.d
		}
	}
	return t
}
