package client

import "github.com/onceflight/onceflight/schemas"

// Topics names the four topics of one deployment (docs/README.md). The executor's
// defaults are in DefaultTopics; an empty field means its default, so a
// deployment that renamed one topic sets only that field.
type Topics struct {
	// Commands is where Submit produces commands.
	Commands string
	// Outcomes is where the executor publishes outcome events; Wait and
	// Outcomes read it.
	Outcomes string
	// Journal holds the execution records, the source of truth that
	// Status reads.
	Journal string
	// Deadletter holds commands that could not be decoded.
	Deadletter string
}

// DefaultTopics returns the executor's default topic names:
// onceflight.commands, onceflight.outcomes, onceflight.journal and
// onceflight.deadletter.
func DefaultTopics() Topics { return Topics(schemas.DefaultTopics()) }

// WithDefaults returns t with every empty field set to its default.
func (t Topics) WithDefaults() Topics {
	d := DefaultTopics()
	for _, f := range []struct {
		v *string
		d string
	}{
		{&t.Commands, d.Commands}, {&t.Outcomes, d.Outcomes}, {&t.Journal, d.Journal}, {&t.Deadletter, d.Deadletter},
	} {
		if *f.v == "" {
			*f.v = f.d
		}
	}
	return t
}
