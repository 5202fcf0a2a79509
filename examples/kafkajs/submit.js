// Submit one command with kafkajs and wait for its outcome: the protocol of
// package client (github.com/onceflight/onceflight/client) from Node.js.
//
// Usage: node submit.js BROKER ACTION ENTITY KEY [DATA_JSON]
// Needs kafkajs 2 and kafkajs-snappy (the executor's producer compresses
// outcomes with snappy): npm install kafkajs@2.2.4 kafkajs-snappy@1.1.0
// Exit 0 if the command succeeded, 3 if not, 4 if no outcome came in 30s.
'use strict';
const { Kafka, logLevel, Partitioners, CompressionTypes, CompressionCodecs } = require('kafkajs');
CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy');
const crypto = require('crypto');

const [broker, action, entity, key, data = '{}'] = process.argv.slice(2);
if (!key) {
  console.error('usage: node submit.js BROKER ACTION ENTITY KEY [DATA_JSON]');
  process.exit(2);
}
const outcomes = 'onceflight.outcomes';
const id = crypto.randomUUID();

async function main() {
  // For TLS/SASL add ssl and sasl here (kafkajs options), e.g.
  // sasl: { mechanism: 'scram-sha-512', username, password }, ssl: true.
  const kafka = new Kafka({ clientId: 'onceflight-example', brokers: [broker], logLevel: logLevel.WARN });
  const admin = kafka.admin();
  // read_committed: the executor writes outcomes in transactions.
  const consumer = kafka.consumer({ groupId: `onceflight-example-${id}`, readUncommitted: false });
  // Kafka's default (murmur2) partitioner, keyed by the entity: the
  // executor's entity mapping.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });

  // 1. The outcomes' end offsets, taken BEFORE producing: an outcome is
  //    written after its command, so reading from them misses nothing.
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(outcomes);
  await admin.disconnect();

  let resolve;
  const got = new Promise((r) => { resolve = r; });
  await consumer.connect();
  await consumer.subscribe({ topic: outcomes });
  await consumer.run({
    eachMessage: async ({ message }) => {
      let ev;
      try { ev = JSON.parse(message.value.toString()); } catch (e) { return; } // not ours
      if (ev.causationid === id) resolve(ev);
    },
  });
  for (const { partition, offset } of ends) consumer.seek({ topic: outcomes, partition, offset });

  // 2. The command, CloudEvents structured mode (the executor also takes
  //    binary mode: ce_* headers, data as the value).
  await producer.connect();
  await producer.send({
    topic: 'onceflight.commands',
    messages: [{
      key: entity,
      headers: { 'content-type': 'application/cloudevents+json' },
      value: JSON.stringify({ specversion: '1.0', id, source: 'kafkajs', type: action, subject: entity, idempotencykey: key, data: JSON.parse(data) }),
    }],
  });
  console.error(`submitted ${id}`);

  // 3. Wait for the outcome whose causationid is the command's id.
  let timer;
  const timeout = new Promise((r) => { timer = setTimeout(() => r(null), 30000); });
  const ev = await Promise.race([got, timeout]);
  clearTimeout(timer);
  await producer.disconnect();
  await consumer.disconnect();
  if (!ev) {
    console.error(`no outcome for ${id} within 30s (is an executor running?)`);
    return 4;
  }
  console.log(JSON.stringify(ev));
  return ev.data.status === 'succeeded' ? 0 : 3;
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(1); });
