// Leases: a filterable table with live countdowns and revoke.
import * as api from './api.js';
import { h, replace, errorBox, empty, durMs, countdown, stateBadge, enumName, fmtNum, short, confirmDialog, seg, href, throttle, single } from './dom.js';

const STATES = ['', 'STATE_ACTIVE', 'STATE_RELEASED', 'STATE_EXPIRED', 'STATE_REVOKED'];
const PAGE = 200;

// revoke asks, revokes and returns the server's answer for display.
export async function revoke(lease) {
  const reason = await confirmDialog('Revoke', `Revoke lease ${lease.leaseId} on ${lease.resource} held by ${lease.holder} (fence ${lease.fence})?` +
    await derivedNote(lease), true);
  if (reason === null) return null;
  try {
    const r = await api.call('LeaseService', 'Revoke', { leaseId: lease.leaseId, reason });
    return h('div', { class: 'notice', role: 'status' }, `Revoked ${r.lease.resource} (lease ${r.lease.leaseId}, fence ${r.lease.fence}).`);
  } catch (e) {
    api.noteRefusal(e);
    return errorBox(e);
  }
}

// derivedNote says which leases a revocation of lease ends with it: every
// active lease derived from it, at any depth.
async function derivedNote(lease) {
  if (!inTree(lease)) return '';
  try {
    const r = await api.call('LeaseService', 'Tree', { leaseId: lease.leaseId });
    const n = (r.leases || []).filter((l) => l.leaseId !== lease.leaseId && l.state === 'STATE_ACTIVE').length;
    return n === 0 ? '' : ` This also ends the ${n} active lease${n === 1 ? '' : 's'} derived from it.`;
  } catch {
    return ' Every lease derived from it ends with it.';
  }
}

// adminNote says why revoke is not offered in ns, when it is not.
export function adminNote(ns) {
  const why = api.whyNot('revoke', ns);
  return why && h('p', { class: 'muted', id: 'admin-refused' }, `Revoke is not offered: ${why}.`);
}

// loadMore is a "Load more" button: off while its page loads, so that
// clicks meanwhile do not each add a page.
export function loadMore(more) {
  const btn = h('button', { type: 'button', class: 'load-more' }, 'Load more');
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    try { await more(); } finally { btn.disabled = false; }
  });
  return btn;
}

// inTree says whether a lease belongs to a lease tree: derived from a
// parent, or with budget carved to children (or a budget to carve).
export const inTree = (l) => Boolean(l.parentLeaseId || Object.keys(l.reserved || {}).length || Object.keys((l.budget && l.budget.limits) || {}).length);

// leaseLink links to a lease's page (with its tree).
export function leaseLink(l) {
  return h('a', { class: 'lease-link', href: `#/lease/${seg(l.leaseId)}`, title: l.leaseId }, short(l.leaseId));
}

// leaseTable renders leases as a table; onAction gets the answer (a notice
// or an error) of an admin action taken from a row.
export function leaseTable(leases, { onAction, showResource = true } = {}) {
  return h('table', { id: 'lease-table' },
    h('thead', {}, h('tr', {},
      showResource && h('th', {}, 'resource'), h('th', {}, 'holder'), h('th', {}, 'mode'), h('th', {}, 'state'),
      h('th', { class: 'num' }, 'fence'), h('th', { class: 'num' }, 'renewals'), h('th', {}, 'time left'), h('th', {}, 'lease'), h('th', {}, ''))),
    h('tbody', {}, leases.map((l) => {
      const state = enumName(l.state, 'STATE_');
      return h('tr', { dataset: { lease: l.leaseId, resource: l.resource, holder: l.holder, state } },
        showResource && h('td', { class: 'mono name' }, h('a', { href: `#/resource/${seg(l.resource)}` }, l.resource)),
        h('td', { class: 'name' }, l.holder),
        h('td', {}, enumName(l.mode, 'MODE_')),
        h('td', {}, stateBadge(state)),
        h('td', { class: 'num mono' }, l.fence),
        h('td', { class: 'num' }, `${l.renewalCount || 0}${l.maxRenewals ? ` / ${l.maxRenewals}` : ''}`),
        h('td', {}, state === 'active' ? countdown(durMs(l.timeRemaining), durMs(l.ttl)) : h('span', { class: 'muted' }, '—')),
        h('td', { class: 'mono' }, leaseLink(l), inTree(l) && h('a', { class: 'tree-mark', href: `#/lease/${seg(l.leaseId)}`,
          title: l.parentLeaseId ? `derived from ${l.parentLeaseId}` : 'root of a lease tree' }, l.parentLeaseId ? ' ↳ tree' : ' ⊤ tree')),
        h('td', { class: 'row-actions' }, state === 'active' && api.may('revoke', l.namespace || 'default') &&
          h('button', { class: 'danger revoke', onclick: async () => onAction && onAction(await revoke(l)) }, 'Revoke')));
    })));
}

export default function leases(root, ctx) {
  const q = ctx.query;
  const summary = h('span', { class: 'muted', id: 'lease-summary' });
  const form = h('form', { class: 'filters', id: 'lease-filters' },
    h('label', {}, 'Prefix', h('input', { name: 'prefix', value: q.get('prefix') || '', placeholder: 'e.g. orders/', spellcheck: 'false' })),
    h('label', {}, 'Holder', h('input', { name: 'holder', value: q.get('holder') || '', spellcheck: 'false' })),
    h('label', {}, 'State', h('select', { name: 'state' }, STATES.map((s) =>
      h('option', { value: s, selected: (q.get('state') || '') === s }, s ? enumName(s, 'STATE_') : 'any')))),
    h('button', { type: 'submit' }, 'Filter'),
    summary);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const f = new FormData(form);
    location.hash = href('/leases', { prefix: f.get('prefix'), holder: f.get('holder'), state: f.get('state') });
  });
  // Changing the state applies at once.
  form.elements.state.addEventListener('change', () => form.requestSubmit());
  const msg = h('div', { id: 'lease-message' });
  const body = h('div', { id: 'lease-body' }, empty('Loading…'));
  replace(root, h('h1', {}, `Leases in ${ctx.ns}`), form, msg, body);

  let pages = 1;
  let loaded = -Infinity; // when the table was last built (performance.now())
  const load = single(async () => {
    const req = { namespace: ctx.ns, prefix: q.get('prefix') || '', holder: q.get('holder') || '', pageSize: PAGE };
    if (q.get('state')) req.states = [q.get('state')];
    try {
      let all = [];
      let next = '';
      let counts = {};
      for (let i = 0; i < pages; i++) {
        const r = await api.call('LeaseService', 'List', { ...req, pageToken: next });
        all = all.concat(r.leases || []);
        counts = r.counts || counts;
        next = r.nextPageToken || '';
        if (!next) break;
      }
      summary.textContent =
        `${fmtNum(all.length)} shown · namespace: ${fmtNum(counts.active)} active, ${fmtNum(counts.waiters)} waiting`;
      replace(body, all.length === 0
        ? empty(req.prefix || req.holder || req.states ? 'No lease matches these filters.' : 'No leases in this namespace yet.')
        : [adminNote(ctx.ns), leaseTable(all, { onAction: (note) => { if (note) replace(msg, note); load(); } }),
          next && h('div', { class: 'more' }, loadMore(() => { pages++; return load(); }))]);
    } catch (e) {
      summary.textContent = '';
      replace(body, errorBox(e));
    }
    loaded = performance.now();
  });
  // A longer table is rebuilt less often (every 3 s a page of rows), and
  // not on events: building a thousand rows takes the page a good part of
  // a second.
  ctx.every(3000, () => (performance.now() - loaded >= 3000 * pages - 100 ? load() : undefined));
  // Lease events reload a one-page table (coalesced, at most every 2 s),
  // so new grants show without waiting for the next refresh.
  const reload = throttle(load, 2000);
  ctx.onEvent((ev) => {
    if (pages === 1 && ev.type.startsWith('lease.')) reload();
    else if (ev.type === 'lease.renewed' && ev.details && ev.details.ttl) {
      // A longer table, rebuilt less often, still counts a renewed lease
      // from its renewal (a full ttl from about now), not down to 0.
      const el = body.querySelector(`tr[data-lease="${CSS.escape(ev.leaseId)}"] .timeleft`);
      if (el) el.dataset.deadline = String(performance.now() + durMs(ev.details.ttl));
    }
  });
}
