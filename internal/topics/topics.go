// Package topics names Onceflight's Kafka topics (docs/README.md), shared by the
// executor and the CLI's client commands so both default to the same names.
package topics

// Defaults, each overridable by a flag.
const (
	DefaultCommands   = "onceflight.commands"
	DefaultOutcomes   = "onceflight.outcomes"
	DefaultJournal    = "onceflight.journal"
	DefaultDeadletter = "onceflight.deadletter"
)

// Topics is the set of topic names one deployment uses.
type Topics struct {
	Commands   string
	Outcomes   string
	Journal    string
	Deadletter string
}

// Default returns the default topic names.
func Default() Topics {
	return Topics{DefaultCommands, DefaultOutcomes, DefaultJournal, DefaultDeadletter}
}
