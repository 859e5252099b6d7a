// The paint canvas's pure helpers: decoding what Python sends (base64, deflate, bit-packed cells,
// run-length tile codes), encoding what goes back, and the cells of each region a stroke paints
// (the same regions strokes.read_stroke reads).

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
  const compressed = new Blob([fromBase64(text)]).stream();
  const stream = compressed.pipeThrough(new DecompressionStream("deflate"));
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

// The pixel of a block: empty unless shown; Python's tile colour (`code`) if Python has it
// active, the colour of a block whose tile is on the way if only painted here; lighter when
// Python sent it partial (a stroke makes blocks whole).
function blockPixel(shown, base, partial, code, palette, empty) {
  if (!shown) return empty;
  const colour = base ? palette[code] : palette[0];
  return partial && base ? lighter(colour) : colour;
}

// Whether two heads' data draw the same picture (cells, tiles and their colours).
function samePicture(a, b) {
  if (!a || !b) return false;
  const keys = ["rows", "cols", "cells", "partial", "codes", "codes_scale", "empty"];
  const same = (x, y) => x.length === y.length && x.every((v, k) => v === y[k]);
  const sameWindow = a.density === b.density && JSON.stringify(a.window) === JSON.stringify(b.window);
  return keys.every((k) => a[k] === b[k]) && same(a.colours, b.colours) && same(a.dark, b.dark) &&
    sameWindow;
}

// A packed pixel halfway to white: how a partial block shows its colour.
function lighter(pixel) {
  const mix = (shift) => ((((pixel >> shift) & 255) + 255) >> 1) << shift;
  return (255 << 24) | mix(16) | mix(8) | mix(0);
}

// A packed pixel `share` / 255 of the way from `from` to `to`.
function mixPixel(from, to, share) {
  const mix = (shift) => {
    const a = (from >> shift) & 255, b = (to >> shift) & 255;
    return ((a + (((b - a) * share) / 255)) & 255) << shift;
  };
  return (255 << 24) | mix(16) | mix(8) | mix(0);
}

function packRGBA([r, g, b]) {
  return (255 << 24) | (b << 16) | (g << 8) | r; // little-endian ImageData pixel
}

// ------------------------------------------------------------------ regions
// Every region is what Python reads (strokes.read_stroke) plus, for masks, the cells unpacked.
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
      const first = Math.max(0, r - region.high);
      const last = Math.min(cols - 1, r - region.low);
      for (let c = first; c <= last; c++) visit(r * cols + c);
    }
  } else if (kind === "mask") {
    const { row0, col0, rows: h, cols: w, cells } = region;
    for (let i = 0; i < h * w; i++) {
      if (cells[i]) visit((row0 + ((i / w) | 0)) * cols + col0 + (i % w));
    }
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
  const first = Math.max(0, Math.floor(Math.min(...ys)));
  const last = Math.min(rows - 1, Math.ceil(Math.max(...ys)));
  for (let r = first; r <= last; r++) {
    const y = r + 0.5, crossings = [];
    for (let k = 0; k < n; k++) {
      const [x0, y0] = points[k], [x1, y1] = points[(k + 1) % n];
      if (y0 > y !== y1 > y) crossings.push(x0 + ((y - y0) * (x1 - x0)) / (y1 - y0));
    }
    crossings.sort((a, b) => a - b);
    for (let k = 0; k + 1 < crossings.length; k += 2) {
      const from = Math.max(0, Math.ceil(crossings[k] - 0.5));
      const to = Math.min(cols - 1, Math.floor(crossings[k + 1] - 0.5));
      for (let c = from; c <= to; c++) add(r, c);
    }
  }
  return cells;
}

