// Queues: every queue's counts, a queue's tasks, a task's detail.
import * as api from './api.js';
import { leaseLink, loadMore } from './leases.js';
import { h, replace, errorBox, empty, fmtNum, fmtTime, stateBadge, enumName, b64text, confirmDialog, seg, href, throttle, short } from './dom.js';

const TASK_STATES = ['', 'TASK_STATE_QUEUED', 'TASK_STATE_LEASED', 'TASK_STATE_SUCCEEDED', 'TASK_STATE_FAILED', 'TASK_STATE_DEAD', 'TASK_STATE_CANCELLED'];
const COUNT_KEYS = ['queued', 'leased', 'succeeded', 'failed', 'dead', 'cancelled'];

function countCells(st) {
  return COUNT_KEYS.map((k) => h('td', { class: 'num', dataset: { count: k } }, fmtNum((st || {})[k])));
}

export function queues(root, ctx) {
  const body = h('div', { id: 'queue-list' }, empty('Loading…'));
  replace(root, h('h1', {}, `Queues in ${ctx.ns}`), body);
  const load = async () => {
    try {
      const r = await api.call('QueueService', 'ListQueues', { namespace: ctx.ns });
      const qs = r.queues || [];
      replace(body, qs.length === 0 ? empty('No queues in this namespace. Enqueue a task (tenure queue push QUEUE --data …) and it shows here.') :
        h('div', { class: 'card' }, h('table', { id: 'queue-table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'queue'), COUNT_KEYS.map((k) => h('th', { class: 'num' }, k)))),
          h('tbody', {}, qs.map((q) => h('tr', { dataset: { queue: q.queue } },
            h('td', { class: 'name' }, h('a', { href: `#/queues/${seg(q.queue)}` }, q.queue)), countCells(q.stats)))))));
    } catch (e) {
      replace(body, errorBox(e));
    }
  };
  ctx.every(3000, load);
  const reload = throttle(load, 1000);
  ctx.onEvent((ev) => { if (ev.type.startsWith('task.')) reload(); });
}

async function cancel(ns, queue, task) {
  if (!await confirmDialog('Cancel task', `Cancel task ${task.taskId} of queue ${queue} (${enumName(task.state, 'TASK_STATE_')})?`, false)) return null;
  try {
    const r = await api.call('QueueService', 'Cancel', { namespace: ns, queue, taskId: task.taskId });
    return h('div', { class: 'notice', role: 'status' }, `Task ${r.task.taskId} is ${enumName(r.task.state, 'TASK_STATE_')}.`);
  } catch (e) {
    api.noteRefusal(e);
    return errorBox(e);
  }
}

// retry runs a finished or failed task again from its first attempt.
async function retry(ns, queue, task) {
  if (!await confirmDialog('Retry task', `Run task ${task.taskId} of queue ${queue} (${enumName(task.state, 'TASK_STATE_')}) again from its first attempt?`, false)) return null;
  try {
    const r = await api.call('QueueService', 'Retry', { namespace: ns, queue, taskId: task.taskId });
    return h('div', { class: 'notice', role: 'status' }, `Task ${r.task.taskId} is ${enumName(r.task.state, 'TASK_STATE_')} again.`);
  } catch (e) {
    api.noteRefusal(e);
    return errorBox(e);
  }
}

const finished = (s) => ['succeeded', 'dead', 'cancelled'].includes(s);
const cancellable = (s, ns) => !finished(s) && api.may('cancel', ns);
const retryable = (s, ns) => (finished(s) || s === 'failed') && api.may('retry', ns);

// notBefore is when a queued (or failed, waiting to retry) task may be claimed, if that is still ahead
// (a delayed task, or a retry's backoff).
const notBefore = (t) => t.notBefore && ['queued', 'failed'].includes(enumName(t.state, 'TASK_STATE_')) && Date.parse(t.notBefore) > Date.now() ? fmtTime(t.notBefore) : '';

const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

export function queuePage(root, ctx) {
  const queue = ctx.params[0];
  const state = ctx.query.get('state') || '';
  const stats = h('div', { class: 'card', id: 'queue-stats' }, empty('Loading…'));
  const filter = h('select', { id: 'task-state' }, TASK_STATES.map((s) => h('option', { value: s, selected: s === state }, s ? enumName(s, 'TASK_STATE_') : 'any state')));
  filter.addEventListener('change', () => { location.hash = href(`/queues/${seg(queue)}`, { state: filter.value }); });
  const msg = h('div', { id: 'task-message' });
  const body = h('div', { id: 'task-list' }, empty('Loading…'));
  replace(root, h('div', { class: 'crumbs' }, h('a', { href: '#/queues' }, 'Queues'), ` / ${ctx.ns} /`), h('h1', {}, queue),
    stats, h('div', { class: 'filters' }, h('label', {}, 'State', filter)), msg, body);
  let pages = 1;
  const load = async () => {
    await Promise.all([
      api.call('QueueService', 'Stats', { namespace: ctx.ns, queue }).then((st) => {
        replace(stats, h('table', {}, h('thead', {}, h('tr', {}, COUNT_KEYS.map((k) => h('th', { class: 'num' }, k)))), h('tbody', {}, h('tr', {}, countCells(st)))));
      }).catch((e) => replace(stats, errorBox(e))),
      (async () => {
        let tasks = [];
        let next = '';
        for (let i = 0; i < pages; i++) {
          const r = await api.call('QueueService', 'ListTasks', { namespace: ctx.ns, queue, states: state ? [state] : [], pageSize: 200, pageToken: next });
          tasks = tasks.concat(r.tasks || []);
          next = r.nextPageToken || '';
          if (!next) break;
        }
        const why = api.whyNot('cancel', ctx.ns);
        replace(body, tasks.length === 0 ? empty(state ? 'No task in this state.' : 'This queue has no tasks.') : [
          why && h('p', { class: 'muted', id: 'admin-refused' }, `Cancel is not offered: ${why}.`),
          h('table', { id: 'task-table' }, h('thead', {}, h('tr', {}, h('th', {}, 'task'), h('th', {}, 'state'), h('th', { class: 'num' }, 'attempts'),
            h('th', { class: 'num' }, 'priority'), h('th', {}, 'worker'), h('th', {}, 'created'), h('th', {}, 'not before'), h('th', {}, 'last error'), h('th', {}, ''))),
          h('tbody', {}, tasks.map((t) => {
            const s = enumName(t.state, 'TASK_STATE_');
            return h('tr', { dataset: { task: t.taskId, state: s } },
              h('td', { class: 'mono' }, h('a', { href: `#/queues/${seg(queue)}/${seg(t.taskId)}`, title: t.taskId }, short(t.taskId))),
              h('td', {}, stateBadge(s)),
              h('td', { class: 'num' }, `${t.attempts || 0} / ${t.maxAttempts || 0}`),
              h('td', { class: 'num' }, t.priority || 0),
              h('td', { class: 'name' }, t.worker || ''),
              h('td', {}, fmtTime(t.createdAt)),
              h('td', {}, notBefore(t)),
              h('td', { class: 'muted', title: t.lastError || '' }, clip(t.lastError || '', 80)),
              h('td', { class: 'row-actions' }, cancellable(s, ctx.ns) && h('button', { class: 'danger cancel', onclick: async () => {
                const note = await cancel(ctx.ns, queue, t);
                if (note) { replace(msg, note); load(); }
              } }, 'Cancel'), retryable(s, ctx.ns) && h('button', { class: 'retry', title: 'run it again from its first attempt', onclick: async () => {
                const note = await retry(ctx.ns, queue, t);
                if (note) { replace(msg, note); load(); }
              } }, 'Retry')));
          }))),
          next && h('div', { class: 'more' }, loadMore(() => { pages++; return load(); }))]);
      })().catch((e) => replace(body, errorBox(e))),
    ]);
  };
  ctx.every(3000, load);
  const reload = throttle(load, 1000);
  ctx.onEvent((ev) => { if (ev.details && ev.details.queue === queue) reload(); });
}

export function taskPage(root, ctx) {
  const [queue, id] = ctx.params;
  const body = h('div', { id: 'task-detail' }, empty('Loading…'));
  const msg = h('div', { id: 'task-message' });
  replace(root, h('div', { class: 'crumbs' }, h('a', { href: '#/queues' }, 'Queues'), ` / ${ctx.ns} / `, h('a', { href: `#/queues/${seg(queue)}` }, queue), ' /'),
    h('h1', { class: 'mono' }, id), msg, body);
  const load = async () => {
    try {
      const { task: t } = await api.call('QueueService', 'GetTask', { namespace: ctx.ns, queue, taskId: id });
      const s = enumName(t.state, 'TASK_STATE_');
      const row = (k, v, attrs = {}) => [h('dt', {}, k), h('dd', attrs, v || h('span', { class: 'muted' }, '—'))];
      replace(body, h('div', { class: 'card' }, h('dl', { class: 'kv' },
        row('state', stateBadge(s)),
        row('attempts', `${t.attempts || 0} of ${t.maxAttempts || 0}`),
        row('priority', String(t.priority || 0)),
        row('worker', t.worker),
        row('lease', t.leaseId && h('span', { class: 'mono' }, leaseLink(t), t.lease && ' · ', t.lease && h('a', { href: `#/resource/${seg(t.lease.resource)}` }, t.lease.resource))),
        row('created', fmtTime(t.createdAt)), row('claimed', fmtTime(t.claimedAt)), row('finished', fmtTime(t.completedAt)),
        row('not before', fmtTime(t.notBefore)),
        row('last error', t.lastError && h('pre', {}, t.lastError), { id: 'task-last-error' }),
        row('payload', t.payload && h('pre', {}, b64text(t.payload))),
        row('result', t.result && h('pre', {}, b64text(t.result)))),
      cancellable(s, ctx.ns) && h('p', {}, h('button', { class: 'danger cancel', onclick: async () => {
        const note = await cancel(ctx.ns, queue, t);
        if (note) { replace(msg, note); load(); }
      } }, 'Cancel task')),
      retryable(s, ctx.ns) && h('p', {}, h('button', { class: 'retry', title: 'run it again from its first attempt', onclick: async () => {
        const note = await retry(ctx.ns, queue, t);
        if (note) { replace(msg, note); load(); }
      } }, 'Retry task'))));
    } catch (e) {
      replace(body, errorBox(e));
    }
  };
  ctx.every(3000, load);
}
