package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
)

// Option changes what Main's commands can do.
type Option func(*settings) error

// settings are what the options set; commands find them in their context
// (settingsOf), so that no command's constructor needs to know of them.
type settings struct {
	// factories are the connector kinds registered with WithConnector.
	factories map[string]consumer.ConnectorFactory
}

// WithConnector makes kind usable as an action's `connector:` in the
// actions file, built by f (see consumer.ConnectorFactory): serve executes
// it, and `config validate`, `actions`, `topics` and the console read
// files that use it. The built-in kinds (http, kafka, noop) cannot be
// replaced. Check a connector with the connectortest suite before you
// trust it with an effect.
func WithConnector(kind string, f consumer.ConnectorFactory) Option {
	return func(s *settings) error {
		switch kind {
		case config.ConnectorHTTP, config.ConnectorKafka, config.ConnectorNoop, "":
			return fmt.Errorf("connector kind %q is built in or empty and cannot be registered", kind)
		}
		if f == nil {
			return fmt.Errorf("connector kind %q: nil factory", kind)
		}
		if _, dup := s.factories[kind]; dup {
			return fmt.Errorf("connector kind %q registered twice", kind)
		}
		s.factories[kind] = f
		return nil
	}
}

func newSettings(opts []Option) (*settings, error) {
	s := &settings{factories: map[string]consumer.ConnectorFactory{}}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type settingsKey struct{}

func withSettings(ctx context.Context, s *settings) context.Context {
	return context.WithValue(ctx, settingsKey{}, s)
}

// settingsOf returns the settings Main put in ctx; none (a command run by a
// test without Main) are the defaults.
func settingsOf(ctx context.Context) *settings {
	if s, ok := ctx.Value(settingsKey{}).(*settings); ok {
		return s
	}
	return &settings{}
}

// kinds are the registered connector kinds, for the actions file parser.
func (s *settings) kinds() []string { return slices.Sorted(maps.Keys(s.factories)) }

// executorOptions register the connectors with an executor (or with
// consumer.Protections, which builds the actions as an executor would).
func (s *settings) executorOptions() []consumer.Option {
	var out []consumer.Option
	for _, k := range s.kinds() {
		out = append(out, consumer.WithConnector(k, s.factories[k]))
	}
	return out
}

// loadActions reads the actions file at path, accepting the registered
// connector kinds besides the built-in ones.
func loadActions(ctx context.Context, path string) (*config.Config, error) {
	return config.LoadWith(path, settingsOf(ctx).kinds())
}
