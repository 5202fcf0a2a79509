package config

import (
	"fmt"
	"strings"
)

// Error is one problem in an actions file. Parse returns every problem it
// finds, joined with errors.Join, so an operator can fix a file in one pass;
// errors.As retrieves the first as an *Error for programmatic checks.
type Error struct {
	// File is the configuration path as given to Load or Parse.
	File string
	// Line and Column locate the problem (1-based); both are 0 when there is
	// nothing to point at, such as a missing field.
	Line, Column int
	// Action is the action the problem belongs to; "" for top-level fields.
	Action string
	// Field is the YAML field concerned ("url", "reconcile.every"); "" when
	// the message is about the action or an unknown key.
	Field string
	// Msg describes the problem.
	Msg string
}

// Error formats as `file:line:col: action "name": field "f": msg`, leaving
// out the parts that do not apply, in the style of compilers so editors can
// jump to the position.
func (e *Error) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "config"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Action != "" {
		fmt.Fprintf(&b, "action %q: ", e.Action)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}
