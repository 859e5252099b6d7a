// What the page's key handlers share (the paint canvas's and the page keys'): which keys are
// typing, which are undo or redo, and a random name for this page's sender.

// Whether keys pressed at `target` are typing: a text box, a list to pick from, editable text.
function typing(target) {
  if (!(target instanceof Element)) return false;
  if (target.isContentEditable) return true;
  const tag = target.tagName;
  if (tag === "TEXTAREA" || tag === "SELECT") return true;
  if (tag !== "INPUT") return false;
  const kind = (target.getAttribute("type") || "text").toLowerCase();
  return !["button", "checkbox", "radio", "range", "submit", "reset", "file"].includes(kind);
}

// "undo" for Ctrl+Z (Cmd+Z), "redo" for Ctrl+Shift+Z and Ctrl+Y, else null.
function stepOp(event) {
  if (!(event.ctrlKey || event.metaKey) || event.altKey) return null;
  const k = event.key.toLowerCase();
  if (k === "z") return event.shiftKey ? "redo" : "undo";
  return k === "y" ? "redo" : null;
}

// A random id naming this page's strokes or steps (ui.canvas.strokes.CLIENT_ID: 24 characters).
// (getRandomValues, not randomUUID: a page served over plain HTTP has only the former.)
function pageClientId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
