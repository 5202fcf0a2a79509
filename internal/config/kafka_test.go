package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/kafkatest"
)

const kafkaAction = "actions:\n  x:\n    connector: kafka\n    topic: t\n"

func TestKafkaConnectionErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown property", kafkaAction + "    kafka:\n      properties:\n        linger.ms: 5\n",
			[]string{`c.yaml:7:9: action "x": field "kafka.properties": property "linger.ms": unknown property`}},
		{"bad value", kafkaAction + "    kafka:\n      properties:\n        security.protocol: TLS\n",
			[]string{`c.yaml:7:28: action "x": field "kafka.properties": property "security.protocol": "TLS" is not one of`}},
		{"missing property", kafkaAction + "    kafka:\n      properties:\n        security.protocol: SASL_SSL\n        sasl.mechanism: PLAIN\n",
			[]string{`c.yaml:6:7: action "x": field "kafka.properties": property "sasl.username": required`, `property "sasl.password": required`}},
		{"unreadable CA relative to the file", kafkaAction + "    kafka:\n      properties: {security.protocol: SSL, ssl.ca.location: nope.pem}\n",
			[]string{`property "ssl.ca.location": read CA file`, filepath.Join("conf", "nope.pem")}},
		{"property not a string", kafkaAction + "    kafka:\n      properties:\n        client.id: [a]\n",
			[]string{`7:20: action "x": field "kafka.properties.client.id": must be a string`}},
		{"unknown field", kafkaAction + "    kafka:\n      bootstrap: [a:1]\n",
			[]string{`6:7: action "x": unknown field "kafka.bootstrap"`}},
		{"empty brokers", kafkaAction + "    kafka:\n      brokers: []\n",
			[]string{`field "kafka.brokers": must list at least one host:port`}},
		{"bad broker", kafkaAction + "    kafka:\n      brokers: [\"a:1,b:2\"]\n",
			[]string{`field "kafka.brokers": invalid broker "a:1,b:2"`}},
		{"not a mapping", kafkaAction + "    kafka: yes\n",
			[]string{`action "x": field "kafka": must be a mapping`}},
		{"on another connector", "actions:\n  x:\n    connector: noop\n    kafka: {brokers: [a:1]}\n",
			[]string{`action "x": field "kafka": only valid for connector kafka`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(filepath.Join("conf", "c.yaml"), []byte(c.yaml))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			msg := strings.ReplaceAll(err.Error(), filepath.Join("conf", "c.yaml"), "c.yaml")
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
		})
	}
}

func TestKafkaConnection(t *testing.T) {
	t.Parallel()
	certs := kafkatest.NewCerts(t)
	path := filepath.Join(filepath.Dir(certs.CA), "c.yaml")
	cfg, err := Parse(path, []byte(`
actions:
  other:
    connector: kafka
    topic: t
    kafka:
      brokers: [kafka-1.example:9093, kafka-2.example:9093]
      properties:
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-512
        sasl.username: onceflight
        sasl.password: "p:w=d"
        ssl.ca.location: ca.pem
  same:
    connector: kafka
    topic: t
`))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Actions["other"]
	if !o.OwnConnection() || len(o.Brokers) != 2 || o.Kafka.Mechanism != "SCRAM-SHA-512" || o.Kafka.Password != "p:w=d" || o.Kafka.Protocol != "SASL_SSL" {
		t.Errorf("other = %+v, kafka %+v", o, o.Kafka)
	}
	if s := cfg.Actions["same"]; s.OwnConnection() {
		t.Errorf("same has its own connection: %+v", s)
	}
}
