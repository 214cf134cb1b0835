// Small DOM and formatting helpers shared by the views.

// h builds an element: h('td', {class: 'num'}, 'text', childNode, ...).
// Attributes starting with "on" are listeners; null/false children are
// skipped. A dashboard link (href "#/…") gets the page's namespace when it
// names none (see inNamespace).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'href' && typeof v === 'string' && v.startsWith('#/')) el.setAttribute(k, inNamespace(v));
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // Through the CSSOM: the Content-Security-Policy refuses style attributes.
    else if (k === 'style') setStyle(el, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function setStyle(el, css) {
  for (const decl of css.split(';')) {
    const i = decl.indexOf(':');
    if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
  }
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// svg builds an SVG element.
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  append(el, children);
  return el;
}

// replace swaps el's children for the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' }, err && err.describe ? err.describe() : String(err));
}

export function empty(text) { return h('p', { class: 'empty' }, text); }

// Durations in protobuf JSON are strings like "29.500s".
export function durMs(d) {
  if (!d) return 0;
  return Math.round(parseFloat(d) * 1000);
}

export function fmtDur(ms) {
  if (ms <= 0) return '0s';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

export function fmtTime(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return d.toLocaleString(undefined, { hour12: false, month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short' });
}

export function fmtClock(ts) {
  return ts ? new Date(ts).toLocaleTimeString(undefined, { hour12: false }) : '';
}

export function fmtNum(n) {
  n = Number(n || 0);
  if (!Number.isInteger(n)) return n.toFixed(n < 10 ? 2 : 1);
  return n.toLocaleString('en-US');
}

export const short = (s) => (s && s.length > 14 ? `${s.slice(0, 6)}…${s.slice(-6)}` : s || '');

// enumName strips a protobuf enum prefix: STATE_ACTIVE -> active.
export const enumName = (v, prefix) => (v || '').replace(prefix, '').toLowerCase();

const STATE_CLASS = { active: 'ok', released: '', expired: 'warn', revoked: 'bad',
  queued: 'accent', leased: 'ok', succeeded: '', failed: 'warn', dead: 'bad', cancelled: 'muted' };
export function stateBadge(state) {
  return h('span', { class: `badge ${STATE_CLASS[state] || ''}`, dataset: { state } }, state);
}

const EVENT_CLASS = { 'lease.issued': 'ok', 'lease.renewed': 'accent', 'lease.released': '', 'lease.expired': 'warn',
  'lease.revoked': 'bad', 'lease.transferred': 'info', 'lease.waiting': 'info', 'lease.wait_ended': '',
  'state.written': 'accent', 'task.dead': 'bad', 'task.failed': 'warn', 'task.completed': 'ok',
  'piece.completed': 'ok', 'piece.failed': 'warn', 'piece.expired': 'warn' };
export const eventClass = (type) => EVENT_CLASS[type] || '';

// b64text decodes protobuf JSON bytes; printable text is returned as is,
// anything else as hex.
export function b64text(b) {
  if (!b) return '';
  const bin = atob(b);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  try {
    const s = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    if (!/[\x00-\x08\x0e-\x1f]/.test(s)) return s;
  } catch { /* not UTF-8 */ }
  return [...bytes].map((x) => x.toString(16).padStart(2, '0')).join(' ');
}

// Countdowns: elements with data-deadline (performance.now() ms) and
// data-ttl update together, ten times a second, those on screen only (a
// table of a thousand leases repainted whole ten times a second kept the
// page from answering). Deadlines are anchored on the server's
// timeRemaining, so a skewed browser clock does not matter.
const onScreen = new Set();
const counting = new Set();
const seen = new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (e.isIntersecting) {
      onScreen.add(e.target);
      paint(e.target, performance.now());
    } else onScreen.delete(e.target);
  }
});

export function countdown(remainingMs, ttlMs) {
  const deadline = performance.now() + remainingMs;
  const fill = h('span');
  const text = h('span', { class: 't' });
  const el = h('div', { class: 'timeleft', dataset: { deadline: String(deadline), ttl: String(ttlMs) } },
    h('div', { class: 'bar' }, fill), text);
  paint(el, performance.now());
  counting.add(el);
  seen.observe(el);
  return el;
}

function paint(el, now) {
  const left = Math.max(0, Number(el.dataset.deadline) - now);
  const ttl = Number(el.dataset.ttl) || 1;
  const frac = Math.min(1, left / ttl);
  const bar = el.firstChild;
  bar.firstChild.style.width = `${(frac * 100).toFixed(1)}%`;
  bar.className = `bar${frac < 0.15 ? ' crit' : frac < 0.35 ? ' low' : ''}`;
  el.dataset.left = String(Math.round(left));
  el.lastChild.textContent = fmtDur(left);
}

setInterval(() => {
  const now = performance.now();
  for (const el of onScreen) paint(el, now);
}, 100);

// Countdowns of replaced tables are let go once a second.
setInterval(() => {
  for (const el of counting) {
    if (!el.isConnected) {
      counting.delete(el);
      onScreen.delete(el);
      seen.unobserve(el);
    }
  }
}, 1000);

// confirmDialog asks before an admin action. Resolves to the reason typed
// (withReason) or true, or null when the operator keeps things as they are.
export function confirmDialog(title, text, withReason) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-reason-label').hidden = !withReason;
  document.getElementById('confirm-ok').textContent = title;
  // Enter in the reason confirms (the form's first button would keep).
  const reasonInput = document.getElementById('confirm-reason');
  const onKey = (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      dlg.close('ok');
    }
  };
  reasonInput.addEventListener('keydown', onKey);
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      reasonInput.removeEventListener('keydown', onKey);
      if (dlg.returnValue !== 'ok') return resolve(null);
      resolve(withReason ? document.getElementById('confirm-reason').value : true);
    }, { once: true });
    dlg.returnValue = '';
    dlg.showModal();
  });
}

// The address is the truth about the namespace: ?ns= in the fragment,
// default without it. Each tab has its own address, so its own namespace;
// nothing the browser keeps (localStorage) changes what a link opens.
export function pageNamespace() { return addressNamespace() || 'default'; }

// addressNamespace is the namespace the address names, '' when it names
// none.
function addressNamespace() {
  return new URLSearchParams(location.hash.split('?')[1] || '').get('ns') || '';
}

// inNamespace adds the page's ?ns= to a dashboard link (#/…) that names no
// namespace: opened in a new tab or shared, the link shows the same page.
// (An address names default only where leaving it out would mean another
// namespace: see route in app.js.)
export function inNamespace(link) {
  const ns = addressNamespace();
  const [path, qs] = link.split('?');
  const q = new URLSearchParams(qs || '');
  if (q.has('ns') || !ns) return link;
  q.set('ns', ns);
  return `${path}?${q}`;
}

// href makes a dashboard link from a route and its query; query.ns names
// a namespace other than the page's (a lease's own, on its page).
export function href(path, query = {}) {
  const { ns, ...rest } = query;
  const q = new URLSearchParams(Object.entries(rest).filter(([, v]) => v));
  // An explicit default is written out on a page whose address names a
  // namespace: without ?ns= the link would be given the page's.
  if (ns && (ns !== 'default' || addressNamespace())) q.set('ns', ns);
  return inNamespace(`#${path}${q.size ? `?${q}` : ''}`);
}

// seg encodes a path segment of a route (resources contain slashes).
export const seg = (s) => encodeURIComponent(s);

// single wraps an async fn so that it never runs twice at once: a call
// while it runs makes one more run after it (the periodic refresh and the
// event-driven reload of a view share it).
export function single(fn) {
  let running = null;
  let again = false;
  const run = async () => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await fn();
        } while (again);
      } finally {
        running = null;
      }
    })();
    return running;
  };
  return run;
}

// throttle runs fn at most once per ms, trailing calls coalesced; calls
// while fn (async) still runs make one more run after it, not another
// alongside it: under a busy feed, reloads never pile up.
export function throttle(fn, ms) {
  let timer = null;
  let running = false;
  let again = false;
  const schedule = () => {
    if (timer) return;
    timer = setTimeout(async () => {
      timer = null;
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        await fn();
      } finally {
        running = false;
        if (again) {
          again = false;
          schedule();
        }
      }
    }, ms);
  };
  return schedule;
}
