// The dashboard's only way to the server: Connect JSON calls, the Watch
// stream over the Connect streaming protocol, and /metrics.

const TOKEN_KEY = 'tenure.token';
// The namespace is not kept here: the address says it (?ns=), per tab.
// Dashboards before that kept it under this key; it is let go.
localStorage.removeItem('tenure.namespace');

export function token() { return localStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) {
  if (t !== token()) refused.admin = '';
  t ? localStorage.setItem(TOKEN_KEY, t) : localStorage.removeItem(TOKEN_KEY);
}

// refused.admin holds the server's refusal of an admin action (revoke,
// cancel) for the current token; the views then stop offering them.
// refused.reads counts PERMISSION_DENIED answers to every other call (a
// view's reads): asking again gets the same answer, so a view stops
// polling once it grows (see ctx.every in app.js).
export const refused = { admin: '', reads: 0 };

// ACTIONS are the calls an operator makes with a click; their refusals are
// shown where they were asked for, and do not stop a view's polling.
const ACTIONS = new Set(['LeaseService/Revoke', 'QueueService/Cancel', 'QueueService/Retry']);

// noteRefusal records err when it refuses the caller rather than the input.
export function noteRefusal(err) {
  if (err instanceof ApiError && (err.reason === 'PERMISSION_DENIED' || err.reason === 'UNAUTHENTICATED')) refused.admin = err.message;
}

// me is the caller as ClusterService.WhoAmI describes it: state is
// 'unknown' (not asked yet, or the server cannot say), 'open' (the server
// runs without authentication: everyone may do everything),
// 'unauthenticated' (it needs a token and has none that it accepts;
// error says why) or 'authenticated' (principal, roles, namespaces).
export const me = { state: 'unknown', principal: '', roles: [], namespaces: [], method: '', error: '' };

// whoAmI asks the server who the current token belongs to and updates me.
export async function whoAmI() {
  const tok = token();
  let next;
  try {
    const r = await call('ClusterService', 'WhoAmI');
    next = r.authenticated
      ? { state: 'authenticated', principal: r.principal || '', roles: r.roles || [], namespaces: r.namespaces || [], method: r.method || '', error: '' }
      : { state: 'open', principal: '', roles: [], namespaces: [], method: '', error: '' };
  } catch (e) {
    // A server from before WhoAmI, or one out of reach: fall back to
    // offering everything and learning from refusals.
    next = e instanceof ApiError && e.code === 'unauthenticated'
      ? { state: 'unauthenticated', principal: '', roles: [], namespaces: [], method: '', error: e.message }
      : { state: 'unknown', principal: '', roles: [], namespaces: [], method: '', error: e instanceof ApiError ? e.message : String(e) };
  }
  if (tok === token()) Object.assign(me, next); // a newer token won meanwhile
  return me;
}

// matchNamespace is the server's namespace pattern rule ("team-*", "*").
export function matchNamespace(pattern, ns) {
  return pattern.endsWith('*') ? ns.startsWith(pattern.slice(0, -1)) : pattern === ns;
}

// ROLES_OF are the roles that may take each admin action (admin passes
// every check on the server); see internal/server/access.go.
const ROLES_OF = { revoke: ['admin'], cancel: ['admin', 'worker'], retry: ['admin', 'worker'] };

// may says whether to offer action ('revoke', 'cancel', 'retry') in namespace ns:
// what WhoAmI said when it said something, and not after the server
// refused the current token an admin action.
export function may(action, ns) {
  if (refused.admin) return false;
  if (me.state === 'unauthenticated') return false;
  if (me.state !== 'authenticated') return true;
  return me.roles.some((r) => ROLES_OF[action].includes(r)) && me.namespaces.some((p) => matchNamespace(p, ns));
}

// whyNot says why action is not offered in ns ('' when it is).
export function whyNot(action, ns) {
  if (may(action, ns)) return '';
  if (refused.admin) return `the server refused an admin action for this token (${refused.admin})`;
  if (me.state === 'unauthenticated') return 'the server needs a token';
  const roles = me.roles.length ? me.roles.join(', ') : 'no role';
  return `${me.principal} (${roles}; namespaces ${me.namespaces.join(', ') || 'none'}) may not ${action} in ${ns}`;
}

// onlyNamespace is the one namespace the signed-in principal may use, when
// it has exactly one and no wildcard; '' otherwise.
export function onlyNamespace() {
  const ns = me.state === 'authenticated' && me.namespaces.length === 1 ? me.namespaces[0] : '';
  return ns.includes('*') ? '' : ns;
}

// ApiError is a Connect error: code (e.g. "permission_denied"), reason
// (Tenure's machine-readable reason, e.g. "LEASE_HELD") and message.
export class ApiError extends Error {
  constructor(code, message, reason) {
    super(message);
    this.code = code || 'unknown';
    this.reason = reason || reasonOf(message) || this.code.toUpperCase();
  }
  // describe is the text shown to the operator.
  describe() {
    let hint = '';
    if (this.code === 'unauthenticated') hint = '\nEnter a valid token in the header and press Apply.';
    if (this.code === 'permission_denied' && this.reason === 'PERMISSION_DENIED') hint = '\nThe token in use does not allow this.';
    return `${this.code}: ${this.message}${hint}`;
  }
}

function reasonOf(message) {
  const m = /^([A-Z][A-Z_]+):/.exec(message || '');
  return m ? m[1] : '';
}

function errorFrom(body, status) {
  if (body && typeof body === 'object' && body.code) {
    let reason = '';
    for (const d of body.details || []) {
      if (d.debug && d.debug.reason) reason = d.debug.reason;
    }
    return new ApiError(body.code, body.message || '', reason);
  }
  return new ApiError('unknown', `HTTP ${status}`);
}

function headers(contentType) {
  const h = { 'Content-Type': contentType, 'Connect-Protocol-Version': '1' };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

// call makes a unary Connect JSON call: call('LeaseService', 'List', {...}).
export async function call(service, method, body = {}, signal) {
  let res;
  try {
    res = await fetch(`/tenure.v1.${service}/${method}`, {
      method: 'POST', headers: headers('application/json'), body: JSON.stringify(body), signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('unavailable', `cannot reach the server: ${e.message}`);
  }
  const text = await res.text();
  let data = {};
  if (text) {
    try { data = JSON.parse(text); } catch { throw new ApiError('unknown', `HTTP ${res.status}: ${text.slice(0, 200)}`); }
  }
  if (!res.ok) {
    const err = errorFrom(data, res.status);
    if (err.reason === 'PERMISSION_DENIED' && !ACTIONS.has(`${service}/${method}`)) refused.reads++;
    throw err;
  }
  return data;
}

// Envelope flags of the Connect streaming protocol.
const END_STREAM = 0x02;
const COMPRESSED = 0x01;

function envelope(obj) {
  const payload = new TextEncoder().encode(JSON.stringify(obj));
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, 5);
  return out;
}

// watch follows LeaseService.Watch for req ({namespace, prefix, afterIndex})
// and calls onEvent for each event and onState({state, detail}) as the
// stream opens, drops and reconnects. A dropped stream resumes after the
// last index seen. Returns a function that stops it (and closes the
// stream's connection).
export function watch(req, onEvent, onState) {
  let stopped = false;
  let ctrl = null;
  let after = req.afterIndex || '0';
  let delay = 500;
  const run = async () => {
    while (!stopped) {
      ctrl = new AbortController();
      let err = null;
      try {
        onState({ state: 'connecting' });
        await stream({ ...req, afterIndex: after }, ctrl.signal, (ev) => {
          after = ev.index;
          delay = 500;
          onEvent(ev);
        }, () => onState({ state: 'live' }));
        err = new ApiError('unavailable', 'the stream ended');
      } catch (e) {
        err = e;
      }
      if (stopped) return;
      if (err instanceof ApiError && err.code === 'invalid_argument' && after !== '0') {
        // The feed no longer holds our position: start live again.
        onState({ state: 'gap', detail: err.message });
        after = '0';
      } else {
        onState({ state: 'down', detail: err instanceof ApiError ? err.describe() : String(err) });
        // Refused for want of a token, or of access to the namespace:
        // asking again gets the same answer (Apply, or another namespace,
        // starts a new watch).
        if (err instanceof ApiError && (err.code === 'unauthenticated' || err.reason === 'PERMISSION_DENIED')) return;
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 8000);
    }
  };
  run();
  return () => { stopped = true; if (ctrl) ctrl.abort(); };
}

async function stream(req, signal, onEvent, onOpen) {
  let res;
  try {
    res = await fetch('/tenure.v1.LeaseService/Watch', {
      method: 'POST', headers: headers('application/connect+json'), body: envelope(req), signal,
    });
  } catch (e) {
    if (signal.aborted) throw e;
    throw new ApiError('unavailable', `cannot reach the server: ${e.message}`);
  }
  if (!res.ok) {
    let data = {};
    try { data = await res.json(); } catch { /* not JSON */ }
    throw errorFrom(data, res.status);
  }
  onOpen();
  const reader = res.body.getReader();
  const text = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    // Only the unread tail is carried over (one copy per read): slicing
    // the buffer after each message took time growing with the square of
    // a backlog (16,000 events arriving at once took 45 s).
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf); joined.set(value, buf.length);
    const dv = new DataView(joined.buffer);
    let at = 0;
    while (joined.length - at >= 5) {
      const flags = dv.getUint8(at);
      const len = dv.getUint32(at + 1);
      if (joined.length - at < 5 + len) break;
      const msg = JSON.parse(text.decode(joined.subarray(at + 5, at + 5 + len)));
      at += 5 + len;
      if (flags & COMPRESSED) throw new ApiError('internal', 'compressed stream message (the dashboard does not ask for compression)');
      if (flags & END_STREAM) {
        if (msg.error) throw errorFrom(msg.error, 200);
        return;
      }
      if (msg.event) onEvent(msg.event);
    }
    buf = joined.slice(at);
  }
}

// metrics fetches /metrics and returns {name -> [{labels, value}]} for the
// tenure_* series.
export async function metrics(signal) {
  const h = {};
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  let res;
  try {
    res = await fetch('/metrics', { headers: h, signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('unavailable', `cannot reach the server: ${e.message}`);
  }
  if (!res.ok) throw new ApiError('unavailable', `/metrics answered HTTP ${res.status}`);
  return parseMetrics(await res.text());
}

// parseMetrics reads the Prometheus text format (only what the dashboard
// needs: tenure_* samples with their labels).
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith('tenure_')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    }
    (out[m[1]] ||= []).push({ labels, value: Number(m[4]) });
  }
  return out;
}
