// The memory timeline page, part 1 of 5: its data. report/timeline_data.cpp writes it (the
// fields are listed there); here it becomes typed arrays, with the questions the page asks of it:
// which blocks are live at a point, in which category and for which owner, and the breakdowns.

const FLAGS = [  // bit, what it says about a block (timeline_data.cpp's kFlag*)
  [1, 'saved for backward (an Activation)'],
  [2, 'made by a recompute (its owner is under "recompute": a checkpoint segment\'s backward)'],
  [4, 'evicted by the memory budget'],
  [8, 'offloaded to host memory'],
  [16, 'rematerialized by the memory budget'],
  [32, 'fetched back from host memory'],
];
const PHASES = {forward: '#9ecae1', backward: '#fdae6b', optimizer: '#a1d99b'};
const BUDGET_KINDS = ['evict', 'remat', 'offload', 'fetch'];

// Running sums of an array of differences.
function sums(deltas) {
  const r = new Float64Array(deltas.length);
  let v = 0;
  for (let i = 0; i < deltas.length; i++) r[i] = v += deltas[i];
  return r;
}

function decodeRun(raw) {
  const P = raw.points, B = raw.blocks, C = raw.changes, S = raw.segments, M = raw.marks, W = raw.maps;
  const run = {
    title: raw.title, source: raw.source, device: raw.device, limit: raw.limit, events: raw.events,
    before: raw.before, peak: raw.peak, strings: raw.strings, fragmentation: raw.fragmentation,
    n: P.ev.length, ev: sums(P.ev), t: sums(P.t), allocated: sums(P.allocated), reserved: sums(P.reserved),
    cat: P.cat.map(sums),
    nb: B.start.length,
    blocks: {
      start: Int32Array.from(B.start), end: Int32Array.from(B.end), bytes: Float64Array.from(B.bytes),
      carved: Float64Array.from(B.carved),
      requested: Float64Array.from(B.requested), op: Int32Array.from(B.op), flags: Int32Array.from(B.flags),
      seg: Int32Array.from(B.seg), offset: Float64Array.from(B.offset), allocEv: Float64Array.from(B.alloc_ev),
      freeEv: Float64Array.from(B.free_ev), change: Int32Array.from(B.change),
    },
    changes: {
      point: Int32Array.from(C.point), cat: Int32Array.from(C.cat), owner: Int32Array.from(C.owner),
    },
    segments: {
      start: Int32Array.from(S.start), end: Int32Array.from(S.end), startEv: Float64Array.from(S.start_ev),
      endEv: Float64Array.from(S.end_ev), size: Float64Array.from(S.size), small: S.small.map(Boolean),
      expandable: S.expandable.map(Boolean), address: S.address, extra: S.extra, deviceExtra: S.device_extra,
    },
    maps: {
      seg: Int32Array.from(W.seg), ev: Float64Array.from(W.ev), offset: Float64Array.from(W.offset),
      bytes: Float64Array.from(W.bytes), on: W.on.map(Boolean),
    },
    marks: M.pos.map((pos, i) => ({pos, ev: M.ev[i], kind: M.kind[i], text: raw.strings[M.text[i]], bytes: M.bytes[i],
      forensics: M.forensics[i] >= 0 ? raw.forensics[M.forensics[i]] : null})),
  };
  run.steps = run.marks.filter((m) => m.kind === 'step');
  run.phases = phaseSpans(run);
  return run;
}

// Phases run from their mark to the next phase or step mark (or the end).
function phaseSpans(run) {
  const spans = [];
  let open = null;
  for (const m of run.marks) {
    if (m.kind !== 'phase' && m.kind !== 'step') continue;
    if (open) open.to = m.pos;
    open = null;
    if (m.kind === 'phase') spans.push(open = {name: m.text, from: m.pos, to: run.n});
  }
  return spans;
}

// The step and phase a point belongs to, as "step 3 · backward".
function context(run, p) {
  let step = '', phase = '';
  for (const m of run.steps) if (m.pos <= p) step = m.text;
  for (const s of run.phases) if (s.from <= p && p < s.to) phase = s.name;
  return [step, phase].filter(Boolean).join(' · ');
}

// The entry of `changes` that holds block b's category and owner at point p.
function changeAt(run, b, p) {
  const first = run.blocks.change[b], end = b + 1 < run.nb ? run.blocks.change[b + 1] : run.changes.point.length;
  let k = first;
  while (k + 1 < end && run.changes.point[k + 1] <= p) k++;
  return k;
}

// Blocks live at point p (in the order they are stacked: oldest first), with category and owner.
function liveAt(run, p) {
  const B = run.blocks, C = run.changes, live = [];
  for (let b = 0; b < run.nb; b++) {
    if (B.start[b] > p || p >= B.end[b]) continue;
    const k = changeAt(run, b, p);
    live.push({b, cat: C.cat[k], owner: run.strings[C.owner[k]]});
  }
  return live;
}

// Bytes by category (the ledger's, as recorded) and by owner (the live blocks') at point p.
function breakdown(run, p) {
  const owners = new Map(), blockCats = new Float64Array(run.cat.length);
  let blockSum = 0;
  const live = liveAt(run, p);
  for (const l of live) {
    const bytes = run.blocks.bytes[l.b], name = l.owner || '(no owner)';
    const o = owners.get(name) || {name, bytes: 0, blocks: 0};
    o.bytes += bytes;
    o.blocks++;
    owners.set(name, o);
    blockSum += bytes;
    blockCats[l.cat] += bytes;
  }
  const cats = run.cat.map((a) => a[p]);
  const ownerList = [...owners.values()].sort((a, b) => b.bytes - a.bytes || (a.name < b.name ? -1 : 1));
  const agrees = blockSum === run.allocated[p] && cats.every((v, c) => v === blockCats[c]);
  return {p, cats, owners: ownerList, ownerSum: blockSum, ledger: run.allocated[p], blocks: live.length, agrees};
}

// The x position of every point under an axis: point i spans [X[i], X[i + 1]).
//   event: its event's number in the history (the events between two points, such as segments
//   and annotations, fall in the span of the first); time: milliseconds since the first point;
//   step: step k spans [k, k + 1) (the points before the first step mark span [-1, 0)), so that
//   two runs line up step by step.
function positions(run, axis) {
  const n = run.n, X = new Float64Array(n + 1);
  if (axis === 'time' && n) {
    for (let i = 0; i < n; i++) X[i] = (run.t[i] - run.t[0]) / 1e6;
    X[n] = X[n - 1] + Math.max(X[n - 1] / n, 1e-6);
  } else if (axis === 'step' && run.steps.length) {
    const starts = run.steps.map((m) => m.pos), bounds = starts.concat([n]);
    for (let i = 0; i < starts[0]; i++) X[i] = -1 + i / starts[0];
    for (let k = 0; k < starts.length; k++)
      for (let i = starts[k]; i < bounds[k + 1]; i++) X[i] = k + (i - starts[k]) / (bounds[k + 1] - starts[k]);
    X[n] = starts.length;
  } else {
    for (let i = 0; i < n; i++) X[i] = run.ev[i];
    X[n] = n ? run.ev[n - 1] + 1 : 0;
  }
  return X;
}

// The point whose span holds x, or -1.
function pointAt(X, n, x) {
  if (!n || x < X[0] || x >= X[n]) return -1;
  let lo = 0, hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (X[mid] <= x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// For each of W columns of the view [x0, x1), the point drawn there: the one with the most bytes
// allocated among those it covers, so that no peak disappears when many points share a column.
function columnPoints(run, X, x0, x1, W) {
  const reps = new Int32Array(W).fill(-1), n = run.n, dx = (x1 - x0) / W, a = run.allocated;
  let i = Math.max(0, pointAt(X, n, x0));
  for (let col = 0; col < W; col++) {
    const xa = x0 + col * dx, xb = xa + dx;
    if (!n || xb <= X[0] || xa >= X[n]) continue;
    while (i < n - 1 && X[i + 1] <= xa) i++;
    let best = -1, j = i;
    for (; j < n && X[j] < xb; j++) if (X[j + 1] > xa && (best < 0 || a[j] > a[best])) best = j;
    if (best < 0 && X[i] <= xa) best = i;
    reps[col] = best;
    i = Math.max(i, j - 1);
  }
  return reps;
}

// The largest entry of an array (spreading 100k entries into Math.max overflows the stack).
function maxOf(a) {
  let m = -Infinity;
  for (let i = 0; i < a.length; i++) if (a[i] > m) m = a[i];
  return m;
}

// ---- numbers as text

function fmtBytes(v) {  // as memgrad's format_bytes: "1.50 MiB"
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let m = Math.abs(v), u = 0;
  while (m >= 1024 && u < 6) m /= 1024, u++;
  return (v < 0 ? '-' : '') + (u ? m.toFixed(2) + ' ' + units[u] : m + ' B');
}
function fmtInt(v) {
  return Math.round(v).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}
function plural(n, word) {  // "1 step", "3 steps"
  return fmtInt(n) + ' ' + word + (n === 1 ? '' : 's');
}
function fmtSigned(v) {
  return (v > 0 ? '+' : '') + fmtBytes(v);
}
function fmtMs(ns) {
  return (ns / 1e6).toFixed(3) + ' ms';
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'})[c]);
}
