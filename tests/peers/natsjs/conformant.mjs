// nats.js 3.4 batch publishing as its own API does it (@nats-io/jetstream): two fast-ingest batches
// (fail mode committed with last(); ok mode with a ping, committed with end()) and an atomic batch.
// Usage: node conformant.mjs URL USER PASSWORD FAST_SUBJECT ATOMIC_SUBJECT NAME
// Prints one JSON line: the connection's client id and the counts the server acknowledged.
import { connect } from "@nats-io/transport-node";
import { jetstream, startFastIngest } from "@nats-io/jetstream/internal";

const [url, user, pass, fastSubject, atomicSubject, name] = process.argv.slice(2);
const nc = await connect({ servers: url, user, pass, name });

// A batch's inbox goes with it, and a connection is named by its subscriptions: each batch lasts a
// moment, as a real one would, so that the collector's question about it comes while it is open.
const moment = () => new Promise((resolve) => setTimeout(resolve, 500));

const strict = await startFastIngest(nc, fastSubject, "m1", { ackInterval: 10, allowGaps: false });
await moment();
for (let i = 2; i < 200; i++) await strict.add(fastSubject, `m${i}`);
const committed = await strict.last(fastSubject, "m200");

const lenient = await startFastIngest(nc, fastSubject, "p1", { ackInterval: 5, allowGaps: true });
await moment();
for (let i = 2; i <= 40; i++) await lenient.add(fastSubject, `p${i}`);
await lenient.ping();
const ended = await lenient.end();

const js = jetstream(nc);
const batch = await js.startBatch(atomicSubject, "a1");
for (let i = 2; i <= 10; i++) batch.add(atomicSubject, `a${i}`);
const atomic = await batch.commit(atomicSubject, "a11");

console.log(JSON.stringify({ cid: nc.info.client_id, fast: committed.count, eob: ended.count, atomic: atomic.count,
                             batches: [strict.batch, lenient.batch, atomic.batch] }));
await nc.drain();
