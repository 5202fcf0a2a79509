package consumer

import (
	"fmt"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/config"
)

// Actions is a parsed actions file: the actions, their policies and the
// retention and reconcile settings (docs/configuration.md). Load it with
// LoadActions; the YAML parser is the one `serve` uses, with the same
// errors (every problem, with its line and column).
type Actions = config.Config

// Action is one configured action, as the file gives it; a registered
// connector reads its own keys from Settings.
type Action = config.Action

// ConnectorFactory builds the connector of one action. It is called once
// per action using that kind, when the executor is created; a connector
// that implements connectors.Confirmer (and connectors.CanConfirmer) is
// asked to confirm ambiguous results, one that does not makes them
// unresolved — exactly as for the built-in connectors. Check a connector
// with the connectortest suite before you trust it with an effect.
type ConnectorFactory func(a *Action) (connectors.Connector, error)

// WithConnector makes kind usable as an action's `connector:` in the
// actions file, built by f. The built-in kinds (http, kafka, noop) cannot
// be replaced.
func WithConnector(kind string, f ConnectorFactory) Option {
	return func(e *Executor) {
		if e.factories == nil {
			e.factories = map[string]ConnectorFactory{}
		}
		e.factories[kind] = f
	}
}

// LoadActions reads the actions file at path, accepting the connector
// kinds given (those the program registers with WithConnector) besides
// the built-in ones.
func LoadActions(path string, kinds ...string) (*Actions, error) {
	for _, k := range kinds {
		switch k {
		case config.ConnectorHTTP, config.ConnectorKafka, config.ConnectorNoop, "":
			return nil, fmt.Errorf("consumer: connector kind %q is built in or empty and cannot be registered", k)
		}
	}
	return config.LoadWith(path, kinds)
}
