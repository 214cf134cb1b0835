// Lease: one lease's details (parent, scope, budget) and the lease tree it
// belongs to, each node with its time left and per-counter budget bars.
import * as api from './api.js';
import { h, replace, errorBox, empty, durMs, countdown, stateBadge, enumName, fmtNum, fmtTime, short, seg, href, throttle } from './dom.js';
import { revoke, adminNote } from './leases.js';

// MAX_DEPTH bounds the walk up to the root (the registrar bounds depth
// too; this only keeps a broken answer from looping).
const MAX_DEPTH = 64;

// rootOf follows parentLeaseId up from lease as far as the caller may
// read (an ancestor outside its namespaces reads as not found).
async function rootOf(lease) {
  let top = lease;
  for (let i = 0; i < MAX_DEPTH && top.parentLeaseId; i++) {
    try {
      top = (await api.call('LeaseService', 'Get', { leaseId: top.parentLeaseId })).lease;
    } catch (e) {
      if (e instanceof api.ApiError && e.code === 'not_found') break;
      throw e;
    }
  }
  return top;
}

// resourceLink links to a lease's resource in the lease's namespace (a
// lease's page is found by id alone, whatever namespace the address names).
const resourceLink = (l, cls) => h('a', { class: cls, href: href(`/resource/${seg(l.resource)}`, { ns: l.namespace || 'default' }) }, l.resource);

const link = (id) => h('a', { class: 'lease-link mono', href: `#/lease/${seg(id)}`, title: id }, short(id));

// counters lists a lease's budget counters: limited ones and counted ones.
function counters(l) {
  const limits = (l.budget && l.budget.limits) || {};
  const used = l.used || {};
  const reserved = l.reserved || {};
  return [...new Set([...Object.keys(limits), ...Object.keys(used), ...Object.keys(reserved)])].sort().map((c) => ({
    counter: c,
    limited: Object.hasOwn(limits, c),
    limit: Number(limits[c] || 0),
    used: Number(used[c] || 0),
    reserved: Number(reserved[c] || 0),
  }));
}

const pct = (n, of) => (of > 0 ? Math.min(100, (n / of) * 100) : 0);

// budgetBars draws used (solid) and reserved for children (light) as
// shares of each counter's limit.
export function budgetBars(l) {
  const cs = counters(l);
  if (cs.length === 0) return h('span', { class: 'muted budget-none' }, 'no budget');
  return h('div', { class: 'budgets' }, cs.map((c) => h('div', {
    class: 'budget', dataset: { counter: c.counter, used: String(c.used), reserved: String(c.reserved), limit: c.limited ? String(c.limit) : '' },
    title: c.limited ? `${c.counter}: ${c.used} used, ${c.reserved} reserved for children, ${c.limit - c.used - c.reserved} left of ${c.limit}` : `${c.counter}: ${c.used} used, unlimited`,
  },
  h('span', { class: 'counter' }, c.counter),
  c.limited
    ? h('div', { class: 'stack budget-bar' },
      h('span', { class: 'used', style: `width: ${pct(c.used, c.limit).toFixed(2)}%` }),
      h('span', { class: 'reserved', style: `width: ${pct(c.reserved, Math.max(c.limit, 1)).toFixed(2)}%` }))
    : h('div', { class: 'stack budget-bar unlimited' }),
  h('span', { class: 'figures mono' }, c.limited
    ? `${fmtNum(c.used)}${c.reserved ? ` +${fmtNum(c.reserved)}` : ''} / ${fmtNum(c.limit)}`
    : `${fmtNum(c.used)} / ∞`))));
}

// treeOf nests Tree's answer (parents before children) under its first lease.
function treeOf(leases) {
  const kids = new Map();
  for (const l of leases.slice(1)) {
    if (!kids.has(l.parentLeaseId)) kids.set(l.parentLeaseId, []);
    kids.get(l.parentLeaseId).push(l);
  }
  return { root: leases[0], kids };
}

function treeNode(l, kids, current, onRevoke, depth = 0) {
  const state = enumName(l.state, 'STATE_');
  const children = kids.get(l.leaseId) || [];
  return h('li', { class: `tree-node ${state === 'active' ? '' : 'ended'} ${l.leaseId === current ? 'current' : ''}`,
    dataset: { lease: l.leaseId, state, depth: String(depth), holder: l.holder, resource: l.resource } },
  h('div', { class: 'node' },
    h('div', { class: 'who' },
      resourceLink(l, 'mono res'),
      h('span', { class: 'holder' }, l.holder),
      stateBadge(state),
      link(l.leaseId)),
    h('div', { class: 'when' }, state === 'active'
      ? countdown(durMs(l.timeRemaining), durMs(l.ttl))
      : h('span', { class: 'muted ended-at' }, l.endedByLeaseId ? ['ended with ', link(l.endedByLeaseId)] : fmtTime(l.terminatedAt))),
    budgetBars(l),
    h('div', { class: 'row-actions' }, state === 'active' && api.may('revoke', l.namespace || 'default') &&
      h('button', { class: 'danger revoke', title: 'Revoke this lease and everything derived from it', onclick: () => onRevoke(l) }, 'Revoke'))),
  children.length > 0 && h('ul', { class: 'tree' }, children.map((c) => treeNode(c, kids, current, onRevoke, depth + 1))));
}

function scopeText(list) {
  return list && list.length ? list.join(', ') : h('span', { class: 'muted' }, 'unrestricted');
}

// endedHow says how an ended lease ended: released (and why), expired,
// revoked (and why).
function endedHow(l, state) {
  if (state === 'released') {
    const why = enumName(l.releaseReason, 'RELEASE_REASON_');
    return why === 'transferred' ? 'transferred to another holder (a new lease, higher fence)' : `released${why && why !== 'unspecified' ? ` (${why})` : ''}`;
  }
  if (state === 'revoked') return `revoked${l.revokeReason ? `: ${l.revokeReason}` : ''}`;
  return state;
}

function details(l) {
  const state = enumName(l.state, 'STATE_');
  const scope = l.scope || {};
  const limits = (l.budget && l.budget.limits) || {};
  const kv = [
    ['lease', h('span', { class: 'mono', id: 'lease-id' }, l.leaseId)],
    ['resource', resourceLink(l, 'mono')],
    ['namespace', l.namespace || 'default'],
    ['holder', l.holder],
    ['mode', enumName(l.mode, 'MODE_')],
    ['state', [stateBadge(state), l.revokeReason ? h('span', { class: 'muted' }, ` ${l.revokeReason}`) : '']],
    ['fence', h('span', { class: 'mono' }, l.fence)],
    ['time left', state === 'active' ? countdown(durMs(l.timeRemaining), durMs(l.ttl)) : h('span', { class: 'muted' }, '—')],
    ['issued', fmtTime(l.issuedAt)],
    ['parent', h('span', { id: 'lease-parent' }, l.parentLeaseId ? link(l.parentLeaseId) : h('span', { class: 'muted' }, 'none (a root lease)'))],
    ['scope: namespaces', h('span', { id: 'scope-namespaces' }, scopeText(scope.namespaces))],
    ['scope: prefixes', h('span', { id: 'scope-prefixes', class: 'mono' }, scopeText(scope.resourcePrefixes))],
    ['scope: actions', h('span', { id: 'scope-actions' }, scopeText(scope.actions))],
    ['budget', Object.keys(limits).length ? Object.entries(limits).map(([k, v]) => `${k}=${v}`).join(', ') : h('span', { class: 'muted' }, 'none')],
  ];
  if (state === 'active') kv.splice(9, 0, ['expires', fmtTime(l.expiresAt)]);
  else kv.splice(9, 0, ['ended', h('span', { id: 'lease-ended' }, fmtTime(l.terminatedAt), h('span', { class: 'muted' }, ` · ${endedHow(l, state)}`))]);
  if (l.endedByLeaseId) kv.push(['ended by', h('span', { id: 'lease-ended-by' }, link(l.endedByLeaseId))]);
  return h('dl', { class: 'kv wide', id: 'lease-detail' }, kv.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export default function lease(root, ctx) {
  const id = ctx.params[0];
  const msg = h('div', { id: 'lease-message' });
  const detailBox = h('div', { class: 'card', id: 'lease-card' }, h('h2', {}, 'Lease'), empty('Loading…'));
  const treeBox = h('div', { class: 'card', id: 'lease-tree' }, h('h2', {}, 'Lease tree'), empty('Loading…'));
  const crumbs = (ns) => [h('a', { href: href('/leases', { ns }) }, 'Leases'), ` / ${ns} / lease /`];
  const crumbsBox = h('div', { class: 'crumbs', id: 'lease-crumbs' }, crumbs(ctx.ns));
  replace(root, crumbsBox, h('h1', { class: 'mono' }, id), msg, detailBox, treeBox);

  let ids = new Set([id]);
  const onRevoke = async (l) => {
    const note = await revoke(l);
    if (note) replace(msg, note);
    load();
  };
  const load = async () => {
    let l;
    try {
      l = (await api.call('LeaseService', 'Get', { leaseId: id })).lease;
    } catch (e) {
      replace(detailBox, h('h2', {}, 'Lease'), errorBox(e));
      replace(treeBox, h('h2', {}, 'Lease tree'), empty('Shown once the lease can be read (above).'));
      return;
    }
    // The lease's own namespace, which the address need not name.
    replace(crumbsBox, crumbs(l.namespace || 'default'));
    replace(detailBox, h('h2', {}, `Lease of ${l.resource}`), details(l));
    try {
      const top = await rootOf(l);
      const r = await api.call('LeaseService', 'Tree', { leaseId: top.leaseId });
      const leases = r.leases || [];
      ids = new Set(leases.map((x) => x.leaseId));
      const { root: tr, kids } = treeOf(leases);
      const active = leases.filter((x) => x.state === 'STATE_ACTIVE').length;
      replace(treeBox, h('h2', {}, `Lease tree · ${leases.length} ${leases.length === 1 ? 'lease' : 'leases'}, ${active} active`),
        adminNote(l.namespace || 'default'),
        leases.length === 1 ? empty('Nothing is derived from this lease.') : null,
        h('div', { class: 'legend' }, h('span', {}, h('i', { class: 'used' }), 'used'), h('span', {}, h('i', { class: 'reserved' }), 'reserved for children'),
          h('span', {}, h('i', { class: 'free' }), 'left')),
        h('ul', { class: 'tree root', id: 'tree' }, treeNode(tr, kids, id, onRevoke)));
    } catch (e) {
      replace(treeBox, h('h2', {}, 'Lease tree'), errorBox(e));
    }
  };
  ctx.every(3000, load);
  // Consumption, renewals and endings anywhere in the tree, and new
  // children (issued anywhere: the event does not name the parent's id).
  const reload = throttle(load, 1000);
  ctx.onEvent((ev) => { if (ids.has(ev.leaseId) || ev.type === 'lease.issued') reload(); });
}
