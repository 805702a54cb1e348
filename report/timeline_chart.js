// The memory timeline page, part 2 of 5: the charts. Each run is a canvas of allocated bytes stacked
// by category, one column of pixels per point drawn (columnPoints), with reserved bytes, the limit,
// steps, phases, annotations, OOMs, the memory budget's events and the peak marked; a second canvas
// on top draws what moves (hover, selection). Comparing two runs adds a chart of their difference.

const COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#9c755f'];
const BUDGET_COLORS = {evict: '#e67e22', remat: '#27ae60', offload: '#2980b9', fetch: '#8e44ad'};
const M = {left: 86, right: 18, top: 34, bottom: 44};  // the plot's margins, in CSS pixels

function makeCanvas(parent, cls, w, h) {
  const c = document.createElement('canvas'), dpr = window.devicePixelRatio || 1;
  c.className = cls;
  c.width = Math.round(w * dpr);
  c.height = Math.round(h * dpr);
  c.style.width = w + 'px';
  c.style.height = h + 'px';
  parent.appendChild(c);
  const ctx = c.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return {canvas: c, ctx};
}

// A chart: kind 'run' (runs[index]) or 'diff', with its canvases and its geometry.
function makeChart(host, kind, index, width, height, label) {
  const box = document.createElement('div');
  box.className = 'chart';
  box.style.height = height + 'px';
  host.appendChild(box);
  const base = makeCanvas(box, 'base', width, height), over = makeCanvas(box, 'overlay', width, height);
  if (label) {
    const l = document.createElement('div');
    l.className = 'label';
    l.textContent = label;
    box.appendChild(l);
  }
  const extra = kind === 'run' && page.runs[index].marks.some((m) => BUDGET_KINDS.includes(m.kind)) ? 36 : 0;
  const chart = {kind, index, box, base, over, width, height, W: width - M.left - M.right,
    H: height - M.top - M.bottom - extra, budgetRows: extra > 0, reps: null, repsBy: []};
  if (kind === 'diff') chart.H = Math.floor(chart.H / 2);  // gains above the baseline, savings below
  chart.y0 = M.top + chart.H;  // the baseline
  return chart;
}

function xToPx(chart, x) {
  return M.left + (x - page.view.x0) / (page.view.x1 - page.view.x0) * chart.W;
}
function yOf(chart, v) {
  return chart.y0 - v / chart.ymax * chart.H;
}

// Tick values for [0, max]: 1, 2 or 5 times a power of ten of a binary unit, about five of them.
function byteTicks(max) {
  let unit = 1;
  while (max / unit >= 1024) unit *= 1024;
  let step = unit;
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500])
    if (max / (m * unit) <= 6) { step = m * unit; break; }
  const r = [];
  for (let v = 0; v <= max; v += step) r.push(v);
  return r;
}
function niceTicks(a, b, count) {
  const raw = (b - a) / count, mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const r = [];
  for (let v = Math.ceil(a / step) * step; v <= b; v += step) r.push(v);
  return r;
}

function drawAxes(chart, ctx, maxY, fmt) {
  ctx.font = '11px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const v of byteTicks(maxY)) {
    const y = yOf(chart, v);
    ctx.strokeStyle = '#eee';
    ctx.beginPath();
    ctx.moveTo(M.left, y);
    ctx.lineTo(M.left + chart.W, y);
    ctx.stroke();
    ctx.fillStyle = '#444';
    ctx.fillText(fmt(v), M.left - 6, y);
    if (v && chart.kind === 'diff') ctx.fillText(fmt(-v), M.left - 6, yOf(chart, -v));
  }
  ctx.strokeStyle = '#222';
  ctx.beginPath();
  ctx.moveTo(M.left, M.top);
  ctx.lineTo(M.left, chart.y0 + (chart.kind === 'diff' ? chart.H : 0));
  ctx.moveTo(M.left, chart.y0);
  ctx.lineTo(M.left + chart.W, chart.y0);
  ctx.stroke();
  drawXTicks(chart, ctx);
}

function drawXTicks(chart, ctx) {
  const {x0, x1} = page.view, y = chart.height - 14;
  ctx.fillStyle = '#444';
  ctx.textAlign = 'center';
  let ticks = niceTicks(x0, x1, Math.max(2, Math.floor(chart.W / 110)));
  if (page.axis === 'step') ticks = ticks.filter((v) => Number.isInteger(v));
  for (const v of ticks) {
    const px = xToPx(chart, v);
    if (px < M.left || px > M.left + chart.W) continue;
    ctx.fillRect(px, chart.y0 + (chart.kind === 'diff' ? chart.H : 0), 1, 4);
    const label = page.axis === 'time' ? v.toFixed(Math.max(0, -Math.floor(Math.log10((x1 - x0) / 5 || 1)))) + ' ms'
      : page.axis === 'step' ? (page.runs[0].steps[v] || {text: v < 0 ? 'before' : ''}).text : fmtInt(v);
    ctx.fillText(label, px, y);
  }
}

// The stacked categories of `run` at each column's point, and the reserved bytes as a dashed line.
function drawStack(chart, ctx, run, reps) {
  const below = new Float64Array(chart.W);
  for (let c = 0; c < run.cat.length; c++) {
    ctx.fillStyle = COLORS[c];
    const a = run.cat[c];
    for (let col = 0; col < chart.W; col++) {
      const p = reps[col];
      if (p < 0 || !a[p]) continue;
      const y1 = yOf(chart, below[col]), y2 = yOf(chart, below[col] += a[p]);
      ctx.fillRect(M.left + col, y2, 1, y1 - y2);
    }
  }
  ctx.strokeStyle = '#555';
  ctx.setLineDash([5, 4]);
  ctx.beginPath();
  let pen = false;
  for (let col = 0; col < chart.W; col++) {
    const p = reps[col];
    if (p < 0) { pen = false; continue; }
    const y = yOf(chart, run.reserved[p]);
    pen ? ctx.lineTo(M.left + col, y) : ctx.moveTo(M.left + col, y);
    pen = true;
  }
  ctx.stroke();
  if (run.limit > 0 && run.limit <= chart.ymax) {
    ctx.strokeStyle = '#d00';
    ctx.beginPath();
    ctx.moveTo(M.left, yOf(chart, run.limit));
    ctx.lineTo(M.left + chart.W, yOf(chart, run.limit));
    ctx.stroke();
    ctx.fillStyle = '#d00';
    ctx.textAlign = 'right';
    ctx.fillText('limit ' + fmtBytes(run.limit), M.left + chart.W - 4, yOf(chart, run.limit) - 7);
  }
  ctx.setLineDash([]);
}

function vline(ctx, px, y1, y2, color, dash) {
  ctx.strokeStyle = color;
  ctx.setLineDash(dash || []);
  ctx.beginPath();
  ctx.moveTo(px + 0.5, y1);
  ctx.lineTo(px + 0.5, y2);
  ctx.stroke();
  ctx.setLineDash([]);
}

// Steps, phases, annotations, OOMs and the budget's events of `run`, at their places.
function drawMarks(chart, ctx, run, X) {
  const inView = (px) => px >= M.left && px <= M.left + chart.W;
  const clamp = (px) => Math.max(M.left, Math.min(M.left + chart.W, px));
  for (const s of run.phases) {
    const a = clamp(xToPx(chart, X[s.from])), b = clamp(xToPx(chart, X[s.to]));
    ctx.fillStyle = PHASES[s.name];
    if (b > a) ctx.fillRect(a, M.top - 9, b - a, 7);
  }
  ctx.textAlign = 'left';
  ctx.textBaseline = 'alphabetic';
  let lastLabel = -1e9;
  for (const m of run.marks) {
    const px = Math.round(xToPx(chart, X[m.pos]));
    if (!inView(px)) continue;
    if (m.kind === 'step' || m.kind === 'note' || m.kind === 'oom') {
      const oom = m.kind === 'oom';
      vline(ctx, px, M.top - 12, chart.y0, oom ? '#d00' : m.kind === 'step' ? '#333' : '#999', oom ? [] : [3, 3]);
      if (px - lastLabel > 60 || oom) {
        ctx.fillStyle = oom ? '#d00' : '#333';
        ctx.fillText(oom ? 'OOM ' + fmtBytes(m.bytes) : m.text, px + 3, M.top - 14);
        lastLabel = px;
      }
    } else if (BUDGET_KINDS.includes(m.kind) && chart.budgetRows) {
      const row = BUDGET_KINDS.indexOf(m.kind);
      ctx.fillStyle = BUDGET_COLORS[m.kind];
      ctx.fillRect(px, chart.y0 + 6 + row * 8, 1, 7);
    }
  }
  if (chart.budgetRows) {
    ctx.textAlign = 'right';
    ctx.font = '9px system-ui, sans-serif';
    BUDGET_KINDS.forEach((k, row) => {
      ctx.fillStyle = BUDGET_COLORS[k];
      ctx.fillText(k, M.left - 4, chart.y0 + 12 + row * 8);
    });
    ctx.font = '11px system-ui, sans-serif';
  }
  const p = run.peak;
  if (p >= 0) {
    const px = xToPx(chart, (X[p] + X[p + 1]) / 2), py = yOf(chart, run.allocated[p]);
    if (inView(px)) {
      ctx.fillStyle = '#000';
      ctx.beginPath();
      ctx.arc(px, py, 4, 0, 2 * Math.PI);
      ctx.fill();
      ctx.font = 'bold 12px system-ui, sans-serif';
      ctx.textAlign = px > M.left + chart.W - 140 ? 'right' : 'left';
      ctx.fillText('peak ' + fmtBytes(run.allocated[p]), px + (ctx.textAlign === 'left' ? 7 : -7), py - 6);
      ctx.font = '11px system-ui, sans-serif';
    }
  }
}

function drawRunChart(chart) {
  const run = page.runs[chart.index], X = page.X[chart.index], ctx = chart.base.ctx;
  ctx.clearRect(0, 0, chart.width, chart.height);
  chart.ymax = page.ymax;
  chart.reps = columnPoints(run, X, page.view.x0, page.view.x1, chart.W);
  drawAxes(chart, ctx, page.ymax, fmtBytes);
  if (!run.n) {
    ctx.fillStyle = '#444';
    ctx.textAlign = 'left';
    ctx.fillText('No allocation events were recorded on ' + run.device +
      '. Call mg::record_history(true) before the step you want to see.', M.left + 10, M.top + 20);
    return;
  }
  drawStack(chart, ctx, run, chart.reps);
  drawMarks(chart, ctx, run, X);
}

// B minus A by category at each column (each run's own point there): gains stacked up, savings down.
function drawDiffChart(chart) {
  const ctx = chart.base.ctx, [A, B] = page.runs;
  chart.repsBy = page.charts.filter((c) => c.kind === 'run').map((c) => c.reps);
  const [ra, rb] = chart.repsBy;
  let max = 1;
  const diffs = [];
  for (let col = 0; col < chart.W; col++) {
    if (ra[col] < 0 || rb[col] < 0) { diffs.push(null); continue; }
    const d = A.cat.map((a, c) => B.cat[c][rb[col]] - a[ra[col]]);
    let up = 0, down = 0;
    for (const v of d) v > 0 ? up += v : down -= v;
    max = Math.max(max, up, down);
    diffs.push(d);
  }
  chart.ymax = max * 1.05;
  chart.diffs = diffs;
  ctx.clearRect(0, 0, chart.width, chart.height);
  drawAxes(chart, ctx, chart.ymax, (v) => (v > 0 ? '+' : '') + fmtBytes(v));
  for (let col = 0; col < chart.W; col++) {
    const d = diffs[col];
    if (!d) continue;
    let up = 0, down = 0;
    d.forEach((v, c) => {
      if (!v) return;
      ctx.fillStyle = COLORS[c];
      const from = v > 0 ? up : -down, to = from + v;
      v > 0 ? up += v : down -= v;
      const y1 = yOf(chart, Math.max(from, to)), y2 = yOf(chart, Math.min(from, to));
      ctx.fillRect(M.left + col, y1, 1, y2 - y1);
    });
  }
  ctx.fillStyle = '#222';
  ctx.textAlign = 'left';
  ctx.fillText('difference by category: ' + runLabel(1) + ' − ' + runLabel(0), M.left + 4, M.top - 14);
}

// What moves: the selected instant, the hovered column, and the hovered block's life and bytes.
function drawOverlay(chart) {
  const ctx = chart.over.ctx;
  ctx.clearRect(0, 0, chart.width, chart.height);
  const bottom = chart.y0 + (chart.kind === 'diff' ? chart.H : 0);
  if (page.selected) {
    const px = xToPx(chart, page.selected.x);
    if (px >= M.left && px <= M.left + chart.W) vline(ctx, Math.round(px), M.top, bottom, '#000', [2, 2]);
  }
  const h = page.hover;
  if (!h || h.chart !== chart) return;
  vline(ctx, M.left + h.col, M.top, bottom, 'rgba(0,0,0,.35)');
  if (h.block < 0) return;
  const run = page.runs[chart.index], X = page.X[chart.index], B = run.blocks;
  const a = Math.max(M.left, xToPx(chart, X[Math.max(0, B.start[h.block])]));
  const b = Math.min(M.left + chart.W, xToPx(chart, X[Math.min(run.n, B.end[h.block])]));
  ctx.fillStyle = 'rgba(255,255,255,.35)';
  ctx.fillRect(a, M.top, Math.max(1, b - a), chart.H);
  const y1 = yOf(chart, h.y1), y0 = yOf(chart, h.y0);
  ctx.strokeStyle = '#000';
  ctx.lineWidth = 2;
  ctx.strokeRect(M.left + h.col - 3, y1, 7, Math.max(1, y0 - y1));
  ctx.lineWidth = 1;
}
