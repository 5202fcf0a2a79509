package effect_test

import (
	"testing"

	"github.com/onceflight/onceflight/connectors/connectortest"
)

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    connectortest.Features
		new  func() *Faulty
	}{
		{"confirming", connectortest.Features{Confirm: true}, NewFaulty},
		{"no-confirm", connectortest.Features{}, func() *Faulty { return &Faulty{NoConfirm: true} }},
		{"idempotent", connectortest.Features{IdempotentByKey: true}, func() *Faulty {
			return &Faulty{NoConfirm: true, IdempotentByKey: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			connectortest.Run(t, tc.f, func(t *testing.T) connectortest.Harness {
				c := tc.new()
				return connectortest.Harness{
					Conn:    c,
					Effects: c.Effects,
					ApplyThenAmbiguous: func(key string) {
						c.Inject(key, FaultAmbiguousAfter)
					},
				}
			})
		})
	}
}
