// Publishes records with KafkaJS, as a platform team's Node service would.
//   node publish.mjs BOOTSTRAP TOPIC MODE [CODEC] < records
// MODE: idempotent (acks=all, one producer id), commit or abort (one transaction); CODEC: none or gzip
// (KafkaJS's built-in codecs). Each stdin line is KEY<TAB>VALUE. Prints "delivered N".
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(process.env.TICKERWIRE_NODE_MODULES + '/');
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const [bootstrap, topic, mode, codec = 'none'] = process.argv.slice(2);
const messages = readFileSync(0, 'utf8').split('\n').filter(Boolean).map((line) => {
  const tab = line.indexOf('\t');
  return { key: line.slice(0, tab), value: line.slice(tab + 1) };
});
const kafka = new Kafka({ clientId: 'tickerwire-compat-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN });
const transactional = mode !== 'idempotent';
const producer = kafka.producer({
  idempotent: true,
  maxInFlightRequests: 1,
  ...(transactional ? { transactionalId: `tickerwire-compat-kafkajs-${mode}` } : {}),
});
const compression = codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None;
await producer.connect();
try {
  if (transactional) {
    const tx = await producer.transaction();
    await tx.send({ topic, messages, compression });
    await (mode === 'commit' ? tx.commit() : tx.abort());
  } else {
    await producer.send({ topic, messages, acks: -1, compression });
  }
  console.log(`delivered ${messages.length}`);
} finally {
  await producer.disconnect();
}
