// The paint canvas: one head of a block-sparse layout, painted with the pointer.
//
// Python sends one head (see payload.py): bit-packed cells and run-length tile codes, both
// deflated and base64, the palette, the action and the heads a stroke applies to, and `done`:
// the number of the last stroke of this canvas (`client`) that it has done. Each stroke is drawn
// here at once and, on release, numbered and queued in the outbox. The outbox sends its queue as
// the trigger value `edit` ({client, strokes: [...]}, see strokes.py) when no trigger is waiting
// for its answer: strokes drawn meanwhile go together in the next one. A trigger is answered
// when a new head arrives with `done` at its last stroke; strokes up to `done` leave the queue
// and the picture is rebuilt from Python's cells with the strokes still queued drawn on top, so
// what stays is exactly the design. Python may do the first strokes of a large trigger and leave
// the rest for later (its budget): those go again at once. A trigger with no answer goes again
// after a while (a rerun started meanwhile can take its place), and Python skips what it has
// done already, so every stroke is done once, in order. A head sent by windows may get another
// window while a stroke is drawn (asked for before it began): that window waits for the stroke's
// end, so the stroke is committed in the cells it was drawn on.
//
// Streamlit loads one module: paint_cells.js (helpers), paint_outbox.js (the strokes not yet
// done), this file (the editor's state and strokes), paint_view.js (its toolbar and drawing) and
// paint_input.js (its pointer and keys), joined in that order (see __init__.py).

// Tool keys work anywhere on the page (not while typing in a text box). R is Streamlit's own
// rerun key outside the canvas, so the rectangle is M page-wide (a marquee, as in image
// editors) and R too while the canvas has the focus.
const TOOLS = [
  ["brush", "Brush", "b"],
  ["rect", "Rectangle", "m"],
  ["lasso", "Lasso", "l"],
  ["row", "Row", ""],
  ["column", "Column", ""],
  ["band", "Band", ""],
];
const SIZES = [1, 2, 4, 8];
const ACTIVE_RGB = [47, 62, 92]; // an active block whose tile is not known (yet)
const MAX_HEIGHT_PX = 640;
const MIN_GRID_PX = 8; // grid lines show from this many pixels per block
const MIN_HATCH_PX = 6; // partial blocks are hatched from this many pixels per block
const MAX_CELL_PX = 64;
const STORE_KEY = "blocksparse-designer.paint-tools";
const editors = new WeakMap();
// Asks Python for another head (the trigger `head`: the head to show), from [ and ], and for
// another window of a head sent by windows (the trigger `view`, see viewport.py).
const headTrigger = { send: null };
const VIEW_WAIT_MS = 120; // a window is asked for once the view rests this long
// The tools that paint zoomed out: their rectangle of buckets is exactly the blocks it holds.
const BUCKET_TOOLS = ["rect", "row", "column"];

export default function paintCanvas({ data, parentElement, setTriggerValue }) {
  headTrigger.send = setTriggerValue;
  let editor = editors.get(parentElement);
  if (!editor) {
    editor = new Editor(parentElement);
    editors.set(parentElement, editor);
    outbox.waiting = 0; // a trigger sent by a canvas that is gone may have been dropped with it
  }
  outbox.send = setTriggerValue;
  outbox.limits = { strokes: data.max_strokes, maskChars: data.max_mask_chars };
  editor.update(data);
  return () => {
    editor.destroy();
    editors.delete(parentElement);
  };
}

// ------------------------------------------------------------------ the editor
class Editor {
  constructor(parent) {
    this.parent = parent;
    this.stroke = null;
    this.deferred = null; // Python's data that arrived during a stroke, shown after it
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

  // ---------------------------------------------------------------- data from Python
  update(data) {
    const { rows, cols, head } = data;
    // A head sent by windows (a design held as runs): `window` says where the picture lies in
    // the head and how many blocks a side each of its cells shows; the view stays the head's.
    const full = { rows: data.full_rows || rows, cols: data.full_cols || cols };
    const win = data.window || null;
    const reshaped = !this.full || this.full.rows !== full.rows || this.full.cols !== full.cols;
    const moved = JSON.stringify(win) !== JSON.stringify(this.win || null);
    if (moved && this.stroke && !reshaped && this.shape.head === head) {
      // Another window of this head (asked for before the stroke began): the stroke's cells
      // are this picture's, so the new window waits until the stroke is committed or cancelled.
      this.deferred = data;
      return;
    }
    this.deferred = null;
    if (reshaped || moved || this.shape.head !== head) this.cancel();
    // Every rerun sends the head again: when its picture and the strokes on top are as drawn
    // (a widget changed, or the page reran for another reason), nothing is decoded or redrawn.
    const unchanged = !reshaped && samePicture(this.data, data) && this.shape.head === head;
    const queued = outbox.queue.length;
    answered(data);
    this.data = data;
    this.action = data.action;
    this.shape = { rows, cols, head };
    this.full = full;
    this.win = win;
    const { rows: fullRows, cols: fullCols } = full;
    Object.assign(this.canvas.dataset, { rows: fullRows, cols: fullCols, head, action: data.action });
    this.canvas.dataset.window = win ? `${win.row0} ${win.col0} ${win.rows} ${win.cols} ${win.step}` : "";
    this.layout(reshaped);
    if (unchanged && outbox.queue.length === queued) {
      this.canvas.dataset.done = String(outbox.done);
      this.showPending();
      return;
    }
    const token = ++this.loading;
    this.canvas.dataset.ready = "false";
    const partial = data.partial ? inflate(data.partial) : Promise.resolve(null);
    const density = data.density ? inflate(data.density) : Promise.resolve(null);
    const parts = [inflate(data.cells), inflate(data.codes), partial, density];
    Promise.all(parts).then(([bits, runs, part, shares]) => {
      if (token !== this.loading) return; // a newer head arrived meanwhile
      this.density = shares; // zoomed out: each cell's share of active blocks, 1 to 255
      this.base = unpackBits(bits, rows * cols);
      this.partial = part && unpackBits(part, rows * cols); // token masks inside: drawn lighter
      this.canvas.dataset.partial = String(this.partial ? this.partial.reduce((a, b) => a + b) : 0);
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
      this.canvas.dataset.done = String(outbox.done);
      this.showPending();
      if (this.pointer) this.showCell(this.pointer); // the readout follows the new tiles
      this.wantView();
    });
  }

  // Python's cells, then every queued stroke on top, then the stroke in progress (zoomed
  // out: the buckets a queued rectangle covers whole take their new share of active blocks).
  rebuild() {
    const { rows, cols } = this.shape;
    this.shown = this.base.slice();
    this.shownDensity = this.density && this.density.slice();
    const { rows: fullRows, cols: fullCols } = this.full;
    for (const { draw } of outbox.queue) {
      const here = draw && draw.head === this.shape.head && draw.rows === fullRows &&
        draw.cols === fullCols;
      if (here && this.density) this.shadeBuckets(draw.region, draw.action);
      else if (here) this.eachShownCell(draw.region, (i) => this.apply(i, draw.action));
    }
    const drawing = this.stroke;
    if (drawing && drawing.visited) for (const i of drawing.visited) this.apply(i, drawing.action);
    if (this.image.width !== cols || this.image.height !== rows) {
      this.image.width = cols;
      this.image.height = rows;
    }
    this.pixels = this.imageCtx.createImageData(cols, rows);
    this.px = new Uint32Array(this.pixels.data.buffer);
    this.colourAll();
    this.imageCtx.putImageData(this.pixels, 0, 0);
    this.draw();
  }

  // Every block's pixel in one pass, row by row (16M blocks at 4096²: a call and a division
  // per block cost a second of the page's main thread).
  colourAll() {
    if (this.density) return this.colourDensity();
    const { rows, cols } = this.shape, scale = this.data.codes_scale, codes = this.codes;
    const { px, shown, base, partial, palette, empty } = this;
    const codeCol = new Int32Array(cols);
    for (let c = 0; c < cols; c++) codeCol[c] = (c / scale) | 0;
    for (let r = 0, i = 0; r < rows; r++) {
      const codeRow = ((r / scale) | 0) * this.codeCols;
      for (let c = 0; c < cols; c++, i++) {
        const code = codes[codeRow + codeCol[c]];
        px[i] = blockPixel(shown[i], base[i], partial && partial[i], code, palette, empty);
      }
    }
  }

  // Zoomed out: each cell (a bucket of blocks) mixes the empty and the active colour by the
  // share of its blocks that are active.
  colourDensity() {
    const { px, shownDensity: density, empty } = this, full = packRGBA(ACTIVE_RGB);
    for (let i = 0; i < px.length; i++) px[i] = density[i] ? mixPixel(empty, full, density[i]) : empty;
  }

  // A rectangle of the head's blocks painted on the density picture: each bucket inside it
  // whole becomes all active, none, or the rest (toggle); a bucket it cuts is left as it is.
  shadeBuckets(region, action) {
    if (region.kind !== "rect") return;
    const { rows, cols } = this.shape, { row0, col0, step } = this.win, full = this.full;
    const inside = (low, high, origin, size, n) => {
      const first = Math.max(0, Math.ceil((low - origin) / step));
      const last = high >= size - 1 ? n - 1 : Math.floor((high + 1 - origin) / step) - 1;
      return [first, Math.min(n - 1, last)];
    };
    const [r0, r1] = inside(region.row0, region.row1, row0, full.rows, rows);
    const [c0, c1] = inside(region.col0, region.col1, col0, full.cols, cols);
    const density = this.shownDensity;
    for (let r = r0; r <= r1; r++) {
      for (let c = c0, i = r * cols + c0; c <= c1; c++, i++) {
        density[i] = action === "set" ? 255 : action === "clear" ? 0 : 255 - density[i];
      }
    }
  }

  // The cells of a region given in the head's blocks that the picture shows, as picture indices
  // (a rectangle cut to the window first: one painted zoomed out may cover a whole head).
  eachShownCell(region, visit) {
    const { rows, cols } = this.shape, win = this.win;
    if (!win) return eachCell(region, rows, cols, visit);
    if (region.kind === "rect") {
      const cut = {
        kind: "rect", row0: Math.max(region.row0 - win.row0, 0),
        row1: Math.min(region.row1 - win.row0, rows - 1),
        col0: Math.max(region.col0 - win.col0, 0), col1: Math.min(region.col1 - win.col0, cols - 1),
      };
      if (cut.row0 <= cut.row1 && cut.col0 <= cut.col1) eachCell(cut, rows, cols, visit);
      return;
    }
    const fullCols = this.full.cols;
    eachCell(region, this.full.rows, fullCols, (i) => {
      const r = Math.floor(i / fullCols) - win.row0, c = (i % fullCols) - win.col0;
      if (r >= 0 && r < rows && c >= 0 && c < cols) visit(r * cols + c);
    });
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
    const partial = this.partial && this.partial[i];
    return blockPixel(this.shown[i], this.base[i], partial, this.code(i), this.palette, this.empty);
  }

  // A partial block as Python sent it, not painted over since (a stroke makes blocks whole).
  isPartial(i) {
    return Boolean(this.partial && this.partial[i] && this.base[i] && this.shown[i]);
  }

  // ---------------------------------------------------------------- geometry
  layout(reshaped) {
    const { rows, cols } = this.full;
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
    this.wantView();
  }


  // ---------------------------------------------------------------- strokes
  begin(event) {
    const point = this.gridPoint(event);
    const cell = this.cellAt(point);
    if (!cell || !this.pixels) return;
    if (this.density && !BUCKET_TOOLS.includes(this.tool)) {
      this.readout.textContent = "Zoomed out, the rectangle, row and column tools paint every " +
        "block they cover; zoom in (wheel) to one pixel a block to use the brush, lasso or band.";
      return;
    }
    const { tool, action } = this;
    const s = { tool, action, head: this.shape.head, startCell: cell, endCell: cell };
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
    // A window's strokes stay in view: its margin, loaded for panning, is not on screen.
    const { rows, cols } = this.shape;
    const { r0, r1, c0, c1 } = this.win ? this.visibleBox() : { r0: 0, r1: rows, c0: 0, c1: cols };
    const clamp = (v, low, high) => Math.min(Math.max(v, low), high - 1e-6);
    const clamped = [clamp(point[0], c0, c1), clamp(point[1], r0, r1)];
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
      const r = Math.round(r0 + ((r1 - r0) * k) / steps);
      const c = Math.round(c0 + ((c1 - c0) * k) / steps);
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
    const rlo = Math.min(ra, rb), rhi = Math.max(ra, rb);
    const clo = Math.min(ca, cb), chi = Math.max(ca, cb);
    switch (s.tool) {
      case "brush":
        return maskRegion(s.visited, cols);
      case "lasso":
        return maskRegion(lassoCells(s.points, rows, cols), cols);
      case "rect":
        return { kind: "rect", row0: rlo, col0: clo, row1: rhi, col1: chi };
      case "row":
        if (rlo === rhi) return { kind: "row", row: rlo };
        return { kind: "rect", row0: rlo, col0: 0, row1: rhi, col1: cols - 1 };
      case "column":
        if (clo === chi) return { kind: "column", col: clo };
        return { kind: "rect", row0: 0, col0: clo, row1: rows - 1, col1: chi };
      default: {
        const a = ra - ca, b = rb - cb; // offsets are row - col, as in Python
        return { kind: "band", low: Math.min(a, b), high: Math.max(a, b) };
      }
    }
  }

  finish() {
    const s = this.stroke;
    this.stroke = null;
    const drawn = this.region(s);
    const region = drawn && this.win ? this.inView(drawn) : drawn;
    if (!region) {
      if (this.win) this.rebuild();
      else this.draw();
      return this.showDeferred();
    }
    if (s.tool !== "brush" && !this.density) {
      const { rows, cols } = this.shape;
      const changed = [];
      eachCell(region, rows, cols, (i) => {
        this.apply(i, s.action);
        changed.push(i);
      });
      this.repaint(changed);
    }
    this.draw();
    const { rows, cols } = this.full;
    const { heads } = this.data;
    enqueue({ head: s.head, action: s.action, heads, region: this.inHead(region), rows, cols });
    if (this.density) this.rebuild(); // the buckets it covers, shaded
    this.showPending();
    this.showDeferred();
    this.wantView(); // a window asked for while drawing waited for the stroke
  }

  // The window that arrived while a stroke was drawn, once that stroke is done with.
  showDeferred() {
    const data = this.deferred;
    this.deferred = null;
    if (data) this.update(data);
  }

  // The picture cells on screen, [r0, r1) x [c0, c1) (a cell partly on screen counts).
  visibleBox() {
    const { scale, x, y } = this.local(), dpr = window.devicePixelRatio || 1;
    const w = this.canvas.width / dpr, h = this.canvas.height / dpr, { rows, cols } = this.shape;
    return {
      r0: Math.max(0, Math.floor(-y / scale)), r1: Math.min(rows, Math.ceil((h - y) / scale)),
      c0: Math.max(0, Math.floor(-x / scale)), c1: Math.min(cols, Math.ceil((w - x) / scale)),
    };
  }

  // A stroke's region in a window, cut to the cells on screen (a rect, or a mask of the rest);
  // null when none is.
  inView(region) {
    const { r0, r1, c0, c1 } = this.visibleBox(), { rows, cols } = this.shape;
    if (region.kind === "rect" || region.kind === "row" || region.kind === "column") {
      const box = region.kind === "row" ? { row0: region.row, row1: region.row, col0: c0, col1: c1 - 1 }
        : region.kind === "column" ? { row0: r0, row1: r1 - 1, col0: region.col, col1: region.col }
        : region;
      const cut = { kind: "rect", row0: Math.max(box.row0, r0), row1: Math.min(box.row1, r1 - 1),
        col0: Math.max(box.col0, c0), col1: Math.min(box.col1, c1 - 1) };
      return cut.row0 <= cut.row1 && cut.col0 <= cut.col1 ? cut : null;
    }
    const cells = [];
    eachCell(region, rows, cols, (i) => {
      const r = Math.floor(i / cols), c = i % cols;
      if (r >= r0 && r < r1 && c >= c0 && c < c1) cells.push(i);
    });
    return maskRegion(cells, cols);
  }

  // A region of the picture's cells as a region of the head's blocks: moved to where the
  // window lies (the same region when the picture is the whole head); zoomed out, a rectangle
  // of buckets is every block they hold.
  inHead(region) {
    const win = this.win;
    if (!win) return region;
    if (win.step > 1) {
      const { rows, cols } = this.full, step = win.step;
      return {
        kind: "rect", row0: win.row0 + region.row0 * step, col0: win.col0 + region.col0 * step,
        row1: Math.min(rows, win.row0 + (region.row1 + 1) * step) - 1,
        col1: Math.min(cols, win.col0 + (region.col1 + 1) * step) - 1,
      };
    }
    const moved = { ...region, row0: region.row0 + win.row0, col0: region.col0 + win.col0 };
    if (region.kind === "rect") {
      Object.assign(moved, { row1: region.row1 + win.row0, col1: region.col1 + win.col0 });
    }
    return moved;
  }

  // A head sent by windows: once the view rests, ask for the window it shows (the visible
  // blocks and half a view more on each side) when the picture does not cover them at the
  // zoom's detail (`step`: blocks a side per CSS pixel, a power of 2, 1 from one pixel a block).
  wantView() {
    if (!this.win || !headTrigger.send) return;
    clearTimeout(this.viewTimer);
    this.viewTimer = setTimeout(() => this.askView(), VIEW_WAIT_MS);
  }

  askView() {
    if (!this.win || this.stroke || !headTrigger.send) return;
    const { scale, x, y } = this.view, { rows, cols } = this.full;
    const dpr = window.devicePixelRatio || 1;
    const w = this.canvas.width / dpr, h = this.canvas.height / dpr;
    const span = (from, to, size) => [Math.max(0, Math.floor(from)), Math.min(size, Math.ceil(to))];
    const [r0, r1] = span(-y / scale, (h - y) / scale, rows);
    const [c0, c1] = span(-x / scale, (w - x) / scale, cols);
    const step = scale >= 1 ? 1 : 2 ** Math.floor(Math.log2(1 / scale));
    const win = this.win;
    const covers = win.row0 <= r0 && win.col0 <= c0 && win.row0 + win.rows >= r1 &&
      win.col0 + win.cols >= c1;
    if (covers && win.step <= step) return;
    let margin = 0.5;
    const box = () => {
      const mr = Math.ceil((r1 - r0) * margin), mc = Math.ceil((c1 - c0) * margin);
      const [a0, a1] = span(r0 - mr, r1 + mr, rows), [b0, b1] = span(c0 - mc, c1 + mc, cols);
      return { row0: a0, col0: b0, rows: a1 - a0, cols: b1 - b0 };
    };
    let asked = box();
    const cells = (b) => Math.ceil(b.rows / step) * Math.ceil(b.cols / step);
    while (margin > 0 && cells(asked) > this.data.max_window_cells) {
      margin = Math.max(0, margin - 0.125);
      asked = box();
    }
    const value = { head: this.shape.head, ...asked, step };
    const text = JSON.stringify(value);
    if (text === this.askedView) return; // asked already: its window is on the way
    this.askedView = text;
    headTrigger.send("view", value);
  }

  cancel() {
    if (!this.stroke) return;
    this.stroke = null;
    if (this.base) this.rebuild();
    this.showDeferred();
  }

  queueStep(op) {
    this.cancel();
    enqueue({ op });
    this.showPending();
  }

  // How many strokes are not saved yet, in the toolbar (and for tests).
  showPending() {
    const n = outbox.queue.length;
    this.canvas.dataset.pending = String(n);
    this.status.textContent = n ? `saving ${n} stroke${n > 1 ? "s" : ""}…` : "";
  }

  // Another head, `delta` away (wrapping round): Python draws it and sends it here.
  showHead(delta) {
    const heads = this.data && this.data.n_heads;
    if (!heads || heads < 2 || !headTrigger.send) return;
    headTrigger.send("head", (this.shape.head + delta + heads) % heads);
  }

  destroy() {
    this.resize.disconnect();
    document.removeEventListener("keydown", this.onPageKey);
    this.root.remove();
  }
}

