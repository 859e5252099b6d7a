// The paint canvas's input, as methods of the Editor (paint_canvas.js): where the pointer is on
// the grid, the readout of the block under it, wheel zoom, Space- or middle-drag pan, the
// pointer events that make strokes, and the keys.

Object.assign(Editor.prototype, {
  // ---------------------------------------------------------------- pointer geometry
  // Pointer position as fractional (col, row) of the grid.
  gridPoint(event) {
    const box = this.canvas.getBoundingClientRect();
    const { scale, x, y } = this.local();
    const px = (event.clientX - box.left) * (parseFloat(this.canvas.style.width) / box.width);
    const py = (event.clientY - box.top) * (parseFloat(this.canvas.style.height) / box.height);
    return [(px - x) / scale, (py - y) / scale, px, py];
  },

  cellAt(point) {
    const { rows, cols } = this.shape;
    const c = Math.floor(point[0]), r = Math.floor(point[1]);
    return r >= 0 && r < rows && c >= 0 && c < cols ? [r, c] : null;
  },

  // ---------------------------------------------------------------- readout, zoom, pan
  showCell(event) {
    const cell = this.cellAt(this.gridPoint(event));
    if (!cell || !this.pixels) {
      this.readout.textContent = "\u00a0";
      return;
    }
    const [r, c] = cell, i = r * this.shape.cols + c;
    const { head } = this.shape, win = this.win;
    if (this.density) {
      const { step, row0, col0 } = win, share = Math.round((100 * this.shownDensity[i]) / 255);
      const rows = `${row0 + r * step}–${Math.min(this.full.rows, row0 + (r + 1) * step) - 1}`;
      const cols = `${col0 + c * step}–${Math.min(this.full.cols, col0 + (c + 1) * step) - 1}`;
      const active = this.shownDensity[i] ? `about ${Math.max(1, share)}% active` : "none active";
      this.readout.textContent = `head ${head} · query blocks ${rows} · key blocks ${cols} · ${active}`;
      return;
    }
    let what = "inactive";
    if (this.shown[i] && !this.base[i]) what = "painted, tile on the way";
    else if (this.shown[i]) {
      const code = this.code(i) & 127;
      const width = code ? this.data.widths[code - 1] : 0;
      const approx = this.data.codes_scale > 1 ? "≈ " : "";
      what = width ? `tile ${approx}${width}×${width}` : "active, no tile";
    }
    const [row, col] = win ? [r + win.row0, c + win.col0] : [r, c];
    this.readout.textContent = `head ${head} · query block ${row} · key block ${col} · ${what}`;
  },

  zoom(event) {
    event.preventDefault();
    const [, , px, py] = this.gridPoint(event);
    const view = this.view;
    const wanted = view.scale * Math.exp(-event.deltaY * 0.0015);
    const scale = Math.min(Math.max(wanted, view.fit), Math.max(view.fit, MAX_CELL_PX));
    const k = scale / view.scale;
    Object.assign(view, { scale, x: px - (px - view.x) * k, y: py - (py - view.y) * k });
    this.clampView();
    this.draw();
    this.wantView();
  },

  clampView() {
    const view = this.view, { rows, cols } = this.full;
    const w = cols * view.fit, h = rows * view.fit;
    view.x = Math.min(0, Math.max(w - cols * view.scale, view.x));
    view.y = Math.min(0, Math.max(h - rows * view.scale, view.y));
    view.fitted = view.scale === view.fit;
  },

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
        this.wantView();
      } else if (this.stroke) this.extend(event);
      this.pointer = { clientX: event.clientX, clientY: event.clientY };
      this.showCell(this.pointer);
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
      this.pointer = null;
      if (!this.stroke) this.readout.textContent = "\u00a0";
    });
    canvas.addEventListener("auxclick", (event) => event.preventDefault());
    canvas.addEventListener("wheel", (event) => this.zoom(event), { passive: false });
    stage.addEventListener("keydown", (event) => this.key(event, true));
    stage.addEventListener("keyup", (event) => this.key(event, false));
    this.onPageKey = (event) => this.pageKey(event);
    document.addEventListener("keydown", this.onPageKey);
    this.resize = new ResizeObserver(() => this.shape && this.layout(false));
    this.resize.observe(this.root);
  },

  // Keys while the canvas has the focus: panning, Esc, and R for the rectangle; the rest are
  // the page's keys (`command`).
  key(event, down) {
    const k = event.key.toLowerCase();
    let handled = true;
    if (k === " ") {
      this.spaceDown = down;
      this.stage.classList.toggle("panning", down);
    } else if (!down) handled = false;
    else if (k === "escape") this.cancel();
    else if (k === "r" && !event.ctrlKey && !event.metaKey && !event.altKey) this.setTool("rect");
    else handled = this.command(event);
    if (handled) {
      event.preventDefault();
      event.stopPropagation(); // Streamlit's own keys (R reruns) stay out of the canvas
    }
  },

  // Keys anywhere on the page but in a text box, whatever has the focus (a toolbar button
  // just clicked, a widget): tools, undo and redo, the previous and next head. None paints.
  pageKey(event) {
    if (event.defaultPrevented || typing(event.target)) return;
    if (this.command(event)) event.preventDefault();
  },

  command(event) {
    const k = event.key.toLowerCase(), step = stepOp(event);
    if (step) this.queueStep(step);
    else if (event.ctrlKey || event.metaKey || event.altKey) return false;
    else if (k === "[" || k === "]") this.showHead(k === "]" ? 1 : -1);
    else {
      const tool = TOOLS.find(([, , key]) => key && key === k);
      if (!tool) return false;
      this.setTool(tool[0]);
    }
    return true;
  },
});
