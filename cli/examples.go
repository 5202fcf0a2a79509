package cli

import "github.com/spf13/cobra"

// examples are the Example: sections of the help texts, by command path.
// They live together so that TestExamples can check, in one place, that
// every command has one and that each flag they use exists: an example
// that no longer runs is worse than none. A command that sets its own
// Example keeps it.
var examples = map[string]string{
	"onceflight": `  onceflight demo
  onceflight serve --brokers kafka-1:9092 --config onceflight.yaml
  onceflight submit --action noop.ping --entity dev-1 --wait`,
	"onceflight serve": `  # production: Kafka or Redpanda, a stable id per instance
  onceflight serve --brokers kafka-1:9092,kafka-2:9092 --config onceflight.yaml \
    --executor-id onceflight-0 --data-dir /var/lib/onceflight \
    --http 0.0.0.0:8080 --http-token-file /etc/onceflight/http-tokens --metrics-http 0.0.0.0:8089
  # development: no --brokers starts the embedded broker on 127.0.0.1:9092
  onceflight serve --config onceflight.yaml --data-dir ./onceflight-data`,
	"onceflight broker": `  onceflight broker --listen 127.0.0.1:9092 --data-dir ./broker-data
  onceflight broker --listen 0.0.0.0:9092 --advertise broker:9092 --data-dir /data`,
	"onceflight submit": `  onceflight submit --action payments.refund --entity order-1042 --key refund-1042 \
    --data '{"amount":25,"currency":"EUR"}' --wait --timeout 10s
  onceflight submit --action noop.ping --entity dev-1 --data @command.json`,
	"onceflight outcomes": `  onceflight outcomes --from-beginning --entity order-1042
  onceflight outcomes --follow --key refund-1042`,
	"onceflight status": `  onceflight status refund-1042
  onceflight status --unresolved
  onceflight status --held --brokers kafka-1:9092`,
	"onceflight resolve": `  onceflight resolve refund-1042 --as succeeded --reason "refund re_77 found in the PSP dashboard"
  onceflight resolve refund-1043 --as failed --reason "PSP has no such refund" --by alice
  onceflight resolve refund-1044 --entity order-1044 --as rejected --reason "duplicate of refund-1042" \
    --control-key-file /etc/onceflight/control-keys.json`,
	"onceflight approve": `  export ONCEFLIGHT_CONTROL_KEY_FILE=/etc/onceflight/control-keys.json
  onceflight status --held
  onceflight approve refund-1042-b --reason "the customer asked for a second refund"`,
	"onceflight release": `  onceflight release refund-1042 --entity order-1042 --reason "PSP rejected the refund; redo it" \
    --control-key-file /etc/onceflight/control-keys.json`,
	"onceflight reconcile": `  onceflight reconcile refund-2001                     # confirm it now; prints the new outcome
  onceflight reconcile refund-2001 --entity order-2001 --timeout 2m`,
	"onceflight keygen": `  onceflight keygen --out /etc/onceflight/operator-keys.json          # + operator-keys.pub.json for executors
  onceflight keygen --out /etc/onceflight/operator-keys.json --id ops-2027-01   # rotation: add a key
  onceflight keygen --kind executor --id executor-eu-1 --out /etc/onceflight/executor.key \
    --trusted-keys /etc/onceflight/trusted-keys`,
	"onceflight audit checkpoints": `  onceflight audit checkpoints --trusted-keys trusted-keys --out saved-checkpoints`,
	"onceflight audit verify": `  onceflight audit verify --checkpoints saved-checkpoints --trusted-keys trusted-keys
  onceflight audit verify --checkpoints topic --require-signed --trusted-keys trusted-keys --format json`,
	"onceflight audit prove":       `  onceflight audit prove refund-1042 --entity order-1042 --trusted-keys trusted-keys --out proofs/`,
	"onceflight audit check-proof": `  onceflight audit check-proof proofs/*.tlog-proof --trusted-keys trusted-keys`,
	"onceflight demo": `  onceflight demo
  onceflight demo --console 127.0.0.1:8090   # keep running; open http://127.0.0.1:8090/
  onceflight demo --keep
  onceflight demo --service-only --listen 0.0.0.0:8081`,
	"onceflight console": `  # beside the executors, for people behind a token file
  onceflight console --brokers kafka-1:9092 --config onceflight.yaml --http 0.0.0.0:8090 \
    --data-dir /var/lib/onceflight-console --http-token-file /etc/onceflight/http-tokens \
    --control-key-file /etc/onceflight/control-keys.json
  # look only
  onceflight console --brokers kafka-1:9092 --config onceflight.yaml --read-only`,
	"onceflight audit": `  onceflight audit
  onceflight audit --partitions 0,3,5-7 --format json --group onceflight`,
	"onceflight version": `  onceflight version
  onceflight --version`,
	"onceflight actions": `  onceflight actions --config onceflight.yaml
  onceflight actions payments.refund -o json`,
	"onceflight explain": `  onceflight explain refund-1042
  onceflight explain refund-1042 --entity order-1042 -o json`,
	"onceflight topics": `  onceflight topics check --brokers kafka-1:9092 --config onceflight.yaml
  onceflight topics apply --brokers kafka-1:9092 --config onceflight.yaml`,
	"onceflight topics check":    `  onceflight topics check --brokers kafka-1:9092 --config onceflight.yaml --max-message-bytes 4194304`,
	"onceflight topics apply":    `  onceflight topics apply --brokers kafka-1:9092 --config onceflight.yaml`,
	"onceflight config":          `  onceflight config validate onceflight.yaml`,
	"onceflight config validate": `  onceflight config validate deploy/onceflight.yaml && echo ok`,
}

// setExamples fills the Example of root and its subcommands from examples.
func setExamples(c *cobra.Command) {
	if c.Example == "" {
		c.Example = examples[c.CommandPath()]
	}
	for _, sub := range c.Commands() {
		setExamples(sub)
	}
}
