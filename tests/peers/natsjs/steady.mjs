// A steady nats.js publisher for the maintenance tests and bench: atomic batches of `size` messages back to
// back (@nats-io/jetstream's startBatch), each spread over about OPEN_MS, then IDLE_MS idle; with
// "holds", it follows maintenance holds (holds.mjs) before each batch. Stops on SIGTERM, then prints one
// JSON line: batches committed and lost, holds answered and refused. Each batch's outcome is a line as it
// ends: "committed <batch id>" or "lost <batch id>" ("lost -" when its first message failed: no id known).
// Usage: node steady.mjs URL SUBJECT holds|no-holds [OPEN_MS] [IDLE_MS] [SIZE]
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream/internal";
import { HoldFollower } from "./holds.mjs";

const [url, subject, mode, openMs = "60", idleMs = "0", size = "4"] = process.argv.slice(2);
const nc = await connect({ servers: url.split(","), name: "natsjs-steady", maxReconnectAttempts: -1,
                           reconnectTimeWait: 200 });
const js = jetstream(nc, { timeout: 5000 });
const holds = mode === "holds" ? new HoldFollower(nc) : null;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let running = true, committed = 0, lost = 0, heldBatches = 0;
process.on("SIGTERM", () => { running = false; });
console.error("ready");
while (running) {
  if (holds && (await holds.free(subject))) heldBatches++;
  const n = Number(size), gap = Number(openMs) / n;
  let batch = null;
  try {
    batch = await js.startBatch(subject, "m1");
    for (let i = 2; i < n; i++) {
      await sleep(gap);
      await batch.add(subject, `m${i}`, { ack: false });
    }
    await sleep(gap);
    await batch.commit(subject, `m${n}`);
    committed++;
    console.log(`committed ${batch.id}`);
  } catch {
    lost++;
    console.log(`lost ${batch?.id ?? "-"}`);
  }
  if (Number(idleMs) > 0) await sleep(Number(idleMs));
}
console.log(JSON.stringify({ committed, lost, held_batches: heldBatches, answered: holds?.answered ?? 0,
                             refused: holds?.refused ?? 0 }));
await nc.close();
