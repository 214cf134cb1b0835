// Events: the live feed from LeaseService.Watch, newest first.
import { h, replace, empty, fmtClock, eventClass, seg, short } from './dom.js';

const SHOW = 300;

function row(e, fresh) {
  const d = Object.entries(e.details || {}).filter(([k]) => !k.endsWith('_tick')).map(([k, v]) => `${k}=${v}`).join(' ');
  return h('tr', { class: fresh ? 'new' : '', dataset: { type: e.type, resource: e.resource || '', index: e.index } },
    h('td', { class: 'num mono' }, e.index),
    h('td', { class: 'muted', title: e.time || '' }, fmtClock(e.time)),
    h('td', {}, h('span', { class: `badge ${eventClass(e.type)}` }, e.type)),
    h('td', { class: 'mono name' }, e.resource ? h('a', { href: `#/resource/${seg(e.resource)}` }, e.resource) : ''),
    h('td', { class: 'name' }, e.holder || ''),
    h('td', { class: 'actor name' }, e.actor || ''),
    h('td', { class: 'num mono' }, e.fence && e.fence !== '0' ? e.fence : ''),
    h('td', { class: 'mono' }, e.leaseId ? h('a', { href: `#/lease/${seg(e.leaseId)}`, title: e.leaseId }, short(e.leaseId)) : ''),
    h('td', { class: 'muted' }, d));
}

export default function events(root, ctx) {
  const filter = h('input', { id: 'event-filter', placeholder: 'type or resource contains…', spellcheck: 'false', value: ctx.query.get('q') || '' });
  const pause = h('button', { type: 'button', id: 'event-pause' }, 'Pause');
  const status = h('span', { class: 'muted', id: 'event-status' });
  const tbody = h('tbody', { id: 'event-rows' });
  const table = h('table', { class: 'feed', id: 'event-table' }, h('thead', {}, h('tr', {},
    h('th', { class: 'num' }, 'index'), h('th', {}, 'time'), h('th', {}, 'type'), h('th', {}, 'resource'), h('th', {}, 'holder'),
    h('th', { title: 'Who acted: the principal, or the holder the request named' }, 'actor'), h('th', { class: 'num' }, 'fence'), h('th', {}, 'lease'), h('th', {}, 'details'))), tbody);
  const holder = h('div', { class: 'card' });
  replace(root, h('h1', {}, `Live events in ${ctx.ns}`), h('div', { class: 'filters' }, h('label', {}, 'Filter', filter), pause, status), holder);

  let paused = false;
  const matches = (e) => {
    const f = filter.value.trim();
    return !f || e.type.includes(f) || (e.resource || '').includes(f) || (e.holder || '') === f || (e.actor || '') === f;
  };
  const draw = () => {
    const evs = ctx.feed.events.filter(matches).slice(-SHOW).reverse();
    replace(tbody, evs.map((e) => row(e, false)));
    replace(holder, evs.length === 0 ? empty(ctx.feed.events.length ? 'No event matches the filter.' : 'No events since the page opened: they appear here as they happen.') : table);
    status.textContent = `${ctx.feed.total} received · ${ctx.feed.state}${ctx.feed.detail ? `: ${ctx.feed.detail}` : ''}`;
  };
  filter.addEventListener('input', () => {
    draw();
    // The address keeps the filter (?q=), so a reload or a link shows it.
    const [path, qs] = location.hash.replace(/^#/, '').split('?');
    const query = new URLSearchParams(qs || '');
    if (filter.value.trim()) query.set('q', filter.value.trim()); else query.delete('q');
    history.replaceState(null, '', `#${path}${query.size ? `?${query}` : ''}`);
  });
  pause.addEventListener('click', () => { paused = !paused; pause.textContent = paused ? 'Resume' : 'Pause'; if (!paused) draw(); });
  draw();
  // Rows are added at most four times a second, and once a second while
  // events come in bursts, so a busy namespace (thousands of events a
  // second) costs a few DOM updates a second, not one per event or per
  // frame (which kept the page from answering). A burst does not flash.
  let pending = [];
  let timer = 0;
  let every = 250;
  const flush = () => {
    timer = 0;
    if (!tbody.isConnected) { pending = []; return draw(); }
    const burst = pending.length > 20;
    every = burst ? 1000 : 250;
    const rows = pending.slice(-SHOW).reverse().map((e) => row(e, !burst));
    pending = [];
    if (rows.length >= SHOW) tbody.replaceChildren(...rows);
    else {
      tbody.prepend(...rows);
      while (tbody.children.length > SHOW) tbody.lastChild.remove();
    }
    status.textContent = `${ctx.feed.total} received · ${ctx.feed.state}`;
  };
  ctx.onEvent((e) => {
    if (paused || !matches(e)) return;
    pending.push(e);
    if (pending.length > SHOW) pending = pending.slice(-SHOW);
    if (!timer) timer = setTimeout(flush, every);
  });
  // The status line follows the feed's state (reconnecting, live again)
  // as the header does, not only when an event arrives.
  const onState = () => { if (status.isConnected) status.textContent = `${ctx.feed.total} received · ${ctx.feed.state}${ctx.feed.detail ? `: ${ctx.feed.detail}` : ''}`; };
  ctx.feed.stateListeners.add(onState);
  ctx.onCleanup(() => { clearTimeout(timer); ctx.feed.stateListeners.delete(onState); });
}
