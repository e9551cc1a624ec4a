// A small SVG line chart of per-step values: one or more series over the
// step axis, drawn by this code alone (no library). Points arrive one at a
// time from the event stream or in bulk from /metrics; the redraw is
// coalesced to one per task.
//
//   const c = new LineChart('loss', [{key: 'loss', label: 'train'}, {key: 'val_loss', label: 'val'}]);
//   view.append(c.el);
//   c.add({step: 10, loss: 2.3});
//
// The <svg> carries data-count (points of the first series) and
// data-last-step (its newest step), which the browser tests read.

const NS = 'http://www.w3.org/2000/svg';
const W = 560, H = 200, L = 56, R = 12, T = 10, B = 26;
const MAX_POINTS = 4000;  // per series; older points are thinned evenly past this

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

function tickLabel(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return String(Number(v.toPrecision(3)));
}

// About n round numbers covering [lo, hi].
function ticks(lo, hi, n) {
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

export class LineChart {
  constructor(title, series) {
    this.series = series.map((s, i) => ({...s, idx: i, steps: [], values: []}));
    this.svg = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img'});
    this.svg.dataset.count = '0';
    this.svg.dataset.lastStep = '';
    this.svg.setAttribute('aria-label', title);
    const legend = document.createElement('div');
    legend.className = 'legend';
    for (const s of this.series) {
      const item = document.createElement('span');
      item.className = 'key series-' + s.idx;
      item.textContent = s.label;
      legend.append(item);
    }
    const h = document.createElement('h3');
    h.textContent = title;
    this.el = document.createElement('div');
    this.el.className = 'chart';
    this.el.dataset.chart = series[0].key;
    this.el.append(h, this.svg, legend);
    this.pending = false;
  }

  // Adds one metrics point (fields named by the series' keys; null or
  // missing fields are skipped). A step already present is replaced.
  add(p) {
    const step = Number(p.step);
    if (!Number.isFinite(step)) return;
    for (const s of this.series) {
      const v = p[s.key];
      if (v === null || v === undefined || !Number.isFinite(Number(v))) continue;
      insert(s, step, Number(v));
    }
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    setTimeout(() => {
      this.pending = false;
      this.draw();
    }, 0);
  }

  draw() {
    while (this.svg.firstChild) this.svg.removeChild(this.svg.firstChild);
    const all = this.series.filter((s) => s.steps.length > 0);
    const first = this.series[0];
    this.svg.dataset.count = String(first.steps.length);
    this.svg.dataset.lastStep = first.steps.length ? String(first.steps[first.steps.length - 1]) : '';
    if (all.length === 0) {
      const t = svg('text', {x: W / 2, y: H / 2, class: 'empty', 'text-anchor': 'middle'});
      t.textContent = 'no points yet';
      this.svg.append(t);
      return;
    }
    const xs = all.flatMap((s) => [s.steps[0], s.steps[s.steps.length - 1]]);
    const ys = all.flatMap((s) => s.values);
    const box = {x0: Math.min(...xs), x1: Math.max(...xs), y0: Math.min(...ys), y1: Math.max(...ys)};
    if (box.x1 === box.x0) box.x1 = box.x0 + 1;
    if (box.y1 === box.y0) { box.y0 -= Math.abs(box.y0) * 0.05 || 0.5; box.y1 += Math.abs(box.y1) * 0.05 || 0.5; }
    const sx = (x) => L + ((x - box.x0) / (box.x1 - box.x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - box.y0) / (box.y1 - box.y0)) * (H - T - B);
    this.drawAxes(box, sx, sy);
    for (const s of all) {
      const pts = s.steps.map((x, i) => sx(x).toFixed(1) + ',' + sy(s.values[i]).toFixed(1)).join(' ');
      this.svg.append(svg('polyline', {points: pts, class: 'line series-' + s.idx}));
      const n = s.steps.length - 1;
      this.svg.append(svg('circle', {cx: sx(s.steps[n]).toFixed(1), cy: sy(s.values[n]).toFixed(1), r: 2.5,
                                     class: 'dot series-' + s.idx}));
    }
  }

  drawAxes(box, sx, sy) {
    this.svg.append(svg('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis'}));
    this.svg.append(svg('line', {x1: L, y1: T, x2: L, y2: H - B, class: 'axis'}));
    for (const v of ticks(box.y0, box.y1, 4)) {
      const y = sy(v);
      this.svg.append(svg('line', {x1: L, y1: y, x2: W - R, y2: y, class: 'grid'}));
      const t = svg('text', {x: L - 4, y: y + 3, 'text-anchor': 'end', class: 'tick'});
      t.textContent = tickLabel(v);
      this.svg.append(t);
    }
    for (const v of ticks(box.x0, box.x1, 5)) {
      if (!Number.isInteger(v)) continue;
      const t = svg('text', {x: sx(v), y: H - B + 14, 'text-anchor': 'middle', class: 'tick'});
      t.textContent = String(v);
      this.svg.append(t);
    }
  }
}

// Keeps s.steps ascending; a repeated step replaces its value.
function insert(s, step, v) {
  const n = s.steps.length;
  if (n === 0 || step > s.steps[n - 1]) {
    s.steps.push(step);
    s.values.push(v);
  } else {
    let i = s.steps.findIndex((x) => x >= step);
    if (s.steps[i] === step) s.values[i] = v;
    else { s.steps.splice(i, 0, step); s.values.splice(i, 0, v); }
  }
  if (s.steps.length > MAX_POINTS) {
    const keep = (_, i) => i % 2 === 0 || i === s.steps.length - 1;
    s.values = s.values.filter(keep);
    s.steps = s.steps.filter(keep);
  }
}
