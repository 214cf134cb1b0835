// The dashboard shell: settings, the hash router and the one Watch stream
// that every view shares.
import * as api from './api.js';
import { h, replace, errorBox, href, pageNamespace } from './dom.js';
import overview from './overview.js';
import leases from './leases.js';
import lease from './lease.js';
import resource from './resource.js';
import { queues, queuePage, taskPage } from './queues.js';
import { pools, poolPage } from './pools.js';
import events from './events.js';

const routes = [
  [/^\/?$/, overview, 'overview'],
  [/^\/leases$/, leases, 'leases'],
  [/^\/resource\/(.+)$/, resource, 'leases'],
  [/^\/lease\/([^/]+)$/, lease, 'leases'],
  [/^\/queues$/, queues, 'queues'],
  [/^\/queues\/([^/]+)$/, queuePage, 'queues'],
  [/^\/queues\/([^/]+)\/([^/]+)$/, taskPage, 'queues'],
  [/^\/pools$/, pools, 'pools'],
  [/^\/pools\/([^/]+)$/, poolPage, 'pools'],
  [/^\/events$/, events, 'events'],
];

// The shared event feed: the last MAX_EVENTS events of the namespace ns.
// after is the index of the last event received (or where the feed
// started), from which a paused feed resumes.
const MAX_EVENTS = 500;
export const feed = { ns: '', after: '0', events: [], total: 0, listeners: new Set(), stateListeners: new Set(), state: 'connecting', detail: '' };
let stopWatch = null;
let watchGen = 0;

// BACKLOG is how many ledger records before now the feed starts with, so
// the event pages are not empty on arrival (when the server's in-memory
// feed still holds them; otherwise the stream starts live).
const BACKLOG = 200;

// startWatch starts the feed of namespace ns afresh.
async function startWatch(ns) {
  if (stopWatch) stopWatch();
  stopWatch = null;
  const gen = ++watchGen;
  feed.ns = ns;
  feed.events = [];
  feed.total = 0;
  let after = '0';
  try {
    const st = await api.call('ClusterService', 'Status');
    const head = Number(st.ledgerIndex || 0);
    if (head > 0) after = String(Math.max(1, head - BACKLOG));
  } catch { /* start live; the views show the error */ }
  if (gen !== watchGen) return; // a newer start (namespace change) won
  feed.after = after;
  if (document.visibilityState === 'hidden') showState('paused');
  else follow();
}

// follow opens the Watch stream from feed.after.
function follow() {
  stopWatch = api.watch({ namespace: feed.ns, afterIndex: feed.after }, (ev) => {
    feed.after = ev.index;
    feed.events.push(ev);
    feed.total++;
    // Trimmed in batches: one splice per MAX_EVENTS events, not per event.
    if (feed.events.length > 2 * MAX_EVENTS) feed.events.splice(0, feed.events.length - MAX_EVENTS);
    for (const fn of feed.listeners) fn(ev);
  }, ({ state, detail }) => showState(state, detail));
}

// Browsers open at most six connections to a server over plain HTTP
// (HTTP/1.1), and each open Watch stream holds one: six tabs, or pages
// kept in the back/forward cache, left a seventh page's calls waiting
// forever. A hidden page (another tab, a minimised window) or one put
// into the cache closes its stream, and resumes it after the last event
// it received when shown again; what it had stays in the feed. A resume
// the server can no longer serve starts live, as after any gap.
function pauseWatch() {
  if (!stopWatch) return;
  stopWatch();
  stopWatch = null;
  showState('paused');
}

function resumeWatch() {
  if (stopWatch || feed.state !== 'paused') return;
  follow();
}

const STATE_TEXT = { connecting: 'feed: connecting', live: 'feed: live', down: 'feed: reconnecting', gap: 'feed: resumed live (gap)',
  paused: 'feed: paused (page hidden)' };

// showState puts the feed's state in the header and tells the views.
function showState(state, detail) {
  const live = document.getElementById('live');
  feed.state = state;
  feed.detail = detail || '';
  live.textContent = STATE_TEXT[state];
  // A refusal is not an outage: say what it needs (Apply restarts the
  // feed with the new token).
  if (state === 'down' && feed.detail.startsWith('unauthenticated:')) {
    live.textContent = 'feed: needs a token';
    // The token was revoked (an auth file reload) while signed in: the
    // header must not go on naming its principal.
    if (api.me.state === 'authenticated') api.whoAmI().then(showMe);
  }
  if (state === 'down' && feed.detail.startsWith('permission_denied:')) live.textContent = 'feed: not allowed';
  live.className = `live ${state === 'live' ? 'ok' : state === 'down' ? 'bad' : ''}`;
  live.title = detail || (state === 'paused' ? 'The page is hidden: its event feed resumes when it is shown.' : 'Live event feed (LeaseService.Watch)');
  for (const fn of feed.stateListeners) fn();
}

// showMe puts WhoAmI's answer in the header: the principal, roles and
// namespaces; or UNAUTHENTICATED with a prompt for a token.
function showMe() {
  const me = api.me;
  const el = document.getElementById('whoami');
  const prompt = document.getElementById('auth-prompt');
  const tok = document.getElementById('token');
  el.dataset.state = me.state;
  el.className = `whoami ${me.state === 'unauthenticated' ? 'bad' : me.state === 'authenticated' ? 'ok' : ''}`;
  tok.classList.toggle('attention', me.state === 'unauthenticated');
  prompt.hidden = me.state !== 'unauthenticated';
  switch (me.state) {
    case 'authenticated':
      replace(el, h('strong', { id: 'me-principal' }, me.principal), ' · ',
        h('span', { id: 'me-roles' }, me.roles.join(', ') || 'no role'), ' · ',
        h('span', { id: 'me-namespaces' }, me.namespaces.join(', ') || 'no namespace'));
      el.title = `Signed in as ${me.principal} by ${me.method}: roles ${me.roles.join(', ') || 'none'}; namespaces ${me.namespaces.join(', ') || 'none'}`;
      break;
    case 'unauthenticated':
      replace(el, 'UNAUTHENTICATED');
      el.title = me.error;
      replace(prompt, h('strong', {}, 'UNAUTHENTICATED: '),
        api.token() ? `the server refuses this token (${me.error}). ` : 'this server requires a token. ',
        'Enter a token in the Token field above and press Apply.');
      if (document.activeElement !== tok) tok.focus();
      break;
    case 'open':
      replace(el, 'no authentication');
      el.title = 'The server runs without authentication: every caller may do everything.';
      break;
    default:
      replace(el);
      el.title = me.error ? `Who am I? ${me.error}` : '';
  }
}

// identify asks who the token belongs to, then shows the view with the
// actions that token may take.
async function identify() {
  await api.whoAmI();
  showMe();
  route();
}

let cleanup = [];

// addressIn is the current page's address in namespace ns. Default is
// left out, unless that would mean the principal's only namespace.
function addressIn(ns) {
  const [path, qs] = (location.hash.replace(/^#/, '') || '/').split('?');
  const query = new URLSearchParams(qs || '');
  if (ns === 'default' && !api.onlyNamespace()) query.delete('ns'); else query.set('ns', ns);
  return `#${path}${query.size ? `?${query}` : ''}`;
}

function route() {
  for (const fn of cleanup) fn();
  cleanup = [];
  document.getElementById('confirm').close?.();
  // The address carries the namespace (?ns=, left out for default), so
  // that a link shows the same page to whoever opens it. Without one, a
  // principal confined to one namespace sees that one.
  if (!new URLSearchParams(location.hash.split('?')[1] || '').has('ns') && api.onlyNamespace()) {
    history.replaceState(null, '', addressIn(api.onlyNamespace()));
  }
  const ns = pageNamespace();
  document.getElementById('namespace').value = ns;
  for (const a of document.querySelectorAll('#nav a, a.brand')) a.setAttribute('href', href(a.getAttribute('href').split('?')[0].replace(/^#/, '')));
  if (ns !== feed.ns) startWatch(ns);
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?');
  const query = new URLSearchParams(qs || '');
  const main = document.getElementById('main');
  for (const [re, view, nav] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === nav);
    let params;
    try {
      params = m.slice(1).map(decodeURIComponent);
    } catch {
      replace(main, h('p', { class: 'empty' }, `The address ${raw} is malformed. `, h('a', { href: '#/' }, 'Go to the overview.')));
      return;
    }
    // The server's PERMISSION_DENIED answers so far: one more while this
    // view is shown stops its polling.
    const denied = api.refused.reads;
    const ctx = {
      params,
      query,
      ns,
      feed,
      // every runs fn now and then every ms milliseconds while the view
      // is shown, never two at once. Without a token the server accepts,
      // it runs once (the view says what is needed); once the server
      // refuses the token a read (PERMISSION_DENIED: not its namespace),
      // it stops (each refusal is counted as a rejection, and asking again
      // gets the same answer). Apply, or another page, shows the view
      // again. A hidden page skips its ticks (as its feed pauses).
      every(ms, fn) {
        let busy = false;
        let id = 0;
        const tick = async () => {
          if (busy || (id && document.visibilityState === 'hidden')) return;
          busy = true;
          try { await fn(); } finally { busy = false; }
          if (api.refused.reads !== denied) clearInterval(id);
        };
        tick();
        if (api.me.state === 'unauthenticated') return;
        id = setInterval(tick, ms);
        cleanup.push(() => clearInterval(id));
      },
      onEvent(fn) {
        feed.listeners.add(fn);
        cleanup.push(() => feed.listeners.delete(fn));
      },
      onCleanup(fn) { cleanup.push(fn); },
    };
    replace(main);
    try {
      view(main, ctx);
    } catch (e) {
      replace(main, errorBox(e));
    }
    return;
  }
  replace(main, h('p', { class: 'empty' }, `No page at ${path}. `, h('a', { href: '#/' }, 'Go to the overview.')));
}

// watchQuorum shows the banner while the member answering knows no
// leader: the cluster is electing one, or has lost the majority it needs,
// and refuses writes and linearizable reads meanwhile.
function watchQuorum() {
  const banner = document.getElementById('banner');
  const check = async () => {
    if (api.me.state === 'unauthenticated') return; // asking would be refused
    let text = '';
    try {
      const st = await api.call('ClusterService', 'Status');
      if (!st.leaderId) {
        const n = (st.members || []).length;
        text = `No leader: ${st.nodeId || 'this member'} knows none. The cluster is electing one, or has lost its quorum ` +
          `(${Math.floor(n / 2) + 1} of its ${n} members must be up); writes and up-to-date reads are refused until it has one.`;
      }
    } catch { /* the views show why the member does not answer */ }
    banner.textContent = text;
    banner.hidden = !text;
  };
  check();
  setInterval(check, 3000);
}

function init() {
  const nsInput = document.getElementById('namespace');
  const tokInput = document.getElementById('token');
  tokInput.value = api.token();
  document.getElementById('settings').addEventListener('submit', (e) => {
    e.preventDefault();
    api.setToken(tokInput.value.trim());
    // The address follows: the same page in the namespace just chosen.
    history.replaceState(null, '', addressIn(nsInput.value.trim() || 'default'));
    feed.ns = ''; // the feed starts again, with the token just applied
    identify();
  });
  window.addEventListener('hashchange', route);
  // A hidden page, or one put into the back/forward cache, lets its Watch
  // stream's connection go (see pauseWatch).
  document.addEventListener('visibilitychange', () => (document.visibilityState === 'hidden' ? pauseWatch() : resumeWatch()));
  window.addEventListener('pagehide', pauseWatch);
  window.addEventListener('pageshow', (e) => { if (e.persisted && document.visibilityState !== 'hidden') resumeWatch(); });
  identify();
  watchQuorum();
}

init();
