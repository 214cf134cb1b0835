// Pools: per-file progress and peer rankings (chart and table).
import * as api from './api.js';
import { h, svg, replace, errorBox, empty, fmtNum, seg, throttle } from './dom.js';

function progress(f) {
  const n = Number(f.pieces) || 1;
  const pct = (v) => `${((Number(v || 0) / n) * 100).toFixed(2)}%`;
  // A piece is in at most one of wanted, leased and done; the rest of the
  // bar is pieces nobody wants.
  return h('div', { class: 'stack', title: `${f.done || 0} done, ${f.leased || 0} leased, ${f.wanted || 0} wanted of ${f.pieces} pieces` },
    h('span', { class: 'done', style: `width:${pct(f.done)}` }),
    h('span', { class: 'leased', style: `width:${pct(f.leased)}` }),
    h('span', { class: 'wanted', style: `width:${pct(f.wanted)}` }));
}

function rankingChart(rs) {
  const rowH = 22, labelW = 110, w = 520;
  const max = Math.max(1, ...rs.map((r) => r.score || 0));
  const height = rs.length * rowH + 4;
  return svg('svg', { class: 'chart', id: 'ranking-chart', viewBox: `0 0 ${w} ${height}`, height, role: 'img', 'aria-label': 'Peer scores' },
    svg('line', { class: 'axis', x1: labelW, y1: 0, x2: labelW, y2: height }),
    rs.map((r, i) => {
      const bw = Math.max(1, ((r.score || 0) / max) * (w - labelW - 60));
      const y = i * rowH + 3;
      return svg('g', { 'data-peer': r.peer },
        svg('text', { x: labelW - 6, y: y + 13, 'text-anchor': 'end' }, r.peer),
        svg('rect', { class: 'b', x: labelW, y, width: bw, height: rowH - 6, rx: 3 }),
        svg('text', { x: labelW + bw + 6, y: y + 13 }, (r.score || 0).toFixed(2)));
    }));
}

export function pools(root, ctx) {
  const body = h('div', { id: 'pool-list' }, empty('Loading…'));
  replace(root, h('h1', {}, `Pools in ${ctx.ns}`), body);
  ctx.every(3000, async () => {
    try {
      const r = await api.call('PoolService', 'ListPools', { namespace: ctx.ns });
      const names = r.pools || [];
      if (names.length === 0) return replace(body, empty('No pools in this namespace.'));
      const sts = await Promise.all(names.map((p) => api.call('PoolService', 'Status', { namespace: ctx.ns, pool: p }).catch((e) => ({ error: e }))));
      replace(body, h('div', { class: 'card' }, h('table', { id: 'pool-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'pool'), h('th', { class: 'num' }, 'files'), h('th', { class: 'num' }, 'peers'), h('th', { class: 'num' }, 'done / pieces'), h('th', {}, 'progress'))),
        h('tbody', {}, names.map((p, i) => {
          const st = sts[i];
          if (st.error) return h('tr', {}, h('td', {}, p), h('td', { colspan: 4 }, errorBox(st.error)));
          const files = st.files || [];
          const tot = (k) => files.reduce((a, f) => a + Number(f[k] || 0), 0);
          return h('tr', { dataset: { pool: p } }, h('td', {}, h('a', { href: `#/pools/${seg(p)}` }, p)),
            h('td', { class: 'num' }, files.length), h('td', { class: 'num' }, (st.peers || []).length),
            h('td', { class: 'num' }, `${fmtNum(tot('done'))} / ${fmtNum(tot('pieces'))}`),
            h('td', {}, progress({ pieces: tot('pieces'), done: tot('done'), leased: tot('leased'), wanted: tot('wanted') })));
        })))));
    } catch (e) {
      replace(body, errorBox(e));
    }
  });
}

export function poolPage(root, ctx) {
  const name = ctx.params[0];
  const files = h('div', { class: 'card', id: 'pool-files' }, h('h2', {}, 'Files'), empty('Loading…'));
  const chart = h('div', { class: 'card', id: 'pool-chart' }, h('h2', {}, 'Peer scores'), empty('Loading…'));
  const table = h('div', { class: 'card', id: 'pool-peers' }, h('h2', {}, 'Peer rankings'), empty('Loading…'));
  replace(root, h('div', { class: 'crumbs' }, h('a', { href: '#/pools' }, 'Pools'), ` / ${ctx.ns} /`), h('h1', {}, name), files, h('div', { class: 'grid' }, chart, table));
  const load = async () => {
    await Promise.all([
      api.call('PoolService', 'Status', { namespace: ctx.ns, pool: name }).then((st) => {
        const fs = st.files || [];
        replace(files, h('h2', {}, 'Files'),
          h('div', { class: 'legend' }, h('span', {}, h('i', { style: 'background:var(--ok)' }), 'done'), h('span', {}, h('i', { style: 'background:var(--accent)' }), 'leased'), h('span', {}, h('i', { style: 'background:var(--warn);opacity:.55' }), 'wanted')),
          fs.length === 0 ? empty('No file is wanted in this pool yet.') :
            h('table', { id: 'file-table' }, h('thead', {}, h('tr', {}, h('th', {}, 'file'), h('th', { class: 'num' }, 'pieces'), h('th', { class: 'num' }, 'wanted'),
              h('th', { class: 'num' }, 'leased'), h('th', { class: 'num' }, 'done'), h('th', {}, 'progress'))),
            h('tbody', {}, fs.map((f) => h('tr', { dataset: { file: String(f.fileIndex || 0) } }, h('td', {}, `#${f.fileIndex || 0}`),
              h('td', { class: 'num' }, fmtNum(f.pieces)), h('td', { class: 'num', dataset: { k: 'wanted' } }, fmtNum(f.wanted)),
              h('td', { class: 'num', dataset: { k: 'leased' } }, fmtNum(f.leased)), h('td', { class: 'num', dataset: { k: 'done' } }, fmtNum(f.done)),
              h('td', {}, progress(f)))))));
      }).catch((e) => replace(files, h('h2', {}, 'Files'), errorBox(e))),
      api.call('PoolService', 'Rankings', { namespace: ctx.ns, pool: name }).then((r) => {
        const rs = r.rankings || [];
        replace(chart, h('h2', {}, 'Peer scores'), rs.length === 0 ? empty('No peer has asked for pieces yet.') : rankingChart(rs));
        replace(table, h('h2', {}, 'Peer rankings'), rs.length === 0 ? empty('No peers yet.') :
          h('table', { id: 'ranking-table' }, h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'peer'), h('th', { class: 'num' }, 'score'),
            h('th', { class: 'num' }, 'successes'), h('th', { class: 'num' }, 'failures'), h('th', { class: 'num' }, 'leases now'))),
          h('tbody', {}, rs.map((p, i) => h('tr', { dataset: { peer: p.peer } }, h('td', {}, i + 1), h('td', {}, p.peer),
            h('td', { class: 'num' }, (p.score || 0).toFixed(3)), h('td', { class: 'num' }, fmtNum(p.successes)),
            h('td', { class: 'num' }, fmtNum(p.failures)), h('td', { class: 'num' }, fmtNum(p.currentLeases)))))));
      }).catch((e) => { replace(chart, h('h2', {}, 'Peer scores'), errorBox(e)); replace(table, h('h2', {}, 'Peer rankings'), errorBox(e)); }),
    ]);
  };
  ctx.every(3000, load);
  const reload = throttle(load, 1000);
  ctx.onEvent((ev) => { if (ev.type.startsWith('piece.') || ev.type.startsWith('pool.')) reload(); });
}
