// Undo and redo from the keyboard on every tab but Paint (where the canvas takes the same keys,
// in order with its strokes): Ctrl+Z (Cmd+Z) undo, Ctrl+Shift+Z or Ctrl+Y redo, anywhere on the
// page but in a text box, whose own undo stays the browser's.
//
// Each key press is a step numbered 1, 2, 3, ... The trigger `steps` carries every step Python
// has not yet said it has done ({client, strokes: [{seq, op}]}, the canvas's own format), so a
// trigger that a newer one replaces before Python reads it loses nothing; Python does each step
// once (the numbers it has done come back as `done`) and the page reruns.

const MAX_STEPS = 64; // as many as one trigger may carry (ui.canvas.strokes.MAX_STROKES)
const steps = { client: pageClientId(), seq: 0, done: 0, queue: [], send: null, canvas: false };

document.addEventListener("keydown", (event) => {
  if (steps.canvas || event.defaultPrevented || typing(event.target)) return;
  const op = stepOp(event);
  if (!op) return;
  event.preventDefault();
  steps.queue.push({ seq: ++steps.seq, op });
  sendSteps();
});

function sendSteps() {
  if (steps.send && steps.queue.length) {
    steps.send("steps", { client: steps.client, strokes: steps.queue.slice(0, MAX_STEPS) });
  }
}

export default function pageKeys({ data, parentElement, setTriggerValue }) {
  steps.send = setTriggerValue;
  steps.canvas = Boolean(data.canvas);
  const done = data.client === steps.client ? data.done : 0;
  if (done > steps.done) {
    steps.done = done;
    steps.queue = steps.queue.filter((step) => step.seq > done);
    sendSteps(); // the steps past one trigger's worth
  }
  let mark = parentElement.querySelector("[data-page-keys]");
  if (!mark) {
    mark = Object.assign(document.createElement("span"), { hidden: true });
    mark.dataset.pageKeys = "";
    parentElement.append(mark);
  }
  mark.dataset.done = String(steps.done); // for tests
}
