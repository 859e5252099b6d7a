// The paint canvas's toolbar and drawing, as methods of the Editor (paint_canvas.js): the grid
// picture scaled to the view, faint grid lines when blocks are big enough, the diagonal guide
// and the outline of a rectangle, lasso, row, column or band being dragged.

Object.assign(Editor.prototype, {
  // ---------------------------------------------------------------- toolbar
  build() {
    const root = document.createElement("div");
    root.className = "paint-root";
    const bar = document.createElement("div");
    bar.className = "paint-toolbar";
    const title = (label, key) => (key ? `${label} (${key.toUpperCase()})` : label);
    const tools = TOOLS.map(([id, label, key]) => [id, label, title(label, key)]);
    this.toolButtons = this.group(bar, tools, (id) => this.setTool(id));
    const sizeLabel = document.createElement("span");
    sizeLabel.className = "paint-label";
    sizeLabel.textContent = "brush";
    bar.appendChild(sizeLabel);
    const sizes = SIZES.map((s) => [String(s), String(s), `Brush ${s}×${s} blocks`]);
    this.sizeButtons = this.group(bar, sizes, (id) => this.setSize(Number(id)));
    const views = [
      ["fit", "Fit", "Show the whole grid"],
      ["undo", "Undo", "Undo (Ctrl+Z)"],
      ["redo", "Redo", "Redo (Ctrl+Shift+Z)"],
    ];
    this.group(bar, views, (id) => {
      if (id === "fit") this.fit();
      else this.queueStep(id);
    });
    this.status = document.createElement("span");
    this.status.className = "paint-status";
    this.status.setAttribute("aria-live", "polite");
    bar.appendChild(this.status);
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
  },

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
  },

  setTool(tool) {
    this.cancel();
    this.tool = tool;
    this.saveTools();
  },

  setSize(size) {
    this.size = size;
    this.saveTools();
  },

  saveTools() {
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify({ tool: this.tool, size: this.size }));
    } catch (error) {
      // private mode: the tools still stay for this page
    }
    this.showTools();
  },

  showTools() {
    const press = (buttons, picked) => {
      for (const [id, button] of Object.entries(buttons)) {
        button.setAttribute("aria-pressed", String(id === picked));
      }
    };
    press(this.toolButtons, this.tool);
    press(this.sizeButtons, String(this.size));
  },


  // ---------------------------------------------------------------- drawing
  // The view in the picture's cells: a window of the head (each cell `step` blocks a side) is
  // drawn where it lies in the head; a whole head is the view itself.
  local() {
    const win = this.win;
    if (!win) return this.view;
    const { scale, x, y } = this.view;
    return { scale: scale * win.step, x: x + win.col0 * scale, y: y + win.row0 * scale };
  },

  draw() {
    if (!this.shape) return;
    const ctx = this.ctx, dpr = window.devicePixelRatio || 1;
    const { rows, cols } = this.shape;
    const { scale, x, y } = this.local();
    const w = this.canvas.width / dpr, h = this.canvas.height / dpr;
    const whole = this.view; // CSS px per block and offset in the head, for tests
    this.canvas.dataset.view = `${whole.scale} ${whole.x} ${whole.y}`;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, w, h);
    if (this.pixels) {
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(this.image, x, y, cols * scale, rows * scale);
    }
    if (scale >= MIN_GRID_PX) this.drawGrid(w, h);
    if (scale >= MIN_HATCH_PX && this.partial) this.drawHatch(w, h);
    ctx.save();
    ctx.strokeStyle = "rgba(30, 40, 60, 0.35)";
    ctx.setLineDash([3, 3]);
    ctx.lineWidth = 1;
    const d = Math.min(this.full.rows, this.full.cols) * whole.scale;
    ctx.beginPath();
    ctx.moveTo(whole.x, whole.y);
    ctx.lineTo(whole.x + d, whole.y + d);
    ctx.stroke();
    ctx.restore();
    this.drawGuide();
  },

  drawGrid(w, h) {
    const ctx = this.ctx, { rows, cols } = this.shape, { scale, x, y } = this.local();
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
  },

  // Partial blocks hatched (diagonal strokes inside the block), the visible ones only.
  drawHatch(w, h) {
    const ctx = this.ctx, { rows, cols } = this.shape, { scale, x, y } = this.local();
    const c0 = Math.max(0, Math.floor(-x / scale)), c1 = Math.min(cols, Math.ceil((w - x) / scale));
    const r0 = Math.max(0, Math.floor(-y / scale)), r1 = Math.min(rows, Math.ceil((h - y) / scale));
    ctx.save();
    ctx.strokeStyle = "rgba(30, 40, 60, 0.55)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    const step = Math.max(3, scale / 4);
    for (let r = r0; r < r1; r++) {
      for (let c = c0; c < c1; c++) {
        if (!this.isPartial(r * cols + c)) continue;
        const px = x + c * scale, py = y + r * scale;
        for (let d = step; d < 2 * scale; d += step) {
          const a = Math.min(d, scale), b = Math.max(0, d - scale);
          ctx.moveTo(px + b, py + a);
          ctx.lineTo(px + a, py + b);
        }
      }
    }
    ctx.stroke();
    ctx.restore();
  },

  // The outline of a rectangle, lasso, row, column or band being dragged.
  drawGuide() {
    const s = this.stroke;
    if (!s || s.tool === "brush") return;
    const ctx = this.ctx, { scale, x, y } = this.local(), { rows, cols } = this.shape;
    ctx.save();
    ctx.strokeStyle = "rgba(255, 75, 75, 0.9)";
    ctx.fillStyle = "rgba(255, 75, 75, 0.12)";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    if (s.tool === "lasso") {
      s.points.forEach(([px, py], k) => {
        ctx[k ? "lineTo" : "moveTo"](x + px * scale, y + py * scale);
      });
      ctx.closePath();
    } else if (s.tool === "band") {
      const { low, high } = this.region(s); // row - col: the edges are col - row = -high, 1 - low
      for (const offset of [-high, 1 - low]) {
        const c0 = Math.max(0, offset), r0 = Math.max(0, -offset);
        const run = Math.min(rows - r0, cols - c0);
        ctx.moveTo(x + c0 * scale, y + r0 * scale);
        ctx.lineTo(x + (c0 + run) * scale, y + (r0 + run) * scale);
      }
    } else {
      const r = this.region(s);
      let box = r;
      if (r.kind === "row") box = { row0: r.row, row1: r.row, col0: 0, col1: cols - 1 };
      if (r.kind === "column") box = { row0: 0, row1: rows - 1, col0: r.col, col1: r.col };
      const width = (box.col1 - box.col0 + 1) * scale, height = (box.row1 - box.row0 + 1) * scale;
      ctx.rect(x + box.col0 * scale, y + box.row0 * scale, width, height);
    }
    if (s.tool !== "band") ctx.fill();
    ctx.stroke();
    ctx.restore();
  },

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
  },
});
