package kafkaconf_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/kafkaconf"
)

// Properties, later ones overriding earlier ones (a flag after its file,
// as Load orders them), become franz-go options.
func ExampleNew() {
	c, err := kafkaconf.New([]kafkaconf.Property{
		{Key: "security.protocol", Value: "SASL_PLAINTEXT", Source: "client.properties:1"},
		{Key: "sasl.mechanism", Value: "SCRAM-SHA-512", Source: "client.properties:2"},
		{Key: "sasl.username", Value: "onceflight", Source: "client.properties:3"},
		{Key: "sasl.password", Value: "from-the-file", Source: "client.properties:4"},
		{Key: "sasl.password", Value: "from-a-flag", Source: "-X"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c, "password from a flag:", c.Password == "from-a-flag")

	// Append c.Opts() to the client's own options. NewClient does not
	// connect; kafkaconf.Ping(ctx, cl) would check the login now.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("kafka-1.example:9092")}, c.Opts()...)...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	// Output: SASL_PLAINTEXT SCRAM-SHA-512 user "onceflight" password from a flag: true
}

// Every problem is reported with the property and where it was written.
func ExampleFromMap() {
	_, err := kafkaconf.FromMap(map[string]string{
		"security.protocol": "SSL",
		"sasl.mechanism":    "PLAIN",
		"linger.ms":         "5",
	})
	fmt.Println(err)
	// Output:
	// property "linger.ms": unknown property (supported: security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ssl.certificate.location, ssl.key.location, ssl.endpoint.identification.algorithm, client.id, enable.metrics.push)
	// property "sasl.mechanism": set, but security.protocol is SSL; use SASL_SSL or SASL_PLAINTEXT to authenticate
}
