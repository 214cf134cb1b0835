// Overview: the cluster, lease counts, throughput, queues, errors, events.
import * as api from './api.js';
import { h, svg, replace, errorBox, empty, fmtNum, fmtTime, enumName, eventClass, href, seg, throttle, fmtClock } from './dom.js';

// Samples of the member's counters, kept across page switches so rates
// and the last minute's errors are there as soon as the page opens.
const samples = [];
const KEEP_MS = 5 * 60_000;

function sum(series, pred = () => true) {
  return (series || []).filter((s) => pred(s.labels)).reduce((a, s) => a + s.value, 0);
}

async function sample() {
  const m = await api.metrics();
  const rejections = {};
  for (const s of m.tenure_rejections_total || []) rejections[s.labels.reason || 'unknown'] = s.value;
  const s = {
    t: performance.now(),
    grants: sum(m.tenure_grants_total),
    renewals: sum(m.tenure_renewals_total),
    expiries: sum(m.tenure_leases_ended_total, (l) => (l.state || '').toLowerCase() === 'expired'),
    waiters: sum(m.tenure_waiters),
    rejections,
  };
  samples.push(s);
  while (samples.length > 2 && s.t - samples[0].t > KEEP_MS) samples.shift();
}

// rates gives per-second differences between successive samples.
function rates(key) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    out.push(dt > 0 ? Math.max(0, samples[i][key] - samples[i - 1][key]) / dt : 0);
  }
  return out;
}

function spark(values) {
  const w = 120, hgt = 28;
  const vs = values.slice(-60);
  if (vs.length < 2) return svg('svg', { width: w, height: hgt });
  const max = Math.max(...vs, 1);
  const pts = vs.map((v, i) => `${(i / (vs.length - 1)) * w},${hgt - 2 - (v / max) * (hgt - 4)}`).join(' ');
  return svg('svg', { width: w, height: hgt, 'aria-hidden': 'true' }, svg('polyline', { class: 'spark', points: pts }));
}

function stat(k, v, id, extra) {
  return h('div', { class: 'stat', id }, h('div', { class: 'v' }, v), h('div', { class: 'k' }, k), extra);
}

// NO_ADDRESS is a member's health while Status does not name its API
// address (a member that has just restarted has not published it yet).
const NO_ADDRESS = 'address not known yet';

async function probe(member, self) {
  // Without an address there is nothing to ask (the URL would be
  // http:///healthz, which the browser reads as http://healthz/).
  if (!member.apiAddress) return NO_ADDRESS;
  // Another member's /healthz is cross-origin: a no-cors fetch cannot read
  // the answer, but it resolves only when the member answered at all.
  const url = member.apiAddress === self ? '/healthz' : `${location.protocol}//${member.apiAddress}/healthz`;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), 2000);
  try {
    const r = await fetch(url, { mode: member.apiAddress === self ? 'same-origin' : 'no-cors', signal: ctrl.signal, cache: 'no-store' });
    return r.type === 'opaque' || r.ok ? 'reachable' : `HTTP ${r.status}`;
  } catch {
    return 'unreachable';
  } finally {
    clearTimeout(timer);
  }
}

// breakable lets a narrow card break an address before its port rather
// than inside the host.
function breakable(addr) {
  const i = addr.lastIndexOf(':');
  return i > 0 ? [addr.slice(0, i), h('wbr'), addr.slice(i)] : addr;
}

function healthClass(health, m) {
  if (health === 'checking' || health === NO_ADDRESS) return '';
  return health === 'reachable' && !m.unreachableSince ? 'ok' : 'bad';
}

export default function overview(root, ctx) {
  const cluster = h('div', { class: 'card', id: 'cluster' }, h('h2', {}, 'Cluster'), empty('Loading…'));
  const counts = h('div', { class: 'card', id: 'counts' }, h('h2', {}, `Leases in ${ctx.ns}`), empty('Loading…'));
  const rate = h('div', { class: 'card', id: 'rates' }, h('h2', {}, 'Throughput (this member)'), empty('Sampling /metrics…'));
  const queues = h('div', { class: 'card', id: 'queue-depth' }, h('h2', {}, `Queues in ${ctx.ns}`), empty('Loading…'));
  const errors = h('div', { class: 'card', id: 'errors' }, h('h2', {}, 'Errors by reason (this member)'), empty('Sampling /metrics…'));
  const recent = h('div', { class: 'card', id: 'recent' }, h('h2', {}, 'Latest events'), empty('Waiting for events…'));
  replace(root, h('h1', {}, 'Overview'), h('div', { class: 'grid' }, cluster, counts, rate), h('div', { class: 'grid' }, queues, errors, recent));

  // Each member's last known health, by id: the probes (up to 2 s for a
  // member that does not answer) run beside the refresh, so that a new
  // leader shows as soon as Status says, not after them.
  const healthOf = {};
  const renderCluster = (st) => {
    const health = (st.members || []).map((m) => healthOf[m.id] || 'checking');
    replace(cluster, h('h2', {}, 'Cluster'),
      h('div', { class: 'stats' },
        stat('leader', st.leaderId || h('span', { class: 'badge bad' }, 'none'), 'leader'),
        stat('term', st.term || '0'),
        stat('commit index', fmtNum(st.commitIndex)),
        stat('applied index', fmtNum(st.appliedIndex))),
      h('table', { id: 'members' }, h('thead', {}, h('tr', {}, h('th', {}, 'member'), h('th', {}, 'API address'), h('th', {}, 'role'), h('th', {}, 'health'))),
        h('tbody', {}, (st.members || []).map((m, i) => h('tr', {},
          h('td', {}, m.id, m.id === st.nodeId ? h('span', { class: 'muted' }, ' (answering)') : ''),
          h('td', { class: 'mono addr' }, m.apiAddress ? breakable(m.apiAddress) : h('span', { class: 'muted', title: 'Status does not name it yet' }, '—')),
          // Without a leader a member knows only its own role.
          h('td', {}, !st.leaderId && m.id !== st.nodeId ? h('span', { class: 'muted' }, 'unknown') :
            h('span', { class: `badge ${m.role === 'ROLE_LEADER' ? 'ok' : m.role === 'ROLE_CANDIDATE' ? 'warn' : ''}` }, enumName(m.role, 'ROLE_'))),
          h('td', { class: 'health', dataset: { health: health[i] } }, h('span', { class: `badge ${healthClass(health[i], m)}` }, health[i]),
            m.unreachableSince ? h('span', { class: 'muted note', title: 'The leader\'s heartbeats to it fail' }, `leader lost it at ${fmtClock(m.unreachableSince)}`) : ''))))),
      h('p', { class: 'muted' }, `version ${st.version || '?'} · answered by ${st.nodeId || '?'}`));
  };
  let probing = false;
  let latest; // the last Status answered

  ctx.every(2000, async () => {
    await Promise.all([
      api.call('ClusterService', 'Status').then((st) => {
        latest = st;
        renderCluster(st);
        if (probing) return;
        probing = true;
        const self = location.host;
        Promise.all((st.members || []).map((m) => probe(m, self).then((hl) => { healthOf[m.id] = hl; })))
          .then(() => renderCluster(latest))
          .finally(() => { probing = false; });
      }).catch((e) => replace(cluster, h('h2', {}, 'Cluster'), errorBox(e))),

      api.call('LeaseService', 'List', { namespace: ctx.ns, pageSize: 1 }).then((r) => {
        const c = r.counts || {};
        replace(counts, h('h2', {}, `Leases in ${ctx.ns}`), h('div', { class: 'stats' },
          stat('active', fmtNum(c.active), 'count-active'), stat('released', fmtNum(c.released)),
          stat('expired', fmtNum(c.expired)), stat('revoked', fmtNum(c.revoked)),
          stat('waiters', fmtNum(c.waiters), 'count-waiters')),
          h('p', {}, h('a', { href: '#/leases' }, 'Browse leases →')));
      }).catch((e) => replace(counts, h('h2', {}, `Leases in ${ctx.ns}`), errorBox(e))),

      api.call('QueueService', 'ListQueues', { namespace: ctx.ns }).then((r) => {
        const qs = r.queues || [];
        const tot = (k) => qs.reduce((a, q) => a + Number((q.stats || {})[k] || 0), 0);
        replace(queues, h('h2', {}, `Queues in ${ctx.ns}`),
          qs.length === 0 ? empty('No queues in this namespace.') : [
            h('div', { class: 'stats' }, stat('queue depth', fmtNum(tot('queued')), 'queue-depth-total'),
              stat('leased', fmtNum(tot('leased'))), stat('dead', fmtNum(tot('dead')))),
            h('table', {}, h('tbody', {}, qs.slice(0, 6).map((q) => h('tr', {},
              h('td', { class: 'name' }, h('a', { href: `#/queues/${seg(q.queue)}` }, q.queue)),
              h('td', { class: 'num' }, `${fmtNum(q.stats.queued)} queued`),
              h('td', { class: 'num' }, `${fmtNum(q.stats.leased)} leased`))))),
          ]);
      }).catch((e) => replace(queues, h('h2', {}, `Queues in ${ctx.ns}`), errorBox(e))),

      sample().then(() => {
        const last = samples[samples.length - 1];
        const g = rates('grants'), rn = rates('renewals'), ex = rates('expiries');
        const now = (xs) => (xs.length ? xs[xs.length - 1] : 0);
        replace(rate, h('h2', {}, 'Throughput (this member)'), h('div', { class: 'stats' },
          stat('grants/s', fmtNum(now(g)), 'rate-grants', spark(g)),
          stat('renewals/s', fmtNum(now(rn)), 'rate-renewals', spark(rn)),
          stat('expiries/s', fmtNum(now(ex)), 'rate-expiries', spark(ex)),
          stat('waiters', fmtNum(last.waiters))),
          h('p', { class: 'muted' }, 'From /metrics, every 2 s; all namespaces.'));
        const base = samples.find((s) => last.t - s.t <= 60_000) || last;
        const span = Math.round((last.t - base.t) / 1000);
        const reasons = Object.keys(last.rejections).sort((a, b) => last.rejections[b] - last.rejections[a]);
        replace(errors, h('h2', {}, 'Errors by reason (this member)'),
          reasons.length === 0 ? empty('No request has been refused.') :
            h('table', { id: 'error-reasons' }, h('thead', {}, h('tr', {}, h('th', {}, 'reason'), h('th', { class: 'num' }, span >= 55 ? 'last minute' : `last ${span}s`), h('th', { class: 'num' }, 'since start'))),
              h('tbody', {}, reasons.map((r) => h('tr', {}, h('td', { class: 'mono' }, r),
                h('td', { class: 'num' }, fmtNum(last.rejections[r] - (base.rejections[r] || 0))),
                h('td', { class: 'num' }, fmtNum(last.rejections[r])))))));
      }).catch((e) => { replace(rate, h('h2', {}, 'Throughput (this member)'), errorBox(e)); replace(errors, h('h2', {}, 'Errors by reason (this member)'), errorBox(e)); }),
    ]);
  });

  const drawRecent = () => {
    const evs = ctx.feed.events.slice(-8).reverse();
    // With no event to show, a feed that is down says why (not "no events").
    const none = ctx.feed.state === 'down' ? errorBox(`The event feed is not connected: ${ctx.feed.detail}`) :
      empty('No events since the page opened.');
    replace(recent, h('h2', {}, 'Latest events'), evs.length === 0 ? none :
      h('ul', { class: 'timeline compact' }, evs.map((e) => h('li', { class: eventClass(e.type) },
        h('span', { class: 'muted' }, fmtClock(e.time)), h('span', {}, e.type),
        h('span', { class: 'mono' }, e.resource ? h('a', { href: `#/resource/${seg(e.resource)}` }, e.resource) : '', e.holder ? ` · ${e.holder}` : '')))),
    h('p', {}, h('a', { href: href('/events') }, 'Full event feed →')));
  };
  drawRecent();
  ctx.onEvent(throttle(drawRecent, 250));
  ctx.feed.stateListeners.add(drawRecent);
  ctx.onCleanup(() => ctx.feed.stateListeners.delete(drawRecent));
}
