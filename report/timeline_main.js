// The memory timeline page, part 5 of 5: the page itself. Its state, the header, zoom and pan on a
// shared x axis, hover and click, and a hook that tests/browser uses to hover and click like a user.

const page = {
  categories: [], runs: [], axis: 'event', X: [], full: {x0: 0, x1: 1}, view: {x0: 0, x1: 1}, ymax: 1,
  charts: [], hover: null, selected: null,
};

function setAxis(axis) {
  page.axis = axis;
  page.X = page.runs.map((r) => positions(r, axis));
  const x0 = Math.min(...page.X.map((X) => X[0])), x1 = Math.max(...page.runs.map((r, i) => page.X[i][r.n]));
  page.full = {x0, x1: x1 > x0 ? x1 : x0 + 1};
  page.view = Object.assign({}, page.full);
  if (page.selected) {
    const [p] = page.selected.points, X = page.X[0];
    page.selected.x = (X[p] + X[p + 1]) / 2;
  }
  drawAll();
}

function buildCharts() {
  const host = document.getElementById('charts'), compare = page.runs.length > 1;
  host.innerHTML = '';
  const width = Math.max(700, Math.min(1800, document.documentElement.clientWidth - 44));
  page.charts = page.runs.map((r, i) => makeChart(host, 'run', i, width, compare ? 290 : 400,
    compare ? runLabel(i) + ': ' + r.title : ''));
  if (compare) page.charts.push(makeChart(host, 'diff', -1, width, 220, ''));
  page.charts.forEach(attachEvents);
}

function drawAll() {
  for (const c of page.charts) if (c.kind === 'run') drawRunChart(c);
  for (const c of page.charts) if (c.kind === 'diff') drawDiffChart(c);  // from the runs' columns
  page.charts.forEach(drawOverlay);
  const {x0, x1} = page.view, unit = {event: 'events', time: 'ms', step: 'steps'}[page.axis];
  document.getElementById('range').textContent = x0 === page.full.x0 && x1 === page.full.x1 ? ''
    : 'showing ' + (page.axis === 'event' ? fmtInt(x0) + '–' + fmtInt(x1) : x0.toFixed(2) + '–' + x1.toFixed(2)) +
      ' ' + unit;
}

function setView(x0, span) {
  const full = page.full.x1 - page.full.x0, maxN = Math.max(1, ...page.runs.map((r) => r.n));
  span = Math.max(full * Math.min(1, 10 / maxN), Math.min(full, span));
  x0 = Math.max(page.full.x0, Math.min(page.full.x1 - span, x0));
  page.view = {x0, x1: x0 + span};
  drawAll();
}

function columnX(chart, col) {
  return page.view.x0 + (col + 0.5) / chart.W * (page.view.x1 - page.view.x0);
}

// The instant under column `col`: each run's point drawn there (or the nearest one).
function select(chart, col) {
  const x = columnX(chart, col), points = page.runs.map((run, i) => {
    const rep = page.charts[i].reps ? page.charts[i].reps[col] : -1, X = page.X[i];
    return rep >= 0 ? rep : x < X[0] ? 0 : x >= X[run.n] ? run.n - 1 : pointAt(X, run.n, x);
  });
  showInstant(x, points);
}

function showInstant(x, points) {
  page.selected = {x, points};
  const details = document.getElementById('details'), segs = document.getElementById('segments');
  if (page.runs.some((r) => !r.n)) return;
  details.innerHTML = page.runs.length > 1 ? detailsCompare(points[0], points[1]) : detailsRun(0, points[0]);
  segs.innerHTML = '';
  page.runs.forEach((r, i) => renderSegments(segs, i, points[i]));
  page.charts.forEach(drawOverlay);
}

function hover(chart, px, py, cx, cy) {
  const col = Math.floor(px - M.left), last = page.hover && page.hover.chart;
  page.hover = null;
  if (col >= 0 && col < chart.W) {
    if (chart.kind === 'diff') {
      const html = diffHtml(chart, col);
      page.hover = {chart, col, block: -1};
      html ? showTooltip(html, {}, cx, cy) : hideTooltip();
    } else {
      const hit = hitTest(chart, px, py);
      if (hit) {
        page.hover = hit;
        const [html, attrs] = hoverHtml(hit);
        showTooltip(html, attrs, cx, cy);
      }
    }
  }
  if (!page.hover) hideTooltip();
  if (last && last !== chart) drawOverlay(last);
  drawOverlay(chart);
}

function attachEvents(chart) {
  const el = chart.over.canvas;
  let drag = null, dragged = false;
  const local = (e) => {
    const r = el.getBoundingClientRect();
    return [e.clientX - r.left, e.clientY - r.top];
  };
  el.addEventListener('mousemove', (e) => {
    const [px, py] = local(e);
    if (drag && e.buttons & 1) {
      if (Math.abs(px - drag.px) > 3) dragged = true;
      if (dragged) return setView(drag.x0 - (px - drag.px) / chart.W * (drag.x1 - drag.x0), drag.x1 - drag.x0);
    }
    hover(chart, px, py, e.clientX, e.clientY);
  });
  el.addEventListener('mousedown', (e) => {
    drag = {px: local(e)[0], x0: page.view.x0, x1: page.view.x1};
    dragged = false;
  });
  el.addEventListener('mouseup', () => { drag = null; });
  el.addEventListener('click', (e) => {
    if (dragged) return void (dragged = false);
    select(chart, Math.floor(local(e)[0] - M.left));
  });
  el.addEventListener('mouseleave', () => {
    drag = null;
    page.hover = null;
    hideTooltip();
    drawOverlay(chart);
  });
  el.addEventListener('wheel', (e) => {
    e.preventDefault();
    const x = columnX(chart, local(e)[0] - M.left), f = Math.exp(e.deltaY * 0.0015), {x0, x1} = page.view;
    setView(x - (x - x0) * f, (x1 - x0) * f);
  }, {passive: false});
  el.addEventListener('dblclick', () => setView(page.full.x0, page.full.x1 - page.full.x0));
}

function summaryHtml(run, i) {
  const compare = page.runs.length > 1, count = (k) => run.marks.filter((m) => m.kind === k).length;
  let h = compare ? '<p><b>' + (i ? 'B' : 'A') + ': ' + esc(run.title) + '</b>' +
    (run.source ? ' <span class="muted">(' + esc(run.source) + ')</span>' : '') + '</p>'
    : run.source ? '<p class="muted">from ' + esc(run.source) + '</p>' : '';
  if (!run.n) return h + '<p>No allocation events were recorded on ' + esc(run.device) + '.</p>';
  h += '<p>' + esc(run.device) + ': ' + fmtInt(run.events) + ' events recorded over ' + fmtMs(run.t[run.n - 1] - run.t[0]) +
    ', ' + fmtInt(run.n) + ' of them changing the ledger' + (run.steps.length ? ', ' + plural(run.steps.length, 'step') : '') +
    '. Peak <b>' + fmtBytes(run.allocated[run.peak]) + '</b> allocated at ' + esc(when(run, run.peak, run.ev[run.peak])) +
    '; reserved at most ' + fmtBytes(maxOf(run.reserved)) +
    (run.limit ? '; memory limit ' + fmtBytes(run.limit) : '') + '.</p>';
  if (run.before)
    h += '<p class="muted">' + fmtBytes(run.before) + ' were allocated before the recording started; their blocks ' +
      'are known from the allocator\'s layout at the end.</p>';
  const ooms = run.marks.filter((m) => m.kind === 'oom');
  if (ooms.length) h += '<p class="pos">' + ooms.map((m) => esc(m.text)).join('; ') + '</p>';
  if (BUDGET_KINDS.some(count))
    h += '<p>Memory budget: ' + count('evict') + ' evictions, ' + count('remat') + ' rematerializations, ' +
      count('offload') + ' offloads, ' + count('fetch') + ' fetches (ticks under the chart).</p>';
  return h;
}

function buildHeader() {
  const summary = document.getElementById('summary');
  summary.innerHTML = page.runs.map(summaryHtml).join('') + (page.runs.length > 1 ? compareSummary() : '');
  const legend = page.categories.map((c, i) => '<span>' + swatch(i) + esc(c) + '</span>').join('') +
    '<span>╌ reserved</span>' + Object.entries(PHASES).map(([name, color]) =>
    '<span><span class="sw" style="background:' + color + '"></span>' + name + '</span>').join('');
  document.getElementById('legend').innerHTML = legend;
  const axis = document.getElementById('axis'), steps = page.runs.every((r) => r.steps.length);
  const options = [['event', 'events'], ['time', 'time (ms)']].concat(steps ? [['step', 'steps, aligned']] : []);
  axis.innerHTML = options.map(([v, t]) => '<option value="' + v + '">' + t + '</option>').join('');
  axis.value = page.runs.length > 1 && steps ? 'step' : 'event';
  axis.addEventListener('change', () => setAxis(axis.value));
  document.getElementById('reset').addEventListener('click', () => setView(page.full.x0, page.full.x1 - page.full.x0));
}

// tests/browser drives the page as a user would, through the location's hash, one step after the
// other: #selftest=hover:EVENT,click:peak
//   hover:EVENT  zooms in on the point of history event EVENT (run A's) and moves the mouse over
//                the middle of its block's category band there (by the ledger's bytes)
//   click:peak   zooms in on run A's peak (click:EVENT: on that event's point) and clicks there
//   view:full    zooms out again
//   mouse:X/Y    moves the mouse to (X, Y) on run A's chart (for screenshots)
function selfTest(spec) {
  const chart = page.charts[0], run = page.runs[0], X = page.X[0];
  const pointOf = (ev) => {
    const p = run.ev.indexOf(Number(ev));
    if (p < 0) throw new Error('selftest: event ' + ev + ' changes no ledger point of ' + run.title);
    return p;
  };
  const aim = (p) => {  // zooms to p and returns the middle column of its span
    setView(X[Math.max(0, p - 20)], X[Math.min(run.n, p + 21)] - X[Math.max(0, p - 20)]);
    const cols = [];
    chart.reps.forEach((q, col) => { if (q === p) cols.push(col); });
    return cols[cols.length >> 1];
  };
  const fire = (type, px, py) => {
    const r = chart.over.canvas.getBoundingClientRect();
    chart.over.canvas.dispatchEvent(new MouseEvent(type, {clientX: r.left + px, clientY: r.top + py, bubbles: true}));
  };
  for (const [what, arg] of spec.split(',').map((kv) => kv.split(':'))) {
    if (what === 'hover') {
      const p = pointOf(arg), col = aim(p);
      const b = liveAt(run, p).find((l) => run.blocks.allocEv[l.b] === Number(arg));
      if (!b) throw new Error('selftest: event ' + arg + ' allocates no block');
      let below = 0;
      for (let c = 0; c < b.cat; c++) below += run.cat[c][p];
      fire('mousemove', M.left + col + 0.5, yOf(chart, below + run.cat[b.cat][p] / 2));
    } else if (what === 'click') {
      fire('click', M.left + aim(arg === 'peak' ? run.peak : pointOf(arg)) + 0.5, M.top + 5);
    } else if (what === 'view') {
      setView(page.full.x0, page.full.x1 - page.full.x0);
    } else if (what === 'mouse') {
      fire('mousemove', ...arg.split('/').map(Number));
    } else {
      throw new Error('selftest: unknown step ' + what);
    }
  }
  document.body.dataset.selftest = 'done';
}

function main() {
  const data = JSON.parse(document.getElementById('mg-data').textContent);
  page.categories = data.categories;
  page.runs = data.runs.map(decodeRun);
  page.ymax = Math.max(1, ...page.runs.map((r) => Math.max(maxOf(r.allocated), maxOf(r.reserved)))) * 1.08;
  buildHeader();
  buildCharts();
  setAxis(document.getElementById('axis').value);
  renderSegmentMaps();
  const first = page.runs[0];
  if (first.n) {  // the peak of run A, and each other run's own peak
    const X = page.X[0];
    showInstant((X[first.peak] + X[first.peak + 1]) / 2, page.runs.map((r) => r.peak));
  }
  let resize = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resize);
    resize = setTimeout(() => { buildCharts(); drawAll(); }, 150);
  });
  document.body.dataset.readyMs = performance.now().toFixed(0);  // since the browser began loading the page
  document.body.dataset.ready = '1';
  const hash = decodeURIComponent(location.hash);
  if (hash.startsWith('#selftest=')) selfTest(hash.slice('#selftest='.length));
}

main();
