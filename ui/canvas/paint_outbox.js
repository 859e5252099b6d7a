// The paint canvas's outbox: the strokes drawn and not yet done, numbered, sent to Python as the
// trigger `edit` one batch at a time and sent again until Python says they are done (see
// paint_canvas.js for the whole exchange). It lives as long as the page: a canvas whose tab
// closes leaves its strokes here and the next one sends them.

const RESEND_MIN_MS = 1000; // a trigger unanswered this long (or 3 round trips) goes again
const RESEND_MAX_MS = 30000;

const outbox = {
  client: pageClientId(),
  seq: 0, // the last stroke number given
  done: 0, // the last stroke Python has said it has done
  queue: [], // the strokes after `done`: {seq, wire, draw}
  waiting: 0, // the last stroke of the trigger waiting for its answer (0: none)
  sentAt: 0,
  roundTripMs: 0,
  retries: 0,
  timer: null,
  send: null,
  limits: null,
};

window.addEventListener("beforeunload", (event) => {
  if (outbox.queue.length) event.preventDefault(); // strokes not saved yet: ask before leaving
});

// Python's answer (every new head): drop what it has done; send the rest when nothing waits.
function answered(data) {
  const done = data.client === outbox.client ? data.done : 0;
  const progressed = done > outbox.done;
  if (progressed) {
    outbox.done = done;
    outbox.queue = outbox.queue.filter((s) => s.seq > done);
    outbox.retries = 0;
  }
  if (outbox.waiting && (progressed || done >= outbox.waiting)) {
    // Answered, in full or in part (the rest was left for the next trigger).
    outbox.roundTripMs = performance.now() - outbox.sentAt;
    outbox.waiting = 0;
    clearTimeout(outbox.timer);
  }
  flush();
}

// Send the oldest queued strokes (as many as one trigger may carry) unless a trigger waits.
function flush() {
  if (outbox.waiting || !outbox.queue.length || !outbox.send || !outbox.limits) return;
  const strokes = [];
  let chars = 0;
  for (const stroke of outbox.queue) {
    const size = stroke.wire.region && stroke.wire.region.bits ? stroke.wire.region.bits.length : 0;
    if (strokes.length === outbox.limits.strokes) break;
    if (strokes.length && chars + size > outbox.limits.maskChars) break;
    strokes.push(stroke.wire);
    chars += size;
  }
  outbox.waiting = strokes[strokes.length - 1].seq;
  outbox.sentAt = performance.now();
  outbox.send("edit", { client: outbox.client, strokes });
  const wait = Math.max(RESEND_MIN_MS, 3 * outbox.roundTripMs) * 2 ** outbox.retries;
  clearTimeout(outbox.timer);
  outbox.timer = setTimeout(resend, Math.min(wait, RESEND_MAX_MS));
}

// No answer: a rerun that started meanwhile may have taken the trigger's place. Send it again.
function resend() {
  if (!outbox.waiting) return;
  outbox.waiting = 0;
  outbox.retries += 1;
  flush();
}

function enqueue(stroke) {
  const seq = ++outbox.seq;
  const { op, head, action, heads, region, rows, cols } = stroke;
  const wire = op ? { seq, op } : { seq, op: "paint", head, action, heads, region: wireRegion(region) };
  outbox.queue.push({ seq, wire, draw: op ? null : { head, action, region, rows, cols } });
  flush();
}
