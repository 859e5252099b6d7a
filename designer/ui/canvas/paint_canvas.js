// The paint canvas: one head of a block-sparse layout, painted with the pointer.
//
// Python sends one head (see payload.py): bit-packed cells and run-length tile codes, both
// deflated and base64, the palette, the action and `applied`, the number of the last stroke it
// has applied. Each stroke is drawn here at once; on release it is queued with the next stroke
// number and the whole queue of strokes Python has not applied yet goes back as the trigger
// value `edit` ({strokes: [...]}), so a stroke is never lost when two triggers coalesce. When
// the new head arrives, strokes up to `applied` leave the queue and the picture is rebuilt from
// Python's cells with the strokes still queued drawn on top: what stays is exactly the design.

const TOOLS = [
  ["brush", "Brush", "b"],
  ["rect", "Rectangle", "r"],
  ["lasso", "Lasso", "l"],
  ["row", "Row", ""],
  ["column", "Column", ""],
  ["band", "Band", ""],
];
const SIZES = [1, 2, 4, 8];
const ACTIVE_RGB = [47, 62, 92]; // an active block whose tile is not known (yet)
const MAX_HEIGHT_PX = 640;
const MIN_GRID_PX = 8; // grid lines show from this many pixels per block
const MAX_CELL_PX = 64;
const STORE_KEY = "blocksparse-designer.paint-tools";
const editors = new WeakMap();

export default function paintCanvas({ data, parentElement, setTriggerValue }) {
  let editor = editors.get(parentElement);
  if (!editor) {
    editor = new Editor(parentElement);
    editors.set(parentElement, editor);
  }
  editor.send = setTriggerValue;
  editor.update(data);
  return () => {
    editor.destroy();
    editors.delete(parentElement);
  };
}

// ------------------------------------------------------------------ decoding and encoding
function fromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function toBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

async function inflate(text) {
  const stream = new Blob([fromBase64(text)]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function unpackBits(packed, count) {
  const out = new Uint8Array(count);
  for (let i = 0; i < count; i++) out[i] = (packed[i >> 3] >> (7 - (i & 7))) & 1;
  return out;
}

function packBits(cells) {
  const out = new Uint8Array(Math.ceil(cells.length / 8));
  for (let i = 0; i < cells.length; i++) if (cells[i]) out[i >> 3] |= 0x80 >> (i & 7);
  return out;
}

function runLengthDecode(runs, count) {
  const n = runs.length / 5;
  const lengths = new DataView(runs.buffer, runs.byteOffset + n);
  const out = new Uint8Array(count);
  let at = 0;
  for (let k = 0; k < n; k++) {
    const length = lengths.getUint32(4 * k, true);
    out.fill(runs[k], at, at + length);
    at += length;
  }
  return out;
}

function rgba(hex) {
  const v = parseInt(hex.slice(1), 16);
  return packRGBA([(v >> 16) & 255, (v >> 8) & 255, v & 255]);
}

function packRGBA([r, g, b]) {
  return (255 << 24) | (b << 16) | (g << 8) | r; // little-endian ImageData pixel
}

// ------------------------------------------------------------------ regions
// Every region is what Python reads (payload.read_edit) plus, for masks, the cells unpacked.
function eachCell(region, rows, cols, visit) {
  const { kind } = region;
  if (kind === "rect") {
    for (let r = region.row0; r <= region.row1; r++)
      for (let c = region.col0; c <= region.col1; c++) visit(r * cols + c);
  } else if (kind === "row") {
    for (let c = 0; c < cols; c++) visit(region.row * cols + c);
  } else if (kind === "column") {
    for (let r = 0; r < rows; r++) visit(r * cols + region.col);
  } else if (kind === "band") {
    for (let r = 0; r < rows; r++) {
      const first = Math.max(0, r + region.lo);
      const last = Math.min(cols - 1, r + region.hi);
      for (let c = first; c <= last; c++) visit(r * cols + c);
    }
  } else if (kind === "mask") {
    const { row0, col0, rows: h, cols: w, cells } = region;
    for (let i = 0; i < h * w; i++) if (cells[i]) visit((row0 + ((i / w) | 0)) * cols + col0 + (i % w));
  }
}

function maskRegion(indices, cols) {
  let r0 = Infinity, r1 = -1, c0 = Infinity, c1 = -1;
  for (const i of indices) {
    const r = (i / cols) | 0, c = i % cols;
    if (r < r0) r0 = r;
    if (r > r1) r1 = r;
    if (c < c0) c0 = c;
    if (c > c1) c1 = c;
  }
  if (r1 < 0) return null;
  const h = r1 - r0 + 1, w = c1 - c0 + 1;
  const cells = new Uint8Array(h * w);
  for (const i of indices) cells[(((i / cols) | 0) - r0) * w + (i % cols) - c0] = 1;
  return { kind: "mask", row0: r0, col0: c0, rows: h, cols: w, cells };
}

function wireRegion(region) {
  if (region.kind !== "mask") return region;
  const { kind, row0, col0, rows, cols, cells } = region;
  return { kind, row0, col0, rows, cols, bits: toBase64(packBits(cells)) };
}

// Cells a lasso covers: centres inside the polygon (even-odd) and every cell its outline crosses.
function lassoCells(points, rows, cols) {
  const cells = new Set();
  const add = (r, c) => {
    if (r >= 0 && r < rows && c >= 0 && c < cols) cells.add(r * cols + c);
  };
  const n = points.length;
  for (let k = 0; k < n; k++) {
    const [x0, y0] = points[k], [x1, y1] = points[(k + 1) % n];
    const steps = Math.max(1, Math.ceil(4 * Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0))));
    for (let s = 0; s <= steps; s++) {
      add(Math.floor(y0 + ((y1 - y0) * s) / steps), Math.floor(x0 + ((x1 - x0) * s) / steps));
    }
  }
  if (n < 3) return cells;
  const ys = points.map((p) => p[1]);
  const first = Math.max(0, Math.floor(Math.min(...ys))), last = Math.min(rows - 1, Math.ceil(Math.max(...ys)));
  for (let r = first; r <= last; r++) {
    const y = r + 0.5, crossings = [];
    for (let k = 0; k < n; k++) {
      const [x0, y0] = points[k], [x1, y1] = points[(k + 1) % n];
      if (y0 > y !== y1 > y) crossings.push(x0 + ((y - y0) * (x1 - x0)) / (y1 - y0));
    }
    crossings.sort((a, b) => a - b);
    for (let k = 0; k + 1 < crossings.length; k += 2) {
      const from = Math.max(0, Math.ceil(crossings[k] - 0.5)), to = Math.min(cols - 1, Math.floor(crossings[k + 1] - 0.5));
      for (let c = from; c <= to; c++) add(r, c);
    }
  }
  return cells;
}

// ------------------------------------------------------------------ the editor
class Editor {
  constructor(parent) {
    this.parent = parent;
    this.seq = 0;
    this.queue = []; // strokes sent, not yet applied by Python: {seq, head, region, action}
    this.stroke = null;
    this.view = { scale: 1, x: 0, y: 0, fit: 1, fitted: true };
    this.shape = null;
    this.loading = 0;
    let saved = {};
    try {
      saved = JSON.parse(localStorage.getItem(STORE_KEY) || "{}");
    } catch (error) {
      saved = {};
    }
    this.tool = TOOLS.some(([id]) => id === saved.tool) ? saved.tool : "brush";
    this.size = SIZES.includes(saved.size) ? saved.size : 1;
    this.build();
  }

  build() {
    const root = document.createElement("div");
    root.className = "paint-root";
    const bar = document.createElement("div");
    bar.className = "paint-toolbar";
    this.toolButtons = this.group(bar, TOOLS.map(([id, label, key]) => [id, label, key ? `${label} (${key.toUpperCase()})` : label]), (id) => this.setTool(id));
    const sizeLabel = document.createElement("span");
    sizeLabel.className = "paint-label";
    sizeLabel.textContent = "brush";
    bar.appendChild(sizeLabel);
    this.sizeButtons = this.group(bar, SIZES.map((s) => [String(s), String(s), `Brush ${s}×${s} blocks`]), (id) => this.setSize(Number(id)));
    this.group(bar, [["fit", "Fit", "Show the whole grid"], ["undo", "Undo", "Undo (Ctrl+Z)"], ["redo", "Redo", "Redo (Ctrl+Shift+Z)"]], (id) => {
      if (id === "fit") this.fit();
      else this.queueStep(id);
    });
    this.stage = document.createElement("div");
    this.stage.className = "paint-stage";
    this.stage.tabIndex = 0;
    this.canvas = document.createElement("canvas");
    this.canvas.dataset.testid = "paint-canvas";
    this.canvas.setAttribute("data-testid", "paint-canvas");
    this.stage.appendChild(this.canvas);
    this.readout = document.createElement("div");
    this.readout.className = "paint-readout";
    this.readout.textContent = "\u00a0";
    root.append(bar, this.stage, this.readout);
    this.parent.appendChild(root);
    this.root = root;
    this.ctx = this.canvas.getContext("2d");
    this.image = document.createElement("canvas");
    this.imageCtx = this.image.getContext("2d", { willReadFrequently: false });
    this.listen();
    this.showTools();
  }

  group(bar, items, onPick) {
    const box = document.createElement("span");
    box.className = "paint-group";
    const buttons = {};
    for (const [id, label, title] of items) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.title = title;
      button.dataset.paint = id;
      button.addEventListener("click", () => onPick(id));
      box.appendChild(button);
      buttons[id] = button;
    }
    bar.appendChild(box);
    return buttons;
  }

  setTool(tool) {
    this.cancel();
    this.tool = tool;
    this.saveTools();
  }

  setSize(size) {
    this.size = size;
    this.saveTools();
  }

  saveTools() {
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify({ tool: this.tool, size: this.size }));
    } catch (error) {
      // private mode: the tools still stay for this page
    }
    this.showTools();
  }

  showTools() {
    for (const [id, button] of Object.entries(this.toolButtons)) button.setAttribute("aria-pressed", String(id === this.tool));
    for (const [id, button] of Object.entries(this.sizeButtons)) button.setAttribute("aria-pressed", String(Number(id) === this.size));
  }

  // ---------------------------------------------------------------- data from Python
  update(data) {
    const { rows, cols, head } = data;
    const reshaped = !this.shape || this.shape.rows !== rows || this.shape.cols !== cols;
    if (reshaped || this.shape.head !== head) {
      this.queue = this.queue.filter((s) => !reshaped && (s.op || s.head === head));
      this.cancel();
    }
    this.seq = Math.max(this.seq, data.applied);
    this.queue = this.queue.filter((s) => s.seq > data.applied);
    this.data = data;
    this.action = data.action;
    this.shape = { rows, cols, head };
    Object.assign(this.canvas.dataset, { rows: String(rows), cols: String(cols), head: String(head) });
    this.layout(reshaped);
    const token = ++this.loading;
    this.canvas.dataset.ready = "false";
    Promise.all([inflate(data.cells), inflate(data.codes)]).then(([bits, runs]) => {
      if (token !== this.loading) return; // a newer head arrived meanwhile
      this.base = unpackBits(bits, rows * cols);
      const scale = data.codes_scale;
      this.codeCols = Math.ceil(cols / scale);
      this.codes = runLengthDecode(runs, Math.ceil(rows / scale) * this.codeCols);
      this.palette = new Uint32Array(256).fill(packRGBA(ACTIVE_RGB));
      data.colours.forEach((hex, k) => {
        this.palette[k + 1] = rgba(hex);
        this.palette[k + 1 + 128] = rgba(data.dark[k]);
      });
      this.empty = rgba(data.empty);
      this.rebuild();
      this.canvas.dataset.ready = "true";
      this.canvas.dataset.applied = String(data.applied);
    });
  }

  // Python's cells, then every queued stroke on top, then the stroke in progress.
  rebuild() {
    const { rows, cols } = this.shape;
    this.shown = this.base.slice();
    for (const stroke of this.queue) eachCell(stroke.region, rows, cols, (i) => this.apply(i, stroke.action));
    if (this.stroke && this.stroke.visited) for (const i of this.stroke.visited) this.apply(i, this.stroke.action);
    if (this.image.width !== cols || this.image.height !== rows) {
      this.image.width = cols;
      this.image.height = rows;
    }
    this.pixels = this.imageCtx.createImageData(cols, rows);
    this.px = new Uint32Array(this.pixels.data.buffer);
    for (let i = 0; i < rows * cols; i++) this.px[i] = this.colour(i);
    this.imageCtx.putImageData(this.pixels, 0, 0);
    this.draw();
  }

  apply(i, action) {
    this.shown[i] = action === "set" ? 1 : action === "clear" ? 0 : 1 - this.shown[i];
  }

  code(i) {
    const scale = this.data.codes_scale, cols = this.shape.cols;
    if (scale === 1) return this.codes[i];
    return this.codes[(((i / cols) | 0) / scale | 0) * this.codeCols + (((i % cols) / scale) | 0)];
  }

  colour(i) {
    if (!this.shown[i]) return this.empty;
    return this.base[i] ? this.palette[this.code(i)] : this.palette[0];
  }

  // ---------------------------------------------------------------- geometry
  layout(reshaped) {
    const { rows, cols } = this.shape;
    const width = Math.max(100, this.root.clientWidth - 2);
    const fit = Math.min(width / cols, MAX_HEIGHT_PX / rows);
    const view = this.view;
    if (reshaped || view.fitted) Object.assign(view, { scale: fit, x: 0, y: 0, fitted: true });
    else {
      const k = fit / view.fit;
      Object.assign(view, { scale: view.scale * k, x: view.x * k, y: view.y * k });
    }
    view.fit = fit;
    const dpr = window.devicePixelRatio || 1;
    const w = cols * fit, h = rows * fit;
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${h}px`;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.draw();
  }

  fit() {
    Object.assign(this.view, { scale: this.view.fit, x: 0, y: 0, fitted: true });
    this.draw();
  }

  // Pointer position as fractional (col, row) of the grid.
  gridPoint(event) {
    const box = this.canvas.getBoundingClientRect();
    const { scale, x, y } = this.view;
    const px = (event.clientX - box.left) * (parseFloat(this.canvas.style.width) / box.width);
    const py = (event.clientY - box.top) * (parseFloat(this.canvas.style.height) / box.height);
    return [(px - x) / scale, (py - y) / scale, px, py];
  }

  cellAt(point) {
    const { rows, cols } = this.shape;
    const c = Math.floor(point[0]), r = Math.floor(point[1]);
    return r >= 0 && r < rows && c >= 0 && c < cols ? [r, c] : null;
  }

  // ---------------------------------------------------------------- drawing
  draw() {
    if (!this.shape) return;
    const ctx = this.ctx, dpr = window.devicePixelRatio || 1;
    const { rows, cols } = this.shape;
    const { scale, x, y } = this.view;
    const w = this.canvas.width / dpr, h = this.canvas.height / dpr;
    this.canvas.dataset.view = `${scale} ${x} ${y}`; // CSS px per block and offset, for tests
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, w, h);
    if (this.pixels) {
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(this.image, x, y, cols * scale, rows * scale);
    }
    if (scale >= MIN_GRID_PX) this.drawGrid(w, h);
    ctx.save();
    ctx.strokeStyle = "rgba(30, 40, 60, 0.35)";
    ctx.setLineDash([3, 3]);
    ctx.lineWidth = 1;
    const d = Math.min(rows, cols) * scale;
    ctx.beginPath();
    ctx.moveTo(x, y);
    ctx.lineTo(x + d, y + d);
    ctx.stroke();
    ctx.restore();
    this.drawGuide();
  }

  drawGrid(w, h) {
    const ctx = this.ctx, { rows, cols } = this.shape, { scale, x, y } = this.view;
    ctx.save();
    ctx.strokeStyle = "rgba(30, 40, 60, 0.12)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    const c0 = Math.max(0, Math.floor(-x / scale)), c1 = Math.min(cols, Math.ceil((w - x) / scale));
    const r0 = Math.max(0, Math.floor(-y / scale)), r1 = Math.min(rows, Math.ceil((h - y) / scale));
    for (let c = c0; c <= c1; c++) {
      const px = Math.round(x + c * scale) + 0.5;
      ctx.moveTo(px, y + r0 * scale);
      ctx.lineTo(px, y + r1 * scale);
    }
    for (let r = r0; r <= r1; r++) {
      const py = Math.round(y + r * scale) + 0.5;
      ctx.moveTo(x + c0 * scale, py);
      ctx.lineTo(x + c1 * scale, py);
    }
    ctx.stroke();
    ctx.restore();
  }

  // The outline of a rectangle, lasso, row, column or band being dragged.
  drawGuide() {
    const s = this.stroke;
    if (!s || s.tool === "brush") return;
    const ctx = this.ctx, { scale, x, y } = this.view, { rows, cols } = this.shape;
    ctx.save();
    ctx.strokeStyle = "rgba(255, 75, 75, 0.9)";
    ctx.fillStyle = "rgba(255, 75, 75, 0.12)";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    if (s.tool === "lasso") {
      s.points.forEach(([px, py], k) => (k ? ctx.lineTo(x + px * scale, y + py * scale) : ctx.moveTo(x + px * scale, y + py * scale)));
      ctx.closePath();
    } else if (s.tool === "band") {
      const { lo, hi } = this.region(s);
      for (const offset of [lo, hi + 1]) {
        ctx.moveTo(x + Math.max(0, offset) * scale, y + Math.max(0, -offset) * scale);
        const run = Math.min(rows - Math.max(0, -offset), cols - Math.max(0, offset));
        ctx.lineTo(x + (Math.max(0, offset) + run) * scale, y + (Math.max(0, -offset) + run) * scale);
      }
    } else {
      const r = this.region(s);
      const box = r.kind === "row" ? { row0: r.row, row1: r.row, col0: 0, col1: cols - 1 } : r.kind === "column" ? { row0: 0, row1: rows - 1, col0: r.col, col1: r.col } : r;
      ctx.rect(x + box.col0 * scale, y + box.row0 * scale, (box.col1 - box.col0 + 1) * scale, (box.row1 - box.row0 + 1) * scale);
    }
    if (s.tool !== "band") ctx.fill();
    ctx.stroke();
    ctx.restore();
  }

  repaint(indices) {
    if (!this.pixels || !indices.length) return;
    const cols = this.shape.cols;
    let r0 = Infinity, r1 = -1, c0 = Infinity, c1 = -1;
    for (const i of indices) {
      this.px[i] = this.colour(i);
      const r = (i / cols) | 0, c = i % cols;
      r0 = Math.min(r0, r); r1 = Math.max(r1, r); c0 = Math.min(c0, c); c1 = Math.max(c1, c);
    }
    this.imageCtx.putImageData(this.pixels, 0, 0, c0, r0, c1 - c0 + 1, r1 - r0 + 1);
  }

  // ---------------------------------------------------------------- strokes
  begin(event) {
    const point = this.gridPoint(event);
    const cell = this.cellAt(point);
    if (!cell || !this.pixels) return;
    const s = { tool: this.tool, action: this.action, head: this.shape.head, start: point, end: point, startCell: cell, endCell: cell };
    this.stroke = s;
    if (s.tool === "brush") {
      s.visited = new Set();
      this.brushTo(cell);
    } else if (s.tool === "lasso") {
      s.points = [point];
    }
    this.draw();
  }

  extend(event) {
    const s = this.stroke;
    const point = this.gridPoint(event);
    const { rows, cols } = this.shape;
    const clamped = [Math.min(Math.max(point[0], 0), cols - 1e-6), Math.min(Math.max(point[1], 0), rows - 1e-6)];
    s.end = clamped;
    s.endCell = [Math.floor(clamped[1]), Math.floor(clamped[0])];
    if (s.tool === "brush") this.brushTo(s.endCell);
    else if (s.tool === "lasso") s.points.push(clamped);
    this.draw();
  }

  // Paint brush squares along the line from the last cell to `cell` (no gaps on a fast drag).
  brushTo(cell) {
    const s = this.stroke;
    const [r1, c1] = cell;
    const [r0, c0] = s.last || cell;
    const steps = Math.max(Math.abs(r1 - r0), Math.abs(c1 - c0), 1);
    const changed = [];
    const { rows, cols } = this.shape;
    const half = (this.size - 1) >> 1;
    for (let k = 0; k <= steps; k++) {
      const r = Math.round(r0 + ((r1 - r0) * k) / steps), c = Math.round(c0 + ((c1 - c0) * k) / steps);
      for (let dr = 0; dr < this.size; dr++) {
        for (let dc = 0; dc < this.size; dc++) {
          const rr = r - half + dr, cc = c - half + dc;
          if (rr < 0 || rr >= rows || cc < 0 || cc >= cols) continue;
          const i = rr * cols + cc;
          if (s.visited.has(i)) continue;
          s.visited.add(i);
          this.apply(i, s.action);
          changed.push(i);
        }
      }
    }
    s.last = cell;
    this.repaint(changed);
  }

  // The region a finished (or in-progress) stroke paints, as Python reads it.
  region(s) {
    const { rows, cols } = this.shape;
    const [ra, ca] = s.startCell, [rb, cb] = s.endCell;
    const rlo = Math.min(ra, rb), rhi = Math.max(ra, rb), clo = Math.min(ca, cb), chi = Math.max(ca, cb);
    switch (s.tool) {
      case "brush":
        return maskRegion(s.visited, cols);
      case "lasso":
        return maskRegion(lassoCells(s.points, rows, cols), cols);
      case "rect":
        return { kind: "rect", row0: rlo, col0: clo, row1: rhi, col1: chi };
      case "row":
        return rlo === rhi ? { kind: "row", row: rlo } : { kind: "rect", row0: rlo, col0: 0, row1: rhi, col1: cols - 1 };
      case "column":
        return clo === chi ? { kind: "column", col: clo } : { kind: "rect", row0: 0, col0: clo, row1: rows - 1, col1: chi };
      default: {
        const a = ca - ra, b = cb - rb;
        return { kind: "band", lo: Math.min(a, b), hi: Math.max(a, b) };
      }
    }
  }

  finish() {
    const s = this.stroke;
    this.stroke = null;
    const region = this.region(s);
    if (!region) return this.draw();
    if (s.tool !== "brush") {
      const { rows, cols } = this.shape;
      const changed = [];
      eachCell(region, rows, cols, (i) => {
        this.apply(i, s.action);
        changed.push(i);
      });
      this.repaint(changed);
    }
    this.draw();
    this.queue.push({ seq: ++this.seq, head: s.head, action: s.action, region });
    this.flush();
  }

  cancel() {
    if (!this.stroke) return;
    this.stroke = null;
    if (this.base) this.rebuild();
  }

  queueStep(op) {
    this.cancel();
    this.queue.push({ seq: ++this.seq, op });
    this.flush();
  }

  flush() {
    const strokes = this.queue.map((s) =>
      s.op ? { seq: s.seq, op: s.op } : { seq: s.seq, op: "paint", head: s.head, action: s.action, region: wireRegion(s.region) },
    );
    this.send("edit", { strokes });
  }

  // ---------------------------------------------------------------- readout, zoom, pan
  showCell(event) {
    const cell = this.cellAt(this.gridPoint(event));
    if (!cell || !this.pixels) {
      this.readout.textContent = "\u00a0";
      return;
    }
    const [r, c] = cell, i = r * this.shape.cols + c;
    let what = "inactive";
    if (this.shown[i] && !this.base[i]) what = "painted, tile on the way";
    else if (this.shown[i]) {
      const code = this.code(i) & 127;
      const width = code ? this.data.widths[code - 1] : 0;
      const approx = this.data.codes_scale > 1 ? "≈ " : "";
      what = width ? `tile ${approx}${width}×${width}` : "active, no tile";
    }
    this.readout.textContent = `head ${this.shape.head} · query block ${r} · key block ${c} · ${what}`;
  }

  zoom(event) {
    event.preventDefault();
    const [, , px, py] = this.gridPoint(event);
    const view = this.view;
    const scale = Math.min(Math.max(view.scale * Math.exp(-event.deltaY * 0.0015), view.fit), Math.max(view.fit, MAX_CELL_PX));
    const k = scale / view.scale;
    Object.assign(view, { scale, x: px - (px - view.x) * k, y: py - (py - view.y) * k });
    this.clampView();
    this.draw();
  }

  clampView() {
    const view = this.view, { rows, cols } = this.shape;
    const w = cols * view.fit, h = rows * view.fit;
    view.x = Math.min(0, Math.max(w - cols * view.scale, view.x));
    view.y = Math.min(0, Math.max(h - rows * view.scale, view.y));
    view.fitted = view.scale === view.fit;
  }

  listen() {
    const canvas = this.canvas, stage = this.stage;
    let pan = null;
    this.spaceDown = false;
    canvas.addEventListener("pointerdown", (event) => {
      stage.focus({ preventScroll: true });
      if (event.button === 1 || (event.button === 0 && this.spaceDown)) {
        event.preventDefault();
        pan = { x: event.clientX, y: event.clientY };
        canvas.setPointerCapture(event.pointerId);
        return;
      }
      if (event.button !== 0) return;
      canvas.setPointerCapture(event.pointerId);
      this.begin(event);
    });
    canvas.addEventListener("pointermove", (event) => {
      if (pan) {
        this.view.x += event.clientX - pan.x;
        this.view.y += event.clientY - pan.y;
        pan = { x: event.clientX, y: event.clientY };
        this.clampView();
        this.draw();
      } else if (this.stroke) this.extend(event);
      this.showCell(event);
    });
    const release = () => {
      if (pan) pan = null;
      else if (this.stroke) this.finish();
    };
    canvas.addEventListener("pointerup", release);
    canvas.addEventListener("pointercancel", () => {
      pan = null;
      this.cancel();
    });
    canvas.addEventListener("pointerleave", () => {
      if (!this.stroke) this.readout.textContent = "\u00a0";
    });
    canvas.addEventListener("auxclick", (event) => event.preventDefault());
    canvas.addEventListener("wheel", (event) => this.zoom(event), { passive: false });
    stage.addEventListener("keydown", (event) => this.key(event, true));
    stage.addEventListener("keyup", (event) => this.key(event, false));
    this.resize = new ResizeObserver(() => this.shape && this.layout(false));
    this.resize.observe(this.root);
  }

  key(event, down) {
    const k = event.key.toLowerCase();
    let handled = true;
    if (k === " ") {
      this.spaceDown = down;
      this.stage.classList.toggle("panning", down);
    } else if (!down) handled = false;
    else if ((event.ctrlKey || event.metaKey) && k === "z") this.queueStep(event.shiftKey ? "redo" : "undo");
    else if ((event.ctrlKey || event.metaKey) && k === "y") this.queueStep("redo");
    else if (event.ctrlKey || event.metaKey || event.altKey) handled = false;
    else if (k === "escape") this.cancel();
    else {
      const tool = TOOLS.find(([, , key]) => key && key === k);
      if (tool) this.setTool(tool[0]);
      else handled = false;
    }
    if (handled) {
      event.preventDefault();
      event.stopPropagation(); // Streamlit's own keys (R reruns) stay out of the canvas
    }
  }

  destroy() {
    this.resize.disconnect();
    this.root.remove();
  }
}
