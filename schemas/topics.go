package schemas

// The default topic names (docs/README.md), each overridable by a flag.
// They are wire values like the headers: the executor, the client and the
// CLI must agree on them, so they are defined here once.
const (
	DefaultCommandsTopic   = "onceflight.commands"
	DefaultOutcomesTopic   = "onceflight.outcomes"
	DefaultJournalTopic    = "onceflight.journal"
	DefaultDeadletterTopic = "onceflight.deadletter"
)

// Topics is the set of topic names one deployment uses.
type Topics struct {
	Commands   string
	Outcomes   string
	Journal    string
	Deadletter string
}

// DefaultTopics returns the default topic names.
func DefaultTopics() Topics {
	return Topics{DefaultCommandsTopic, DefaultOutcomesTopic, DefaultJournalTopic, DefaultDeadletterTopic}
}

// All returns the topic names, commands first.
func (t Topics) All() []string {
	return []string{t.Commands, t.Journal, t.Outcomes, t.Deadletter}
}
