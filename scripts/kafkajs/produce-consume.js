// Produce one structured-mode and one binary-mode command with kafkajs and
// wait for their outcomes. Usage: node produce-consume.js BROKER [ACTION]
// Exit 0 when both outcomes arrived with status succeeded.
'use strict';
const { Kafka, logLevel, Partitioners, CompressionTypes, CompressionCodecs } = require('kafkajs');

// The executor's franz-go producer compresses with snappy (its default), which
// kafkajs cannot decode without a codec. KAFKAJS_SNAPPY=0 leaves the codec out
// to show that a plain kafkajs consumer fails on the outcomes topic.
if (process.env.KAFKAJS_SNAPPY !== '0') {
  CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy');
}
const crypto = require('crypto');

const broker = process.argv[2];
const action = process.argv[3] || 'noop.ping';
if (!broker) {
  console.error('usage: node produce-consume.js BROKER [ACTION]');
  process.exit(2);
}
const run = crypto.randomUUID();
const commands = [
  { id: `kafkajs-structured-${run}`, entity: `kafkajs-order-1-${run}`, key: `kafkajs-key-1-${run}`, mode: 'structured' },
  { id: `kafkajs-binary-${run}`, entity: `kafkajs-order-2-${run}`, key: `kafkajs-key-2-${run}`, mode: 'binary' },
];

function record(c) {
  const data = { amount: 5, note: 'from kafkajs' };
  if (c.mode === 'structured') {
    return {
      key: c.entity,
      headers: { 'content-type': 'application/cloudevents+json' },
      value: JSON.stringify({
        specversion: '1.0', id: c.id, source: 'kafkajs', type: action,
        subject: c.entity, idempotencykey: c.key, data,
      }),
    };
  }
  return {
    key: c.entity,
    headers: {
      ce_specversion: '1.0', ce_id: c.id, ce_source: 'kafkajs', ce_type: action,
      ce_subject: c.entity, ce_idempotencykey: c.key, 'content-type': 'application/json',
    },
    value: JSON.stringify(data),
  };
}

async function main() {
  const kafka = new Kafka({ clientId: 'onceflight-kafkajs-check', brokers: [broker], logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId: `kafkajs-check-${run}`, readUncommitted: false });
  // Kafka's default (murmur2) partitioner: the canonical entity mapping.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  const pending = new Map(commands.map((c) => [c.id, c]));
  let failed = false;

  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });

  await consumer.connect();
  await consumer.subscribe({ topic: 'onceflight.outcomes', fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      let ev;
      try {
        ev = JSON.parse(message.value.toString());
      } catch (e) {
        return;
      }
      const c = pending.get(ev.causationid);
      if (!c) return;
      const status = ev.data && ev.data.status;
      console.log(`outcome for ${c.mode} command ${c.id}: ${ev.type} status=${status} replayed=${ev.replayed} (partition ${partition})`);
      if (status !== 'succeeded' || ev.subject !== c.entity || ev.idempotencykey !== c.key) {
        console.error(`unexpected outcome: ${message.value.toString()}`);
        failed = true;
      }
      pending.delete(c.id);
      if (pending.size === 0) resolveDone();
    },
  });
  await producer.connect();
  for (const c of commands) {
    const [meta] = await producer.send({ topic: 'onceflight.commands', messages: [record(c)] });
    console.log(`produced ${c.mode} command ${c.id} to partition ${meta.partition} offset ${meta.baseOffset}`);
  }

  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('timed out after 60s')), 60000); });
  try {
    await Promise.race([done, timeout]);
  } catch (e) {
    console.error(`${e.message}; no outcome for: ${[...pending.keys()].join(', ')}`);
    failed = true;
  }
  clearTimeout(timer);
  await producer.disconnect();
  await consumer.disconnect();
  return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (err) => {
  console.error(err);
  process.exit(1);
});
