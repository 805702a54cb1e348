// The memory timeline page, part 4 of 5: the allocator's segments at an instant. Each segment is a
// bar of its blocks (coloured by category, as the allocator carved them), its holes (free blocks, in
// white) and, in an expandable segment, its pages not mapped (hatched). Above the bars, each pool's
// free bytes by hole size. The page draws this map at the peak and at the first out-of-memory
// error, whose forensics (why the cache could not serve the request) outline the live blocks that
// split the room it needed; a click on the charts draws it at that instant.

// Each expandable segment's mapped ranges [from, to) (offsets) after history event E, merged where
// they touch.
function mappedAt(run, E) {
  const M = run.maps, r = new Map();
  for (let k = 0; k < M.seg.length && M.ev[k] <= E; k++) {  // in the order they happened
    if (!r.has(M.seg[k])) r.set(M.seg[k], []);
    const list = r.get(M.seg[k]), a = M.offset[k], b = a + M.bytes[k];
    if (M.on[k]) {
      list.push([a, b]);
    } else {  // unmapped: cut [a, b) out of the range that holds it
      const i = list.findIndex(([x, y]) => x <= a && b <= y);
      if (i < 0) continue;
      const [x, y] = list[i];
      list.splice(i, 1, ...[[x, a], [b, y]].filter(([u, v]) => v > u));
    }
  }
  for (const [s, list] of r) {
    list.sort((p, q) => p[0] - q[0]);
    const merged = [];
    for (const [a, b] of list)
      if (merged.length && merged[merged.length - 1][1] === a) merged[merged.length - 1][1] = b; else merged.push([a, b]);
    r.set(s, merged);
  }
  return r;
}

// The segments live after history event E, with the blocks live at point p (the last point at or
// before E): per segment its mapped ranges, its extent (up to its last mapped byte), its blocks by
// offset and its holes [offset, bytes] (mapped bytes no block holds: the allocator's free blocks).
function segmentLayout(run, p, E) {
  const S = run.segments, B = run.blocks, segs = new Map(), mapped = mappedAt(run, E);
  for (let s = 0; s < S.start.length; s++)
    if (S.startEv[s] <= E && (S.endEv[s] < 0 || E < S.endEv[s])) segs.set(s, {s, blocks: [], used: 0});
  for (const l of liveAt(run, p)) {
    const g = segs.get(B.seg[l.b]);
    if (g) g.blocks.push(l), g.used += B.bytes[l.b];
  }
  const list = [...segs.values()];
  for (const g of list) {
    g.blocks.sort((a, b) => B.offset[a.b] - B.offset[b.b]);
    g.ranges = S.expandable[g.s] ? mapped.get(g.s) || [] : [[0, S.size[g.s]]];
    g.extent = g.ranges.length ? g.ranges[g.ranges.length - 1][1] : 0;
    g.mapped = g.ranges.reduce((n, [a, b]) => n + b - a, 0);
    g.holes = [];
    let i = 0;
    for (const [a, b] of g.ranges) {
      let at = a;
      for (; i < g.blocks.length && B.offset[g.blocks[i].b] < b; i++) {
        const o = B.offset[g.blocks[i].b];
        if (o > at) g.holes.push([at, o - at]);
        at = Math.max(at, o + B.carved[g.blocks[i].b]);
      }
      if (b > at) g.holes.push([at, b - at]);
    }
    g.gap = g.holes.reduce((m, h) => Math.max(m, h[1]), 0);
  }
  return list.sort((a, b) => S.small[a.s] - S.small[b.s] || b.extent - a.extent || a.s - b.s);
}

// Per pool (small, large): segments, bytes held, free bytes, the largest hole, and the free bytes by
// hole size (powers of two, as the allocator's forensics count them).
function poolStats(run, list) {
  return [true, false].map((small) => {
    const st = {small, segments: 0, reserved: 0, free: 0, largest: 0, bins: new Map()};
    for (const g of list) {
      if (run.segments.small[g.s] !== small) continue;
      st.segments++;
      st.reserved += g.mapped;
      for (const [, n] of g.holes) {
        let from = 1;
        while (from <= n / 2) from *= 2;
        const bin = st.bins.get(from) || {from, holes: 0, bytes: 0};
        bin.holes++, bin.bytes += n;
        st.bins.set(from, bin);
        st.free += n, st.largest = Math.max(st.largest, n);
      }
    }
    return st;
  });
}

function fmtPow2(v) {  // "512 KiB", as HoleSizeBin::range()
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let u = 0;
  while (v >= 1024 && u < 6) v /= 1024, u++;
  return v + ' ' + units[u];
}

function poolTable(stats) {
  let h = '<table class="pools"><tr><th>Pool</th><th>Segments</th><th>Reserved</th><th>Free</th><th>Largest hole</th>' +
    '<th>Free bytes by hole size</th></tr>';
  for (const st of stats) {
    const pool = st.small ? 'small' : 'large', attr = (role) => ' data-role="' + role + '" data-pool="' + pool + '"';
    const bins = [...st.bins.values()].sort((a, b) => a.from - b.from).map((b) => '<span' + attr('hole-bin') +
      ' data-from="' + b.from + '" data-bytes="' + b.bytes + '">' + fmtPow2(b.from) + '–' + fmtPow2(2 * b.from) + ': ' +
      plural(b.holes, 'hole') + ', ' + fmtBytes(b.bytes) + '</span>').join('; ');
    h += '<tr><td>' + pool + '</td><td>' + st.segments + '</td>' + bytesCell(st.reserved) +
      '<td' + attr('free-bytes') + ' data-bytes="' + st.free + '">' + fmtBytes(st.free) + '</td>' +
      '<td' + attr('largest-hole') + ' data-bytes="' + st.largest + '">' + fmtBytes(st.largest) + '</td>' +
      '<td class="bins">' + (bins || '—') + '</td></tr>';
  }
  return h + '</table>';
}

// What the forensics of an out-of-memory error say: the reason, and the live blocks that split the
// room the request needed.
function forensicsHtml(f) {
  let h = '<p class="reason" data-role="oom-reason">Why the cache could not serve ' + fmtBytes(f.request) + ' (' +
    f.pool + ' pool): ' + esc(f.reason) + '.</p>';
  const fits = [['after empty_cache()', f.fits_after_empty_cache],
    ['with the ' + (f.pool === 'small' ? 'large' : 'small') + ' pool\'s cached bytes returned too', f.fits_with_other_pool],
    ['with expandable segments', f.fits_expandable]];
  h += '<p class="muted">Would it fit under the limit? ' + fits.map(([w, y]) => w + ': ' + (y ? 'yes' : 'no')).join('; ') +
    '.</p>';
  for (const s of f.split_holes) {
    h += '<p>' + fmtBytes(s.free_bytes) + ' free in ' + fmtBytes(s.size) + ' at ' + hexAddress(s.address) +
      ' (holes up to ' + fmtBytes(s.largest_hole) + '), split by these live blocks (outlined in red):</p><ul>';
    for (const b of s.pinning)
      h += '<li data-role="pinning" data-owner="' + esc(b.owner) + '" data-bytes="' + b.size + '" data-address="' +
        hexAddress(b.address) + '">' + esc(b.owner || '(no owner)') + ' · ' + esc(b.category) + (b.op ? ' · op ' + esc(b.op) : '') +
        ' · ' + fmtBytes(b.size) + ' at ' + hexAddress(b.address) + '</li>';
    h += '</ul>';
  }
  return h;
}

function hexAddress(a) {
  return '0x' + BigInt(a).toString(16);
}

function extraHtml(obj) {
  const keys = Object.keys(obj || {});
  return keys.length ? '<dl class="extra">' + keys.map((k) => '<dt>' + esc(k) + '</dt><dd>' +
    esc(JSON.stringify(obj[k])) + '</dd>').join('') + '</dl>' : '';
}

const HATCH = (ctx) => {  // unmapped pages of an expandable segment
  const c = document.createElement('canvas');
  c.width = c.height = 6;
  const x = c.getContext('2d');
  x.strokeStyle = '#bbb';
  x.beginPath();
  x.moveTo(0, 6);
  x.lineTo(6, 0);
  x.stroke();
  return ctx.createPattern(c, 'repeat');
};

// Draws the segments of run `ri` at point p (history event opts.E, default the point's) into `host`.
// opts: title, when (a data-when for tests: "peak", "oom", "click"), forensics (an oom's).
function renderSegments(host, ri, p, opts) {
  opts = opts || {};
  const run = page.runs[ri], S = run.segments, B = run.blocks, E = opts.E === undefined ? run.ev[p] : opts.E;
  const list = segmentLayout(run, p, E), stats = poolStats(run, list), f = opts.forensics;
  const pinned = new Set(f ? f.blocks : []);  // the pinning blocks, as the page's block numbers
  const reserved = list.reduce((a, g) => a + g.mapped, 0), used = list.reduce((a, g) => a + g.used, 0);
  const expandable = list.filter((g) => S.expandable[g.s]).length;
  const sec = document.createElement('div');
  sec.className = 'segview';
  sec.dataset.when = opts.when || 'click';
  sec.dataset.run = ri;
  const name = page.runs.length > 1 ? ' of ' + runLabel(ri) : '';
  sec.innerHTML = '<h2>' + esc(opts.title || 'Segments' + name + ' at event #' + fmtInt(E)) + '</h2><p>' +
    plural(list.length, 'segment') + (expandable ? ' (' + expandable + ' expandable)' : '') + ' hold' +
    (list.length === 1 ? 's ' : ' ') + fmtBytes(reserved) + '; ' + fmtBytes(used) + ' allocated in them, ' +
    fmtBytes(reserved - used) + ' not (free blocks, and what the allocator carved beyond the requests).</p>' +
    poolTable(stats) + (f ? forensicsHtml(f) : '') + extraHtml(S.deviceExtra) +
    '<p class="muted">Blocks are drawn as the allocator carved them (at least the ledger\'s bytes); white: free ' +
    '(holes); hatched: pages of an expandable segment not mapped; a dashed outline marks each pool\'s largest hole.</p>';
  host.appendChild(sec);
  const shown = list.slice(0, 300), rowH = 16, width = Math.max(600, host.clientWidth - 4), barX = 250;
  if (!shown.length) return;
  const {canvas, ctx} = makeCanvas(sec, 'segments', width, shown.length * rowH + 4);
  const maxSize = Math.max(...shown.map((g) => g.extent)), barW = width - barX - 10;
  const widthOf = (g) => Math.max(3, g.extent / maxSize * barW), hatch = HATCH(ctx);
  const largest = stats.map((st) => st.largest);
  ctx.font = '11px monospace';
  ctx.textBaseline = 'middle';
  shown.forEach((g, row) => {
    const y = row * rowH + 2, w = widthOf(g), scale = w / Math.max(1, g.extent), h = rowH - 3;
    ctx.fillStyle = '#333';
    ctx.fillText(S.address[g.s] + ' ' + fmtBytes(S.expandable[g.s] ? g.mapped : S.size[g.s]) +
      (S.small[g.s] ? ' small' : ' large') + (S.expandable[g.s] ? ' exp.' : ''), 0, y + rowH / 2);
    ctx.fillStyle = hatch;
    ctx.fillRect(barX, y, w, h);
    ctx.fillStyle = '#fff';
    for (const [a, b] of g.ranges) ctx.fillRect(barX + a * scale, y, (b - a) * scale, h);
    ctx.strokeStyle = '#999';
    ctx.strokeRect(barX + 0.5, y + 0.5, w - 1, h - 1);
    for (const l of g.blocks) {
      const bx = barX + B.offset[l.b] * scale, bw = B.carved[l.b] * scale;
      ctx.fillStyle = COLORS[l.cat];
      ctx.fillRect(bx, y, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
      if (pinned.has(l.b)) {
        ctx.strokeStyle = '#d00';
        ctx.lineWidth = 2;
        ctx.strokeRect(bx + 1, y + 1, Math.max(2, bw - 2), h - 2);
        ctx.lineWidth = 1;
      }
    }
    ctx.setLineDash([3, 2]);
    ctx.strokeStyle = '#333';
    for (const [o, n] of g.holes)
      if (n === largest[S.small[g.s] ? 0 : 1] && n > 0) ctx.strokeRect(barX + o * scale + 0.5, y + 0.5, n * scale - 1, h - 1);
    ctx.setLineDash([]);
  });
  if (list.length > shown.length) {
    const more = document.createElement('p');
    more.className = 'muted';
    more.textContent = 'and ' + (list.length - shown.length) + ' smaller segments, not drawn';
    sec.appendChild(more);
  }
  canvas.addEventListener('mousemove', (e) => {
    const r = canvas.getBoundingClientRect(), g = shown[Math.floor((e.clientY - r.top - 2) / rowH)];
    if (!g) return hideTooltip();
    const off = (e.clientX - r.left - barX) / widthOf(g) * g.extent;
    const l = g.blocks.find((x) => B.offset[x.b] <= off && off < B.offset[x.b] + B.carved[x.b]);
    const hole = g.holes.find(([o, n]) => o <= off && off < o + n);
    const head = '<div class="muted">segment ' + S.address[g.s] + ', ' + (S.expandable[g.s] ? 'expandable, ' +
      fmtBytes(g.mapped) + ' mapped' : fmtBytes(S.size[g.s])) + ', ' + (S.small[g.s] ? 'small' : 'large') + ' pool; ' +
      fmtBytes(g.used) + ' allocated in ' + plural(g.blocks.length, 'block') + '</div>' + extraHtml(S.extra[g.s]);
    const what = l ? blockHtml(run, l.b, p) + '<div class="muted">at offset ' + fmtInt(B.offset[l.b]) + ', carved ' +
      fmtInt(B.carved[l.b]) + ' B</div>' : hole ? '<div>a hole: ' + fmtBytes(hole[1]) + ' free at offset ' +
      fmtInt(hole[0]) + '</div>' : off >= 0 && off < g.extent ? '<div>not mapped</div>' : '';
    showTooltip(what + head, {}, e.clientX, e.clientY);
  });
  canvas.addEventListener('mouseleave', hideTooltip);
}

// The segment maps the page opens with: each run's at its peak and at its first out-of-memory error.
function renderSegmentMaps() {
  const host = document.getElementById('segmap');
  host.innerHTML = '';
  page.runs.forEach((run, ri) => {
    if (!run.n) return;
    const name = page.runs.length > 1 ? ' of ' + runLabel(ri) : '';
    renderSegments(host, ri, run.peak, {when: 'peak', title: 'Segment map' + name + ' at the peak (' +
      when(run, run.peak, run.ev[run.peak]) + ')'});
    const oom = run.marks.find((m) => m.kind === 'oom');
    if (!oom) return;
    const others = run.marks.filter((m) => m.kind === 'oom').length - 1;
    renderSegments(host, ri, oom.pos - 1, {E: oom.ev, when: 'oom', forensics: oom.forensics,
      title: 'Segment map' + name + ' at the out-of-memory error (event #' + fmtInt(oom.ev) + ')' +
        (others ? ', the first of ' + (others + 1) : '') + ': ' + oom.text});
  });
}
