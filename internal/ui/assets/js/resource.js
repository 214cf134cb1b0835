// Resource: its leases, waiters, guarded-state epoch and history timeline.
import * as api from './api.js';
import { h, replace, errorBox, empty, fmtTime, fmtNum, eventClass, b64text, throttle, single, href, durMs, fmtDur } from './dom.js';
import { leaseTable, adminNote } from './leases.js';

const HISTORY_MAX = 1000;
const LEASE_ROWS = 200;

// historyOf keeps a resource's latest HISTORY_MAX events (oldest first)
// across the page's refreshes. The first load asks for the latest, which
// for a resource quiet on a busy registrar the member may read from its
// ledger files; each refresh asks only for the events after the
// registrar's last record when the previous answer was asked for (which
// its in-memory history holds), and starts over when the answer says it
// lacks some.
function historyOf(ns, resource) {
  let evs = null;
  let after = 0;
  const last = (list) => (list.length ? Number(list[list.length - 1].index) : 0);
  return async () => {
    const st = await api.call('ClusterService', 'Status');
    const head = Number(st.ledgerIndex || 0);
    if (evs !== null) {
      const r = await api.call('LeaseService', 'History', { namespace: ns, resource, afterIndex: String(after), limit: HISTORY_MAX });
      const more = r.events || [];
      if ((!r.oldestIndex || r.oldestIndex === '0') && more.length < HISTORY_MAX) {
        evs = evs.concat(more).slice(-HISTORY_MAX);
        after = Math.max(after, head, last(more));
        return evs;
      }
    }
    const r = await api.call('LeaseService', 'History', { namespace: ns, resource, limit: HISTORY_MAX, latest: true });
    evs = r.events || [];
    after = Math.max(head, last(evs));
    return evs;
  };
}

// resourceLeases lists the resource's active leases: List by prefix, which
// may also match longer names, paged until it has seen them all (or a
// cap). Its ended leases are in the history (a busy resource keeps
// thousands, which cost every refresh seconds to fetch and draw).
async function resourceLeases(ns, resource) {
  let out = [];
  let token = '';
  let waiters = [];
  for (let page = 0; page < 20; page++) {
    const r = await api.call('LeaseService', 'List', { namespace: ns, resource, states: ['STATE_ACTIVE'], pageSize: 1000, pageToken: token });
    out = out.concat((r.leases || []).filter((l) => l.resource === resource));
    if (page === 0) waiters = r.waiters || [];
    token = r.nextPageToken || '';
    if (!token) break;
  }
  out.waiters = waiters; // the registrar's wait queue, head first
  return out;
}

// queuedSince finds when each waiter queued, from its lease.waiting event
// in the history (a busy resource's may be older than the history read).
function queuedSince(events) {
  const at = new Map();
  for (const e of events) {
    const id = e.details && e.details.waiter_id;
    if (id && e.type === 'lease.waiting') at.set(id, e.time);
  }
  return at;
}

// timeline lists events newest first, with each run of renewals of one
// lease folded into one entry (a busy lease renews every few seconds).
function timeline(evs) {
  const items = [];
  for (const e of evs.slice().reverse()) {
    const last = items[items.length - 1];
    if (e.type === 'lease.renewed' && last && last.e.type === 'lease.renewed' && last.e.leaseId === e.leaseId) {
      last.n++;
      last.first = e;
      continue;
    }
    items.push({ e, n: 1, first: e });
  }
  return items.map(({ e, n, first }) => h('li', { class: eventClass(e.type), dataset: { type: e.type } },
    h('span', { class: 'muted' }, fmtTime(e.time)),
    h('strong', {}, e.type, n > 1 ? ` ×${n}` : ''),
    h('span', {}, e.holder ? `${e.holder} · ` : '', e.fence && e.fence !== '0' ? `fence ${e.fence} · ` : '',
      h('span', { class: 'muted' }, n > 1 ? `since ${fmtTime(first.time)} · latest: ${details(e.details)}` : details(e.details)))));
}

function details(d) {
  return Object.entries(d || {}).filter(([k]) => !k.endsWith('_tick')).map(([k, v]) => `${k}=${v}`).join(' · ');
}

export default function resource(root, ctx) {
  const name = ctx.params[0];
  const leasesBox = h('div', { class: 'card', id: 'resource-leases' }, h('h2', {}, 'Active leases'), empty('Loading…'));
  const waitBox = h('div', { class: 'card', id: 'resource-waiters' }, h('h2', {}, 'Waiters'), empty('Loading…'));
  const stateBox = h('div', { class: 'card', id: 'resource-state' }, h('h2', {}, 'Guarded state'), empty('Loading…'));
  const histBox = h('div', { class: 'card', id: 'resource-history' }, h('h2', {}, 'History'), empty('Loading…'));
  const msg = h('div');
  replace(root, h('div', { class: 'crumbs' }, h('a', { href: '#/leases' }, 'Leases'), ` / ${ctx.ns} /`),
    h('h1', { class: 'mono' }, name), msg,
    leasesBox, h('div', { class: 'grid' }, waitBox, stateBox), histBox);

  const history = historyOf(ctx.ns, name);
  const load = single(async () => {
    const leases = resourceLeases(ctx.ns, name);
    await Promise.all([
      leases.then((ls) => {
        ls.sort((a, b) => Number(b.fence) - Number(a.fence));
        const shown = ls.slice(0, LEASE_ROWS);
        const all = h('a', { href: href('/leases', { prefix: name }) }, 'every lease of it, ended ones too');
        replace(leasesBox, h('h2', {}, 'Active leases'), adminNote(ctx.ns),
          ls.length === 0 ? h('p', { class: 'empty' }, 'No active lease. See ', all, ', and the history below.') :
            [h('p', { class: 'muted', id: 'lease-rows-note' }, ls.length > shown.length ? `The newest ${shown.length} of ${fmtNum(ls.length)} active leases; ` : '', 'see also ', all, '.'),
              leaseTable(shown, { showResource: false, onAction: (note) => { if (note) replace(msg, note); load(); } })]);
      }).catch((e) => replace(leasesBox, h('h2', {}, 'Active leases'), errorBox(e))),
      api.call('LeaseService', 'ReadState', { namespace: ctx.ns, resource: name }).then((r) => {
        const data = b64text(r.data);
        replace(stateBox, h('h2', {}, 'Guarded state'), h('dl', { class: 'kv' },
          h('dt', {}, 'epoch'), h('dd', { id: 'state-epoch', class: 'mono' }, r.epoch || '0'),
          h('dt', {}, 'data'), h('dd', {}, data ? h('pre', {}, data) : h('span', { class: 'muted' }, 'none written'))));
      }).catch((e) => replace(stateBox, h('h2', {}, 'Guarded state'), errorBox(e))),
      Promise.all([leases, history()]).then(([ls, evs]) => {
        const ws = ls.waiters;
        const since = queuedSince(evs);
        replace(waitBox, h('h2', {}, 'Waiters'), ws.length === 0 ? empty('Nobody is waiting.') :
          h('table', { id: 'waiter-table' }, h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'holder'), h('th', {}, 'mode'), h('th', {}, 'since'), h('th', {}, 'waits up to'))),
            h('tbody', {}, ws.map((w, i) => h('tr', {}, h('td', {}, i + 1), h('td', { class: 'name' }, w.holder),
              h('td', {}, (w.mode || 'MODE_EXCLUSIVE').replace('MODE_', '').toLowerCase()),
              h('td', {}, since.has(w.waiterId) ? fmtTime(since.get(w.waiterId)) : h('span', { class: 'muted' }, 'before the history shown')),
              h('td', {}, fmtDur(durMs(w.waitRemaining))))))));
        replace(histBox, h('h2', {}, evs.length === HISTORY_MAX ? `History (the latest ${HISTORY_MAX} events)` : `History (${evs.length} ${evs.length === 1 ? 'event' : 'events'})`),
          evs.length === 0 ? empty('No history retained for this resource.') :
          h('ul', { class: 'timeline', id: 'history' }, timeline(evs)));
      }).catch((e) => { replace(histBox, h('h2', {}, 'History'), errorBox(e)); replace(waitBox, h('h2', {}, 'Waiters'), errorBox(e)); }),
    ]);
  });
  ctx.every(5000, load);
  const reload = throttle(load, 5000);
  ctx.onEvent((ev) => { if (ev.resource === name) reload(); });
}
