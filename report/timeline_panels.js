// The memory timeline page, part 3 of 5: what the charts answer. Hover: the block under the cursor
// (its owner, category, op, bytes, life and what happened to it). Click: the breakdown by category
// and by owner at that instant (two runs side by side with their difference); the allocator's
// segments at that instant are part 4.

// The block of `chart` under (px, py): the column's point, the category band that holds the bytes
// at py, and in it the live blocks of that category stacked oldest first.
function hitTest(chart, px, py) {
  const col = Math.floor(px - M.left);
  if (col < 0 || col >= chart.W || !chart.reps) return null;
  const p = chart.reps[col];
  if (p < 0) return null;
  const run = page.runs[chart.index], v = (chart.y0 - py) / chart.H * chart.ymax;
  const hit = {chart, col, p, block: -1, y0: 0, y1: 0};
  if (v < 0 || v >= run.allocated[p]) return hit;
  let below = 0, c = 0;
  while (c < run.cat.length - 1 && v >= below + run.cat[c][p]) below += run.cat[c++][p];
  for (const l of liveAt(run, p)) {
    if (l.cat !== c) continue;
    const bytes = run.blocks.bytes[l.b];
    if (v < below + bytes) return Object.assign(hit, {block: l.b, y0: below, y1: below + bytes});
    below += bytes;
  }
  return hit;
}

function when(run, p, ev) {
  const ctx = context(run, p);
  return 'event #' + fmtInt(ev) + ' at ' + fmtMs(run.t[p] - run.t[0]) + (ctx ? ' (' + ctx + ')' : '');
}

function instantHtml(run, p) {
  return '<div class="muted">' + esc(when(run, p, run.ev[p])) + ': ' + fmtBytes(run.allocated[p]) +
    ' allocated, ' + fmtBytes(run.reserved[p]) + ' reserved</div>';
}

// Everything known about block b, seen from point p.
function blockHtml(run, b, p) {
  const B = run.blocks, C = run.changes, k = changeAt(run, b, p);
  const owner = run.strings[C.owner[k]] || '(no owner)', op = run.strings[B.op[b]];
  const rows = [
    '<div class="owner">' + esc(owner) + '</div>',
    '<div>' + esc(page.categories[C.cat[k]]) + (op ? ' · op ' + esc(op) : '') + '</div>',
    '<div>' + fmtBytes(B.bytes[b]) + ' (' + fmtInt(B.bytes[b]) + ' B; ' + fmtInt(B.requested[b]) +
      ' B requested)</div>',
    '<div>allocated: ' + (B.start[b] < 0 ? 'before the recording started' : esc(when(run, B.start[b], B.allocEv[b]))) +
      '</div>',
    '<div>freed: ' + (B.end[b] >= run.n ? 'still live at the end' : esc(when(run, B.end[b], B.freeEv[b]))) + '</div>',
  ];
  const end = b + 1 < run.nb ? B.change[b + 1] : C.point.length;
  if (end - B.change[b] > 1) {  // its categories and owners over its life
    const steps = [];
    for (let j = B.change[b]; j < end; j++)
      steps.push(esc(page.categories[C.cat[j]] + ' for ' + (run.strings[C.owner[j]] || '(no owner)')) +
        (C.point[j] >= 0 ? ' <span class="muted">from #' + fmtInt(run.ev[C.point[j]]) + '</span>' : ''));
    rows.push('<div>' + steps.join(' → ') + '</div>');
  }
  const flags = FLAGS.filter(([bit]) => B.flags[b] & bit).map(([, what]) => what);
  if (flags.length) rows.push('<div class="flags">' + flags.join('; ') + '</div>');
  return rows.join('');
}

function showTooltip(html, attrs, clientX, clientY) {
  const t = document.getElementById('tooltip');
  t.innerHTML = html;
  for (const a of [...t.attributes]) if (a.name.startsWith('data-')) t.removeAttribute(a.name);
  for (const [k, v] of Object.entries(attrs || {})) t.setAttribute('data-' + k, v);
  t.hidden = false;
  const w = t.offsetWidth, h = t.offsetHeight;
  t.style.left = Math.max(0, Math.min(clientX + 14, window.innerWidth - w - 8)) + 'px';
  t.style.top = Math.max(0, clientY + 14 + h > window.innerHeight ? clientY - h - 10 : clientY + 14) + 'px';
}
function hideTooltip() {
  document.getElementById('tooltip').hidden = true;
}

function hoverHtml(hit) {
  const run = page.runs[hit.chart.index];
  if (hit.block < 0) return [instantHtml(run, hit.p), {point: hit.p}];
  const B = run.blocks, k = changeAt(run, hit.block, hit.p);
  return [blockHtml(run, hit.block, hit.p) + instantHtml(run, hit.p),
    {point: hit.p, block: hit.block, owner: run.strings[run.changes.owner[k]], bytes: B.bytes[hit.block]}];
}

function diffHtml(chart, col) {
  const d = chart.diffs && chart.diffs[col];
  if (!d) return null;
  const [A, B] = page.runs, [ra, rb] = chart.repsBy;
  let rows = '';
  d.forEach((v, c) => { if (v) rows += '<div>' + esc(page.categories[c]) + ': ' + fmtSigned(v) + '</div>'; });
  return '<div class="owner">' + esc(runLabel(1)) + ' − ' + esc(runLabel(0)) + '</div>' +
    (rows || '<div>no difference</div>') +
    '<div>allocated: ' + fmtSigned(B.allocated[rb[col]] - A.allocated[ra[col]]) + '</div>' +
    instantHtml(A, ra[col]) + instantHtml(B, rb[col]);
}

// ---- the breakdown at an instant

function bytesCell(v, role, run, signed) {
  const attrs = (role ? ' data-role="' + role + '" data-run="' + run + '"' : '') + ' data-bytes="' + v + '"';
  const cls = signed && v ? (v < 0 ? ' class="neg"' : ' class="pos"') : '';
  return '<td' + attrs + cls + ' title="' + fmtInt(v) + ' B">' + (signed ? fmtSigned(v) : fmtBytes(v)) + '</td>';
}
function swatch(c) {
  return '<span class="sw" style="background:' + COLORS[c] + '"></span>';
}
function checkLine(bds) {
  const ok = bds.every((bd) => bd.agrees);
  return '<p class="check ' + (ok ? 'ok' : 'bad') + '" data-role="check">' + (ok
    ? '✓ The live blocks sum to the ledger\'s allocated bytes, category by category.'
    : '✗ The live blocks do not sum to the ledger\'s bytes: this page is wrong, please report it.') + '</p>';
}

function detailsRun(ri, p) {
  const run = page.runs[ri], bd = breakdown(run, p);
  let cats = '<table><tr><th>Category</th><th>Bytes</th><th>Share</th></tr>';
  bd.cats.forEach((v, c) => {
    cats += '<tr data-category="' + esc(page.categories[c]) + '"><td>' + swatch(c) + esc(page.categories[c]) + '</td>' +
      bytesCell(v) + '<td>' + (bd.ledger ? (100 * v / bd.ledger).toFixed(1) : '0.0') + ' %</td></tr>';
  });
  cats += '<tr class="total"><td>Total</td>' + bytesCell(bd.cats.reduce((a, b) => a + b, 0), 'cat-total', ri) +
    '<td></td></tr></table>';
  let owners = '<div class="scroll"><table><tr><th>Owner (' + bd.owners.length + ')</th><th>Bytes</th><th>Blocks</th></tr>';
  for (const o of bd.owners)
    owners += '<tr data-owner="' + esc(o.name) + '"><td class="owner" title="' + esc(o.name) + '">' + esc(o.name) +
      '</td>' + bytesCell(o.bytes) + '<td>' + o.blocks + '</td></tr>';
  owners += '<tr class="total"><td>Sum of owners</td>' + bytesCell(bd.ownerSum, 'owner-total', ri) + '<td>' +
    bd.blocks + '</td></tr></table></div>';
  return '<h2>At ' + esc(when(run, p, run.ev[p])) + '</h2>' +
    '<p>allocated <b>' + fmtBytes(bd.ledger) + '</b> (<span data-role="ledger" data-run="' + ri + '" data-bytes="' +
    bd.ledger + '">' + fmtInt(bd.ledger) + ' B</span>, the ledger\'s), reserved ' + fmtBytes(run.reserved[p]) + ', ' +
    plural(bd.blocks, 'live block') + '</p><div class="tables">' + cats + owners + '</div>' + checkLine([bd]);
}

// "A (none.json)": how tables and charts name a run when two are compared.
function runLabel(i) {
  const run = page.runs[i];
  return (i ? 'B' : 'A') + (run.source ? ' (' + run.source + ')' : '');
}

// A table of rows (name, A bytes, B bytes) with their difference, sorted as given.
function diffTable(title, rows, totalRoles) {
  let h = '<table><tr><th>' + title + '</th><th>' + esc(runLabel(0)) + '</th><th>' + esc(runLabel(1)) +
    '</th><th>B − A</th></tr>';
  for (const [name, a, b, pre, attr] of rows)
    h += '<tr ' + (attr || '') + '><td>' + (pre || '') + esc(name) + '</td>' + bytesCell(a) + bytesCell(b) +
      bytesCell(b - a, null, null, true) + '</tr>';
  if (totalRoles) {
    const ta = rows.reduce((s, r) => s + r[1], 0), tb = rows.reduce((s, r) => s + r[2], 0);
    h += '<tr class="total"><td>Total</td>' + bytesCell(ta, totalRoles, 0) + bytesCell(tb, totalRoles, 1) +
      bytesCell(tb - ta, null, null, true) + '</tr>';
  }
  return h + '</table>';
}

function detailsCompare(pa, pb) {
  const [A, B] = page.runs, ba = breakdown(A, pa), bb = breakdown(B, pb);
  const cats = page.categories.map((name, c) => [name, ba.cats[c], bb.cats[c], swatch(c),
    'data-category="' + esc(name) + '"']);
  const names = new Map();
  for (const o of ba.owners) names.set(o.name, [o.name, o.bytes, 0]);
  for (const o of bb.owners) (names.get(o.name) || names.set(o.name, [o.name, 0, 0]).get(o.name))[2] = o.bytes;
  const owners = [...names.values()].sort((x, y) => Math.abs(y[2] - y[1]) - Math.abs(x[2] - x[1]) || (x[0] < y[0] ? -1 : 1))
    .map((r) => r.concat(['', 'data-owner="' + esc(r[0]) + '"']));
  const ledgers = [[A, pa, ba], [B, pb, bb]].map(([run, p, bd], ri) => '<p>' + esc(runLabel(ri)) + ': ' +
    esc(when(run, p, run.ev[p])) + ', allocated <span data-role="ledger" data-run="' + ri + '" data-bytes="' +
    bd.ledger + '">' + fmtInt(bd.ledger) + ' B</span> (' + fmtBytes(bd.ledger) + '), owners sum to <span ' +
    'data-role="owner-total" data-run="' + ri + '" data-bytes="' + bd.ownerSum + '">' + fmtInt(bd.ownerSum) +
    ' B</span></p>').join('');
  return '<h2>At the selected instant: the difference by category and by owner</h2>' + ledgers +
    '<div class="tables">' + diffTable('Category', cats, 'cat-total') + '<div class="scroll">' +
    diffTable('Owner (' + owners.length + ')', owners, null) + '</div></div>' + checkLine([ba, bb]);
}

// Two runs: each one's peak by category, and the difference.
function compareSummary() {
  const [A, B] = page.runs;
  if (A.peak < 0 || B.peak < 0) return '';
  const rows = page.categories.map((name, c) => [name, A.cat[c][A.peak], B.cat[c][B.peak], swatch(c)]);
  const ra = maxOf(A.reserved), rb = maxOf(B.reserved);
  return '<h3>Difference by category, each at its own peak</h3>' + diffTable('Category', rows, 'peak-total') +
    '<p>Reserved at the most: ' + fmtBytes(ra) + ' and ' + fmtBytes(rb) + ' (' + fmtSigned(rb - ra) + ').</p>';
}
