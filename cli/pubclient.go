package cli

import (
	"context"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// onceflightClient returns the public client (package client) over the
// Kafka client of kf, so the CLI's submit, outcomes and status speak the
// protocol through the same code as a Go service does. closeFn closes both.
func (kf *kafkaFlags) onceflightClient(ctx context.Context, opts ...client.Option) (c *client.Client, closeFn func(), err error) {
	cl, err := kf.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err = client.New(append([]client.Option{client.WithClient(cl), client.WithTopics(schemas.Topics(kf.Topics))}, opts...)...)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); cl.Close() }, nil
}
