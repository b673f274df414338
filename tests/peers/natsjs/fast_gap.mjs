// A fast-ingest batch from nats.js, written to the wire as ADR-50 has it (nats.js has no fast-batch
// API): replies on <inbox>.<batch>.<flow>.fail.<seq>.<op>.$FI, a gap at message 10 (seq 10 and 11 never
// sent), so the server ends the batch. Usage: node fast_gap.mjs URL USER PASSWORD SUBJECT BATCH_ID NAME
// Prints one JSON line: the connection's client id and version, then waits for the server's answer; stays
// connected (its reply subscription in place, as a publisher's is) until its stdin closes.
import { connect, createInbox } from "@nats-io/transport-node";

const [url, user, pass, subject, batch, name] = process.argv.slice(2);
const nc = await connect({ servers: url, user, pass, name });
const inbox = createInbox();
const replies = nc.subscribe(`${inbox}.${batch}.>`);
const head = `${inbox}.${batch}.5.fail.`;
const ended = (async () => {
  for await (const m of replies) {
    const text = new TextDecoder().decode(m.data);
    if (text.includes('"error"')) return text;
  }
})();
for (let seq = 1; seq <= 20; seq++) {
  if (seq === 10 || seq === 11) continue;
  const op = seq === 1 ? 0 : 1;
  nc.publish(subject, "x", { reply: `${head}${seq}.${op}.$FI` });
  await nc.flush();
}
const answer = await Promise.race([ended, new Promise((r) => setTimeout(() => r("no answer"), 10000))]);
console.log(JSON.stringify({ cid: nc.info.client_id, version: nc.version ?? null, answer }));
await new Promise((resolve) => { process.stdin.on("end", resolve); process.stdin.resume(); });
await nc.drain();
