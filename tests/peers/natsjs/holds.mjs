// The maintenance-hold protocol (README, "Maintenance holds: a protocol for publishers") written again
// from the README alone, for nats.js: a publisher in another language that takes part. It answers each
// hold, then begins no batch on a subject the hold covers until the release or the hold's end (30 s at
// most), by its own clock. A hold that does not read as one is counted and ignored.
const PREFIX = "batch_console.hold.";
const MAX_HOLD = 30;
const ID = /^[0-9a-f]{32}$/;
const STREAM = /^[^\s.*>]{1,255}$/;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

function isFilter(text) {
  if (typeof text !== "string" || !text || text.length > 255 || CONTROL.test(text)) return false;
  return text.split(".").every((t) => t && !t.includes(" ") && (!t.includes(">") || t === ">")
                                      && (!t.includes("*") || t === "*"));
}

function matches(filter, subject) {
  const f = filter.split("."), s = subject.split(".");
  for (let i = 0; i < f.length; i++) {
    if (f[i] === ">") return s.length > i;
    if (i >= s.length || (f[i] !== "*" && f[i] !== s[i])) return false;
  }
  return f.length === s.length;
}

export function parseHold(subject, data) {
  if (data.length > 8192) throw new Error("larger than 8 KiB");
  const body = JSON.parse(new TextDecoder().decode(data));
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw new Error("not an object");
  if (body.v !== 1) throw new Error("not version 1");
  if (typeof body.stream !== "string" || !STREAM.test(body.stream) || CONTROL.test(body.stream)) throw new Error("stream");
  if (subject !== PREFIX + body.stream) throw new Error("its subject names another stream");
  if (typeof body.id !== "string" || !ID.test(body.id)) throw new Error("id");
  if (!Array.isArray(body.subjects) || body.subjects.length < 1 || body.subjects.length > 64
      || !body.subjects.every(isFilter)) throw new Error("subjects");
  if (typeof body.seconds !== "number" || !(body.seconds >= 0 && body.seconds <= 86400)) throw new Error("seconds");
  if (typeof body.node !== "string" || !body.node || body.node.length > 255 || CONTROL.test(body.node)) {
    throw new Error("node");
  }
  return body;
}

export class HoldFollower {
  constructor(nc) {
    this.held = new Map(); // id -> { until, subjects }
    this.ended = new Set();
    this.refused = 0;
    this.answered = 0;
    this.sub = nc.subscribe(PREFIX + ">", {
      callback: (err, msg) => {
        if (err) return;
        let hold;
        try {
          hold = parseHold(msg.subject, msg.data);
        } catch {
          this.refused++;
          return;
        }
        const now = Date.now() / 1000;
        if (hold.seconds === 0) {
          if (this.held.delete(hold.id)) this.ended.add(hold.id);
          return;
        }
        if (this.held.has(hold.id)) return;
        if (this.ended.has(hold.id) || this.held.size >= 1000) {
          this.refused++;
          return;
        }
        this.held.set(hold.id, { until: now + Math.min(hold.seconds, MAX_HOLD), subjects: hold.subjects });
        if (msg.reply) {
          msg.respond(new Uint8Array(0));
          this.answered++;
        }
      },
    });
  }

  heldUntil(subject) {
    const now = Date.now() / 1000;
    let end = null;
    for (const [id, h] of this.held) {
      if (h.until <= now) {
        this.held.delete(id);
        this.ended.add(id);
      } else if (h.subjects.some((f) => matches(f, subject))) {
        end = Math.max(end ?? 0, h.until);
      }
    }
    return end;
  }

  // Resolves once no hold covers the subject: what to await before a batch's first message.
  async free(subject) {
    let waited = 0;
    while (this.heldUntil(subject) !== null) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      waited++;
    }
    return waited > 0;
  }
}
