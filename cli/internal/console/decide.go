package console

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// Decider sends an operator decision as a signed control command.
type Decider interface {
	Send(ctx context.Context, e Execution, k Kind, reason, by string) (Decision, error)
}

// Kind is a decision the console offers.
type Kind struct {
	Name string // URL segment: resolve-succeeded, approve, ...
	// Type is the control command's type; As the resolution, if any.
	Type string
	As   schemas.Status
	// From are the statuses it applies to (released records excluded).
	From []schemas.Status
	// Label is the button's text; Effect says what will happen, on the
	// confirmation page.
	Label, Effect string
	Danger        bool
}

// kinds are the decisions, in the order their buttons show.
var kinds = []Kind{
	{Name: "resolve-succeeded", Type: schemas.TypeResolve, As: schemas.StatusSucceeded, From: []schemas.Status{schemas.StatusUnresolved},
		Label: "Resolve as succeeded", Effect: "The record becomes succeeded: you checked that the effect happened. The command's outcome is published again as succeeded; nothing is executed."},
	{Name: "resolve-failed", Type: schemas.TypeResolve, As: schemas.StatusFailed, From: []schemas.Status{schemas.StatusUnresolved},
		Label: "Resolve as failed", Effect: "The record becomes failed: you checked that the effect did not happen. The command's outcome is published again as failed; nothing is executed, and a repeat of the key gets failed too (release it to run it again)."},
	{Name: "approve", Type: schemas.TypeApprove, From: []schemas.Status{schemas.StatusHeld},
		Label: "Approve: run it once", Effect: "The executor runs the held command through its connector once, although it looked like a duplicate, and publishes its outcome.", Danger: true},
	{Name: "reject", Type: schemas.TypeResolve, As: schemas.StatusRejected, From: []schemas.Status{schemas.StatusHeld},
		Label: "Reject the duplicate", Effect: "The held command ends rejected and never runs; its outcome is published as rejected."},
	{Name: "release", Type: schemas.TypeRelease, From: []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected},
		Label: "Release the key", Effect: "The key is freed: the record stays, marked released, and the next command with this key for this entity executes as new work (a second effect, if it is sent again).", Danger: true},
}

func kindNamed(name string) (Kind, bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.Name == name })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}

// Applies reports whether k may be taken on e now.
func (k Kind) Applies(e Execution) bool {
	return !e.Released && slices.Contains(k.From, e.Status)
}

func kindsFor(e Execution) []Kind {
	var out []Kind
	for _, k := range kinds {
		if k.Applies(e) {
			out = append(out, k)
		}
	}
	return out
}

// ClientDecider sends decisions with a public client that signs commands
// with control keys (client.WithControlKeys). Each decision is valid for
// ValidFor from when it is sent (its signed not_after; 0:
// schemas.DecisionValidity).
type ClientDecider struct {
	C        *client.Client
	ValidFor time.Duration
}

// Send publishes k on e to the entity's partition, signed by the client,
// with by (the authenticated operator) recorded as its author.
func (d ClientDecider) Send(ctx context.Context, e Execution, k Kind, reason, by string) (Decision, error) {
	id := uuid.NewString()
	dd := schemas.Decision{Key: e.Key, As: string(k.As), Reason: reason, By: by, NotAfter: notAfter(time.Now(), d.ValidFor)}
	data, err := json.Marshal(dd)
	if err != nil {
		return Decision{}, fmt.Errorf("decision: %w", err)
	}
	verb := k.Name
	if k.Type == schemas.TypeResolve {
		verb = "resolve"
	}
	// The same key scheme as `onceflight resolve`: one decision is one
	// command, never a repeat of another.
	ikey := verb + "/" + e.Key + "/" + id
	if _, err := d.C.Send(ctx, client.Command{Action: k.Type, Entity: e.Entity, Key: ikey, ID: id, Source: "onceflight-console", Data: data}); err != nil {
		return Decision{}, err
	}
	return Decision{ID: id, Kind: k.Name, As: k.As, By: by, Reason: reason, Key: ikey}, nil
}

// notAfter is when a decision sent at now for validFor expires (0:
// schemas.DecisionValidity), to the second.
func notAfter(now time.Time, validFor time.Duration) time.Time {
	if validFor <= 0 {
		validFor = schemas.DecisionValidity
	}
	return now.Add(validFor).UTC().Truncate(time.Second)
}
