// The trace viewer of `reson serve`. Everything it shows comes from the
// model, tools or users, so it is untrusted: data only ever reaches the page
// as text nodes (textContent), never as markup.

import {
$, enc, el, statusBadge, tokensOf, when, ago, duration, dollars, statsText, textOf, prettyJson,
} from './dom.js';
import { renderTimeline } from './timeline.js';
import { renderCosts } from './costs.js';
import { renderGraph, treeOf, pathTo } from './graph.js';
import { renderFiles } from './files.js';
import { renderDecisions } from './decisions.js';



const TOKEN_KEY = 'reson.token';
const LIST_REFRESH_MS = 2000;
const APPROVALS_REFRESH_MS = 2000;
const MAX_EVENTS_SHOWN = 200;

// ---- token and API ----------------------------------------------------

let token = sessionStorage.getItem(TOKEN_KEY) || '';
let tokenWaiters = null;

/** Asks the user for a token; resolves true once one is given. */
function askToken(reason) {
  if (!tokenWaiters) {
    tokenWaiters = [];
    $('token-reason').textContent = reason;
    $('token-input').value = '';
    $('token-dialog').showModal();
  }
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function settleToken(given) {
  const waiters = tokenWaiters || [];
  tokenWaiters = null;
  if ($('token-dialog').open) $('token-dialog').close();
  for (const resolve of waiters) resolve(given);
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** One JSON request to the API; on 401 asks for a token and tries again. */
async function api(path, options = {}) {
  for (;;) {
    const headers = { Accept: 'application/json' };
    if (options.body !== undefined) headers['Content-Type'] = 'application/json';
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, {
        method: options.method || 'GET',
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        cache: 'no-store',
      });
    } catch (e) {
      setConnection('server unreachable');
      throw new ApiError(0, 'unreachable', 'The server cannot be reached.');
    }
    setConnection('');
    if (response.status === 401) {
      const reason = token
        ? 'The server refused this token. Enter the right one.'
        : 'This server needs a token.';
      if (await askToken(reason)) continue;
      throw new ApiError(401, 'unauthorized', 'No token: the server answers only with one.');
    }
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      const error = (body && body.error) || {};
      throw new ApiError(response.status, error.code || `http_${response.status}`,
        error.message || response.statusText || `HTTP ${response.status}`);
    }
    return body;
  }
}

function setConnection(text) {
  $('connection').textContent = text;
}

function showError(message) {
  $('error').textContent = message;
  $('error').hidden = false;
}

function clearError() {
  $('error').hidden = true;
  $('error').textContent = '';
}

// ---- images -----------------------------------------------------------

// blob: URLs of the images shown, by trace and name: each is fetched once.
const imageUrls = new Map();

/** An image kept beside message `m`, drawn inline, large on click. An
 * <img> cannot send the token, so the bytes are fetched with it and shown
 * from a blob: URL. */
function imageOf(m, part) {
  const alt = `image ${part.name} (${part.width}×${part.height}, ${part.bytes} bytes)`;
  const img = el('img', { class: 'msg-image', alt });
  const key = `${m.trace_id}/${part.name}`;
  if (!imageUrls.has(key)) {
    const url = fetchImage(`/api/traces/${enc(m.trace_id)}/images/${enc(part.name)}`);
    url.catch(() => imageUrls.delete(key));
    imageUrls.set(key, url);
  }
  imageUrls.get(key).then((url) => { img.src = url; }, (e) => { img.alt += `: ${e.message}`; });
  const enlarge = el('button', {
    type: 'button', class: 'image-button', 'aria-label': `Show ${part.name} large`,
    onclick: () => {
      $('image-large').src = img.src;
      $('image-large').alt = alt;
      $('image-caption').textContent = `${part.name} · ${part.width}×${part.height}`;
      $('image-dialog').showModal();
    },
  }, img);
  return el('figure', { class: 'msg-figure' }, enlarge, el('figcaption', { text: part.name }));
}

async function fetchImage(path) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { headers });
  if (!response.ok) throw new Error(`not loaded (HTTP ${response.status})`);
  return URL.createObjectURL(await response.blob());
}

function traceLink(trace) {
  return el('a', { href: `#/traces/${enc(trace.id)}`, text: trace.task || trace.id });
}

// ---- asking before a change ---------------------------------------------

/**
 * Asks before an action changes anything: resolves with the text typed
 * (when `input` asks for one) and the checkbox's state, or null when
 * cancelled.
 */
function confirmAction({ title, text, input, check, confirm }) {
  const dialog = $('confirm-dialog');
  $('confirm-title').textContent = title;
  $('confirm-text').textContent = text;
  $('confirm-input-label').hidden = !input;
  $('confirm-input').value = (input && input.value) || '';
  $('confirm-input-caption').textContent = (input && input.label) || '';
  $('confirm-check-label').hidden = !check;
  $('confirm-check').checked = !!(check && check.value);
  $('confirm-check-caption').textContent = (check && check.label) || '';
  $('confirm-ok').textContent = confirm;
  return new Promise((resolve) => {
    const done = (answer) => {
      dialog.removeEventListener('close', onClose);
      $('confirm-form').onsubmit = null;
      $('confirm-cancel').onclick = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onClose = () => done(null);
    dialog.addEventListener('close', onClose);
    $('confirm-form').onsubmit = (e) => {
      e.preventDefault();
      done({ text: $('confirm-input').value, checked: $('confirm-check').checked });
    };
    $('confirm-cancel').onclick = () => done(null);
    dialog.showModal();
  });
}

// ---- traces list ------------------------------------------------------

const list = { offset: 0, limit: 50, total: 0, loading: false, again: false, shown: '', open: new Set() };

function listQuery() {
  const query = new URLSearchParams({ limit: String(list.limit), offset: String(list.offset) });
  const value = (id) => $(id).value.trim();
  if (value('status-filter')) query.set('status', value('status-filter'));
  if ($('roots-only').checked) query.set('root_only', 'true');
  if (value('user-filter')) query.set('user', value('user-filter'));
  if (value('model-filter')) query.set('model', value('model-filter'));
  if (value('cost-filter')) query.set('min_cost', value('cost-filter'));
  // Dates are the user's local days: from the start of `from` to the end
  // of `to`.
  if (value('from-filter')) query.set('since_ms', String(new Date(`${value('from-filter')}T00:00`).getTime()));
  if (value('to-filter')) query.set('until_ms', String(new Date(`${value('to-filter')}T00:00`).getTime() + 86400000));
  if (value('sort-by') !== 'updated') query.set('sort', value('sort-by'));
  return query;
}

async function loadList() {
  if ($('list-view').hidden) return;
  // A filter changed while a load runs must not be lost to the load in
  // flight, which asked with the old one: load again once it ends.
  if (list.loading) {
    list.again = true;
    return;
  }
  list.loading = true;
  list.again = false;
  try {
    const data = await api(`/api/traces?${listQuery()}`);
    const subs = new Map();
    for (const id of list.open) {
      if (data.sub_trace_counts && data.sub_trace_counts[id]) {
        subs.set(id, (await api(`/api/traces?parent=${enc(id)}&limit=1000`)).traces);
      }
    }
    // Asked with filters since changed: the load that follows shows them.
    if ($('list-view').hidden || list.again) return;
    clearError();
    renderList(data, subs);
  } catch (e) {
    showError(`Could not load the traces: ${e.message}`);
  } finally {
    list.loading = false;
    if (list.again) loadList();
  }
}

function traceDuration(trace) {
  const end = trace.status === 'running' ? Date.now() : (trace.finished_at_ms || trace.updated_at_ms);
  return Math.max(0, end - trace.created_at_ms);
}

function traceRow(trace, depth, subCount) {
  const open = list.open.has(trace.id);
  const fold = subCount ? el('button', {
    type: 'button', class: 'link fold', 'data-fold': trace.id, 'aria-expanded': open ? 'true' : 'false',
    text: `${open ? '▾' : '▸'} ${subCount} sub-trace${subCount === 1 ? '' : 's'}`,
    onclick: () => {
      if (open) list.open.delete(trace.id); else list.open.add(trace.id);
      list.shown = '';
      loadList();
    },
  }) : null;
  return el('tr', { 'data-trace-id': trace.id, 'data-depth': depth, class: depth ? 'sub-row' : null },
    el('td', {}, statusBadge(trace.status)),
    el('td', {}, depth ? el('span', { class: 'muted', text: '↳ ' }) : null, traceLink(trace), ' ',
      el('span', { class: 'muted', text: trace.id }), fold ? ' ' : null, fold),
    el('td', { class: 'num', text: (trace.totals && trace.totals.messages) || 0 }),
    el('td', { class: 'num', text: tokensOf(trace.totals && trace.totals.usage) }),
    el('td', { class: 'num', text: dollars(trace.totals && trace.totals.cost) }),
    el('td', { class: 'num', text: duration(traceDuration(trace)) }),
    el('td', { text: [trace.provider, trace.model].filter(Boolean).join(' / ') }),
    el('td', { text: trace.uid || '' }),
    el('td', { title: when(trace.updated_at_ms), text: ago(trace.updated_at_ms) }));
}

function renderList(data, subs) {
  list.total = data.total || 0;
  $('prev-page').disabled = list.offset === 0;
  $('next-page').disabled = list.offset + list.limit >= list.total;
  const first = list.total ? list.offset + 1 : 0;
  $('trace-count').textContent = `${first}–${list.offset + data.traces.length} of ${list.total}`;
  $('no-traces').hidden = data.traces.length > 0;
  // Rebuilding only on change keeps keyboard focus between refreshes.
  const shown = JSON.stringify([data, [...subs]]);
  if (shown === list.shown) return;
  list.shown = shown;
  const counts = data.sub_trace_counts || {};
  const rows = data.traces.flatMap((trace) => [
    traceRow(trace, 0, counts[trace.id] || 0),
    ...(subs.get(trace.id) || []).map((sub) => traceRow(sub, 1, 0)),
  ]);
  $('traces').tBodies[0].replaceChildren(...rows);
}

function showList() {
  closeTrace();
  $('trace-view').hidden = true;
  $('list-view').hidden = false;
  document.title = 'Reson traces';
  loadList();
}

// ---- one trace --------------------------------------------------------

const TABS = ['messages', 'timeline', 'costs', 'graph', 'files', 'decisions'];
// The events a trace page keeps (messages come from their own endpoint).
const KEPT_EVENTS = ['trace_started', 'tool_started', 'tool_finished', 'permission_decided',
  'model_failed', 'compacted', 'trace_finished'];

let view = null;
let tab = 'messages';

async function showTrace(id) {
  closeTrace();
  $('list-view').hidden = true;
  $('trace-view').hidden = false;
  list.shown = '';
  const v = {
    id, trace: null, running: false, messages: new Map(), head: null, lastEventId: 0, loads: 0,
    ws: null, timer: null, retryMs: 500, closed: false, open: new Set(), deltas: 0,
    events: [], subTraces: [], sub: new Map(), goalTree: null, checkpoints: [], replays: [],
    selected: null, dirty: new Set(TABS), redraw: null, refresh: null,
  };
  view = v;
  $('trace-title').textContent = id;
  document.title = `Trace ${id} · Reson`;
  for (const part of ['trace-meta', 'messages', 'goals', 'subtraces', 'events', ...TABS.slice(1).map((t) => `tab-${t}`)]) {
    $(part).replaceChildren();
  }
  clearStream(v);
  $('stop-button').hidden = true;
  $('live-state').textContent = '';
  $('restore-state').textContent = '';
  $('continue-form').hidden = true;
  delete $('trace-view').dataset.live;
  delete $('trace-view').dataset.status;
  delete $('trace-view').dataset.loaded;
  try {
    const detail = await api(`/api/traces/${enc(id)}`);
    if (view !== v) return;
    // Events after this id are replayed by the socket; messages fetched
    // below may already hold some of them, and are keyed by sequence.
    v.lastEventId = detail.trace.last_event_id || 0;
    renderDetail(v, detail);
    await loadAll(v, ++v.loads, v.lastEventId);
    if (view !== v) return;
    clearError();
    $('trace-view').dataset.loaded = 'true';
    connect(v);
  } catch (e) {
    if (view === v) showError(`Could not load trace ${id}: ${e.message}`);
  }
}

/** Messages, stored events, checkpoints and the sub-traces' calls, as
 * load `gen` of the view, asked when the socket had brought events up to
 * `seen`. */
async function loadAll(v, gen, seen) {
  const kinds = enc(KEPT_EVENTS.join(','));
  const [messages, events, checkpoints] = await Promise.all([
    api(`/api/traces/${enc(v.id)}/messages?mode=all`),
    api(`/api/traces/${enc(v.id)}/events?kinds=${kinds}`),
    api(`/api/traces/${enc(v.id)}/checkpoints`),
  ]);
  const subs = await Promise.all(v.subTraces.map(async (sub) => {
    try {
      const [m, e] = await Promise.all([
        api(`/api/traces/${enc(sub.id)}/messages?mode=all`),
        api(`/api/traces/${enc(sub.id)}/events?kinds=${kinds}`),
      ]);
      return [sub.id, { messages: m.messages, events: e.events }];
    } catch (e) {
      return [sub.id, null];
    }
  }));
  if (view !== v || gen !== v.loads) return;
  for (const message of messages.messages) v.messages.set(message.sequence, message);
  // Messages the socket brought meanwhile are newer than this answer's
  // head: keep theirs, and look again once they stop.
  if (v.lastEventId === seen) v.head = messages.head_sequence ?? null;
  else refreshSoon(v);
  // The socket may have brought some of these already.
  keepEvents(v, events.events);
  v.checkpoints = checkpoints.checkpoints;
  v.sub = new Map(subs.filter(([, data]) => data));
  changed(v, TABS);
}

/** Adds stored events to the trace view's, each once, in order. */
function keepEvents(v, events) {
  const byId = new Map(v.events.map((e) => [e.id, e]));
  for (const e of events) if (KEPT_EVENTS.includes(e.kind)) byId.set(e.id, e);
  v.events = [...byId.values()].sort((a, b) => a.id - b.id);
}

function closeTrace() {
  if (!view) return;
  const v = view;
  view = null;
  v.closed = true;
  clearTimeout(v.timer);
  clearTimeout(v.redraw);
  clearTimeout(v.refresh);
  if (v.ws) v.ws.close(1000);
}

/** Reloads the trace shortly, once for a burst of events. */
function refreshSoon(v) {
  if (v.refresh) return;
  v.refresh = setTimeout(() => {
    v.refresh = null;
    if (view === v) refreshTrace(v);
  }, 400);
}

/** Loads the trace again. An older refresh answering after a newer one is
 * dropped; one that answers after the socket brought events keeps what
 * they said (status, running) and asks again. */
async function refreshTrace(v) {
  const gen = ++v.loads;
  const seen = v.lastEventId;
  try {
    const detail = await api(`/api/traces/${enc(v.id)}`);
    if (view !== v || gen !== v.loads) return;
    const live = { status: v.trace.status, running: v.running };
    renderDetail(v, detail);
    if (v.lastEventId !== seen) {
      v.trace.status = live.status;
      v.running = live.running;
      renderMeta(v);
      refreshSoon(v);
    }
    await loadAll(v, gen, seen);
  } catch (e) {
    if (view === v) showError(`Could not refresh the trace: ${e.message}`);
  }
}

/** Marks views as out of date and draws the one shown, once per frame:
 * a burst of live events redraws once. */
function changed(v, tabs) {
  for (const t of tabs) v.dirty.add(t);
  if (v.redraw !== null) return;
  v.redraw = setTimeout(() => {
    v.redraw = null;
    if (view === v) drawTab(v);
  }, 30);
}

function drawTab(v) {
  if (!v.dirty.has(tab)) return;
  v.dirty.delete(tab);
  const jump = (seq) => jumpTo(v, seq);
  const openTrace = (id) => { location.hash = `#/traces/${enc(id)}`; };
  switch (tab) {
    case 'messages': renderMessages(v); break;
    case 'timeline': renderTimeline($('tab-timeline'), v, jump, openTrace); break;
    case 'costs': renderCosts($('tab-costs'), v, jump); break;
    case 'graph': renderGraph($('tab-graph'), v, (leaf) => pickBranch(v, leaf)); break;
    case 'files': renderFiles($('tab-files'), v, jump); break;
    case 'decisions': renderDecisions($('tab-decisions'), v, jump); break;
    default: break;
  }
  $(`tab-${tab}`).dataset.drawn = String(Number($(`tab-${tab}`).dataset.drawn || 0) + 1);
}

function showTab(name) {
  tab = TABS.includes(name) ? name : 'messages';
  for (const t of TABS) {
    const selected = t === tab;
    $(`tab-button-${t}`).setAttribute('aria-selected', selected ? 'true' : 'false');
    $(`tab-button-${t}`).tabIndex = selected ? 0 : -1;
    $(`tab-${t}`).hidden = !selected;
  }
  if (view) drawTab(view);
}

/** Shows message `seq` in the messages view, on its branch. */
function jumpTo(v, seq) {
  if (!v.messages.has(seq)) return;
  const main = pathTo(v.messages, v.selected ?? v.head);
  if (!main.has(seq) && v.selected !== null) {
    const tree = treeOf(v.messages);
    let leaf = seq;
    for (let kids = tree.children.get(leaf); kids && kids.length; kids = tree.children.get(leaf)) leaf = kids[kids.length - 1];
    v.selected = leaf;
    v.dirty.add('messages').add('graph');
  }
  showTab('messages');
  const node = document.querySelector(`#messages [data-seq="${Number(seq)}"]`);
  if (!node) return;
  node.scrollIntoView({ block: 'center' });
  for (const old of document.querySelectorAll('#messages .flash')) old.classList.remove('flash');
  node.classList.add('flash');
  node.focus({ preventScroll: true });
}

/** Reads the branch ending at `leaf` as the column. */
function pickBranch(v, leaf) {
  v.selected = leaf === v.head ? null : leaf;
  changed(v, ['messages', 'graph']);
  showTab('messages');
}

function renderDetail(v, detail) {
  v.trace = detail.trace;
  // A run's claim outlives its `trace_finished` for a moment: the status,
  // stored first, says it ended.
  v.running = !!detail.running && detail.trace.status === 'running';
  v.goalTree = detail.goal_tree;
  v.subTraces = detail.sub_traces || [];
  v.replays = detail.replays || [];
  renderMeta(v);
  renderGoals(detail.goal_tree, v.running || v.trace.status === 'running');
  const subs = v.subTraces;
  $('subtraces').replaceChildren(...(subs.length
    ? subs.map((t) => el('li', { 'data-trace-id': t.id }, statusBadge(t.status), ' ', traceLink(t)))
    : [el('li', { class: 'muted', text: 'None.' })]));
  changed(v, ['timeline', 'costs', 'files']);
}

function renderMeta(v) {
  const t = v.trace;
  $('trace-title').textContent = t.task || t.id;
  const rows = [
    ['Id', t.id],
    ['Status', statusBadge(t.status)],
    ['Mode', `${t.mode} · ${t.agent_type}`],
    ['Model', [t.provider, t.model].filter(Boolean).join(' / ') || '—'],
    ['Totals', statsText(t.totals)],
    ['Started', when(t.created_at_ms)],
    ['Updated', when(t.updated_at_ms)],
  ];
  if (t.uid) rows.push(['User', t.uid]);
  if (t.parent_trace_id) {
    rows.push(['Parent', el('a', { href: `#/traces/${enc(t.parent_trace_id)}`, text: t.parent_trace_id })]);
  }
  if (t.result_summary) rows.push(['Result', t.result_summary]);
  if (t.error_message) rows.push(['Error', t.error_message]);
  $('trace-meta').replaceChildren(...rows.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', {}, value)]));
  $('trace-view').dataset.status = t.status;
  $('stop-button').hidden = !v.running;
  $('continue-form').hidden = v.running;
}

// The tree: a run of only children is drawn as a column; where a message
// has several children (a rewind or a regeneration) each child starts a
// branch, the one on the main path marked. With a branch picked (in the
// graph), that branch is the column and the others are named at their
// branch points.
function renderMessages(v) {
  const { children, roots } = treeOf(v.messages);
  const main = pathTo(v.messages, v.head);
  const tree = { v, children, main, picked: v.selected !== null ? pathTo(v.messages, v.selected) : null };
  const root = document.createDocumentFragment();
  if (tree.picked) {
    root.append(el('p', { class: 'picked-note', id: 'picked-note' },
      `Reading the branch that ends at #${v.selected}. `,
      el('button', { type: 'button', class: 'link', text: 'Back to every branch', onclick: () => pickBranch(v, v.head) })));
  }
  const rootMessages = roots.map((s) => v.messages.get(s));
  if (rootMessages.length) renderSiblings(tree, rootMessages, null, root);
  else root.append(el('p', { class: 'muted', text: 'No messages yet.' }));
  $('messages').replaceChildren(root);
  $('messages').dataset.view = tree.picked ? 'branch' : 'tree';
}

function renderSiblings(tree, siblings, parent, into) {
  if (siblings.length === 1) {
    renderChain(tree, siblings[0], into);
    return;
  }
  if (tree.picked) {
    const next = siblings.find((m) => tree.picked.has(m.sequence));
    const others = siblings.filter((m) => m !== next);
    into.append(el('p', { class: 'other-branches muted', 'data-branch-point': parent ?? '' },
      `Other branches here: `, others.map((m) => el('button', {
        type: 'button', class: 'link', 'data-pick': m.sequence, text: `from #${m.sequence} `,
        onclick: () => pickBranch(tree.v, leafOf(tree, m.sequence)),
      }))));
    if (next) renderChain(tree, next, into);
    return;
  }
  const label = parent === null ? 'Branches at the start' : `Branches after message ${parent}`;
  const box = el('div', { class: 'branches', role: 'group', 'aria-label': label });
  for (const m of siblings) {
    const onMain = tree.main.has(m.sequence);
    const branch = el('div', { class: `branch${onMain ? ' on-main' : ''}`, 'data-branch-from': m.sequence },
      el('div', { class: 'branch-label', text: onMain ? `main path, from #${m.sequence}` : `other branch, from #${m.sequence}` }));
    renderChain(tree, m, branch);
    box.append(branch);
  }
  into.append(box);
}

function leafOf(tree, seq) {
  let s = seq;
  for (let kids = tree.children.get(s); kids && kids.length; kids = tree.children.get(s)) s = kids[kids.length - 1];
  return s;
}

function renderChain(tree, first, into) {
  for (let m = first; ;) {
    into.append(renderMessage(tree.v, m, tree.main.has(m.sequence)));
    const kids = (tree.children.get(m.sequence) || []).map((s) => tree.v.messages.get(s));
    if (kids.length !== 1) {
      if (kids.length > 1) renderSiblings(tree, kids, m.sequence, into);
      return;
    }
    m = kids[0];
  }
}

function renderMessage(v, m, onMain) {
  const role = String(m.role).replace(/[^a-z]/g, '');
  const facts = [];
  if (m.usage && tokensOf(m.usage)) facts.push(`${tokensOf(m.usage)} tokens`);
  if (m.cost) facts.push(dollars(m.cost));
  if (m.duration_ms) facts.push(duration(m.duration_ms));
  if (m.attempts > 1) facts.push(`${m.attempts} attempts`);
  if (m.finish_reason) facts.push(m.finish_reason);
  if (m.goal_id) facts.push(`goal ${m.goal_id}`);
  if (m.synthetic) facts.push('written by the host');
  const node = el('article', {
    class: `msg role-${role}${onMain ? ' on-main' : ''}`,
    tabindex: '-1',
    'data-seq': m.sequence,
    'data-parent': m.parent_sequence ?? '',
    'data-main': onMain ? 'true' : 'false',
    'aria-label': `Message ${m.sequence}, ${role}${onMain ? ', main path' : ''}`,
  }, el('header', {},
    el('span', { class: 'role', text: role }),
    el('span', { text: `#${m.sequence}` }),
    onMain ? el('span', { class: 'main-mark', text: 'main path' }) : null,
    facts.map((f) => el('span', { text: f }))));
  if (m.reasoning) node.append(disclosure(v, `r${m.sequence}`, 'reasoning', el('pre', { text: m.reasoning })));
  const text = textOf(m);
  if (role === 'tool') {
    const call = m.tool_call_id ? ` (${m.tool_call_id})` : '';
    node.append(disclosure(v, `t${m.sequence}`, `result of ${m.name || 'a tool'}${call}`, el('pre', { text })));
  } else if (text) {
    node.append(el('div', { class: 'text', text }));
  }
  for (const part of m.content || []) {
    if (part.type === 'image') node.append(imageOf(m, part));
  }
  for (const call of m.tool_calls || []) {
    node.append(disclosure(v, `c${m.sequence}:${call.id}`, `tool call: ${call.name} (${call.id})`,
      el('pre', { text: prettyJson(call.arguments) })));
  }
  if (!v.running) node.append(messageActions(v, m));
  return node;
}

/** Rewind here (with or without the files), and regenerate an answer. */
function messageActions(v, m) {
  const buttons = [
    el('button', {
      type: 'button', class: 'rewind', 'data-action': 'rewind', 'data-rewind': m.sequence,
      text: 'Rewind here…', onclick: () => rewind(v, m.sequence),
    }),
  ];
  if (m.role === 'assistant' && m.parent_sequence !== null && m.parent_sequence !== undefined) {
    buttons.push(el('button', {
      type: 'button', class: 'regenerate', 'data-action': 'regenerate', 'data-regenerate': m.sequence,
      text: 'Regenerate…', onclick: () => regenerate(v, m),
    }));
  }
  return el('div', { class: 'msg-actions' }, buttons);
}

/** Starts a run of the trace (`body` as `POST /api/traces/{id}/run`
 * takes it), saying what started. A 409 lists the files changed outside
 * Reson since, which the server would not overwrite. */
async function startRun(v, body, what) {
  $('restore-state').textContent = `${what}…`;
  const before = v.lastEventId;
  try {
    const started = await api(`/api/traces/${enc(v.id)}/run`, { method: 'POST', body });
    if (view !== v) return;
    $('restore-state').textContent = `${what}: ${started.mode} started`;
    clearError();
    // A short run may have ended on the socket before this answer came.
    v.running = !v.events.some((e) => e.kind === 'trace_finished' && e.id > before);
    v.selected = null;
    renderMeta(v);
    changed(v, ['messages', 'graph']);
  } catch (e) {
    if (view !== v) return;
    $('restore-state').textContent = '';
    showError(e.status === 409 ? `Not started: ${e.message}` : `Could not start the run: ${e.message}`);
  }
}

async function rewind(v, sequence) {
  const answer = await confirmAction({
    title: `Rewind to message #${sequence}`,
    text: 'A new branch starts after this message; nothing is deleted. With no new message the model answers again from here.',
    input: { label: 'New message (optional)' },
    check: { label: 'Also put the files the trace changed back as they were here', value: false },
    confirm: 'Rewind',
  });
  if (!answer) return;
  const body = { after_sequence: sequence };
  if (answer.text.trim()) body.messages = [{ role: 'user', content: answer.text }];
  if (answer.checked) body.restore_files = true;
  await startRun(v, body, answer.checked ? `files restored to message ${sequence}` : `rewound to message ${sequence}`);
}

async function regenerate(v, m) {
  const answer = await confirmAction({
    title: `Regenerate answer #${m.sequence}`,
    text: `The model answers message #${m.parent_sequence} again, on a new branch; this answer stays.`,
    confirm: 'Regenerate',
  });
  if (!answer) return;
  await startRun(v, { after_sequence: m.parent_sequence }, `regenerating after message ${m.parent_sequence}`);
}

async function continueRun(v) {
  const text = $('continue-input').value;
  if (!text.trim()) {
    $('continue-input').focus();
    return;
  }
  const answer = await confirmAction({
    title: 'Continue the trace',
    text: `Sends this message after the head (#${v.head ?? '—'}) and runs the agent:\n\n${text}`,
    confirm: 'Continue',
  });
  if (!answer) return;
  $('continue-input').value = '';
  await startRun(v, { messages: [{ role: 'user', content: text }] }, 'continuing');
}

async function stopRun(v) {
  const answer = await confirmAction({
    title: 'Stop the run',
    text: 'The model call, tool calls or approval waits in flight end now; the trace ends stopped and can be continued.',
    confirm: 'Stop',
  });
  if (!answer || view !== v) return;
  try {
    await api(`/api/traces/${enc(v.id)}/stop`, { method: 'POST' });
    $('live-state').textContent = 'stopping…';
  } catch (e) {
    showError(`Could not stop the run: ${e.message}`);
  }
}

/** A collapsed block that stays open across redraws once opened. */
function disclosure(v, key, summary, body) {
  const node = el('details', { 'data-key': key, open: v.open.has(key) }, el('summary', { text: summary }), body);
  node.addEventListener('toggle', () => (node.open ? v.open.add(key) : v.open.delete(key)));
  return node;
}

// A trace that is not running has no current goal: what it left in
// progress shows as open.
function renderGoals(tree, live) {
  const goals = ((tree && tree.goals) || [])
    .map((g) => (live || g.status !== 'in_progress' ? g : { ...g, status: 'pending' }));
  if (!goals.length) {
    $('goals').replaceChildren(el('p', { class: 'muted', text: 'No goals.' }));
    return;
  }
  const byParent = new Map();
  for (const goal of goals) {
    const key = goal.parent_id || '';
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(goal);
  }
  // `seen` holds the ancestors drawn so far: a cycle of parent ids in a
  // damaged tree ends instead of recursing forever.
  const build = (parent, seen) => el('ul', { class: parent ? null : 'goals' },
    (byParent.get(parent) || []).filter((g) => !seen.has(g.id)).map((g) => {
      const current = live && g.id === tree.current;
      const inner = new Set(seen).add(g.id);
      return el('li', { class: `goal${current ? ' current' : ''}`, 'data-goal-id': g.id, 'data-status': g.status },
        statusBadge(g.status), ' ',
        el('span', { class: 'desc', text: `${g.id}: ${g.description}` }),
        current ? el('span', { class: 'muted', text: ' (current)' }) : null,
        el('span', { class: 'stats', title: `own: ${statsText(g.self_stats)}`, text: statsText(g.cumulative_stats) }),
        g.summary ? el('span', { class: 'note', text: `done: ${g.summary}` }) : null,
        g.abandon_reason ? el('span', { class: 'note', text: `abandoned: ${g.abandon_reason}` }) : null,
        g.sub_trace_id ? el('a', { href: `#/traces/${enc(g.sub_trace_id)}`, text: `sub-trace ${g.sub_trace_id}` }) : null,
        byParent.has(g.id) ? build(g.id, inner) : null);
    }));
  $('goals').replaceChildren(build('', new Set()));
}

// ---- live events ------------------------------------------------------

function connect(v) {
  if (view !== v || v.closed) return;
  const query = new URLSearchParams({ since: String(v.lastEventId) });
  if (token) query.set('token', token);
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${scheme}//${location.host}/api/traces/${enc(v.id)}/watch?${query}`);
  v.ws = ws;
  $('live-state').textContent = 'connecting…';
  ws.addEventListener('open', () => {
    if (v.ws !== ws) return;
    v.retryMs = 500;
    $('live-state').textContent = 'live';
    $('trace-view').dataset.live = 'true';
  });
  ws.addEventListener('message', (m) => {
    if (view === v && v.ws === ws) onFrame(v, m.data);
  });
  ws.addEventListener('close', () => {
    if (v.ws !== ws) return;
    v.ws = null;
    if (view !== v || v.closed) return;
    $('trace-view').dataset.live = 'false';
    $('live-state').textContent = `disconnected; reconnecting in ${v.retryMs / 1000} s`;
    // Resumes with ?since= the last event seen: nothing missed, nothing twice.
    v.timer = setTimeout(() => connect(v), v.retryMs);
    v.retryMs = Math.min(v.retryMs * 2, 8000);
  });
}

function onFrame(v, data) {
  let frame;
  try {
    frame = JSON.parse(data);
  } catch (e) {
    return;
  }
  if (typeof frame.id === 'number') {
    if (frame.id <= v.lastEventId) return;
    v.lastEventId = frame.id;
    logEvent(frame);
    if (KEPT_EVENTS.includes(frame.kind)) {
      keepEvents(v, [frame]);
      changed(v, ['timeline', 'decisions']);
    }
  }
  switch (frame.kind) {
    case 'trace_started':
      v.trace.status = 'running';
      v.running = true;
      renderMeta(v);
      changed(v, ['messages']);
      break;
    case 'message_added':
      v.messages.set(frame.message.sequence, frame.message);
      v.head = frame.message.sequence;
      // The server sends an answer's deltas before the event storing it.
      if (frame.message.role === 'assistant') clearStream(v);
      changed(v, ['messages', 'timeline', 'costs', 'graph', 'decisions']);
      break;
    case 'goal_changed':
      v.goalTree = frame.tree;
      renderGoals(frame.tree, true);
      changed(v, ['timeline', 'costs']);
      // A goal handed to a sub-agent: its trace joins the timeline.
      if (((frame.tree && frame.tree.goals) || []).some((g) => g.sub_trace_id && !v.subTraces.some((t) => t.id === g.sub_trace_id))) {
        refreshSoon(v);
      }
      break;
    case 'permission_decided':
      for (const [id, request] of approvals.items) {
        if (request.trace_id === v.id && request.call_id === frame.call_id) dropApproval(id);
      }
      renderApprovals();
      break;
    case 'tool_finished':
      // A tool that writes files leaves a checkpoint.
      refreshSoon(v);
      break;
    case 'trace_finished':
      v.trace.status = frame.status;
      v.running = false;
      clearStream(v);
      renderMeta(v);
      refreshTrace(v);
      break;
    case 'text_delta':
    case 'reasoning_delta':
      appendStream(v, frame.kind, frame.text);
      break;
    case 'approval_needed':
      addApproval(frame.request);
      break;
    case 'question_asked':
      addQuestion(frame.question);
      break;
    case 'plugins_changed':
      logNotice('plugins changed', (frame.plugins || []).map(pluginChange).join('; '));
      break;
    default:
      break;
  }
}

function appendStream(v, kind, text) {
  const stream = $('stream');
  v.deltas += 1;
  stream.dataset.deltas = String(v.deltas);
  stream.hidden = false;
  const last = stream.lastElementChild;
  if (last && last.dataset.kind === kind) last.textContent += text;
  else stream.append(el('span', { class: kind === 'reasoning_delta' ? 'muted' : null, 'data-kind': kind, text }));
}

function clearStream(v) {
  $('stream').replaceChildren();
  $('stream').hidden = true;
  $('stream').dataset.deltas = String(v.deltas);
}

function eventSummary(e) {
  switch (e.kind) {
    case 'message_added': {
      const text = textOf(e.message);
      return `#${e.message.sequence} ${e.message.role}${text ? `: ${text.slice(0, 80)}` : ''}`;
    }
    case 'tool_started': return e.name;
    case 'tool_finished': return `${e.name} ${e.ok ? 'ok' : 'failed'}: ${e.summary}`;
    case 'permission_decided': return `${e.tool}: ${e.decision}${e.answered_by ? ` by ${e.answered_by}` : ''}`;
    case 'model_failed': return `attempt ${e.attempt}: ${e.error}`;
    case 'goal_changed': return `${((e.tree && e.tree.goals) || []).length} goals`;
    case 'trace_finished': return e.error ? `${e.status}: ${e.error}` : e.status;
    default: return '';
  }
}

// A plugin installed or rebuilt while the server runs: the next run's
// tools are the new ones.
function pluginChange(p) {
  const version = p.version ? ` ${p.version}` : '';
  const held = p.status && p.status.state !== 'ready' ? ` (${p.status.state}: ${p.status.error || ''})` : '';
  return `${p.name}${version} ${p.change}${held}`;
}

function logNotice(title, summary) {
  const log = $('events');
  log.append(el('li', { class: 'notice', 'data-notice': title, title: when(Date.now()) },
    el('strong', { text: title }), summary ? ` ${summary}` : ''));
  while (log.children.length > MAX_EVENTS_SHOWN) log.firstElementChild.remove();
}

function logEvent(e) {
  const log = $('events');
  const summary = eventSummary(e);
  log.append(el('li', { 'data-event-id': e.id, value: e.id, title: when(e.at_ms) },
    el('strong', { text: e.kind.replace(/_/g, ' ') }), summary ? ` ${summary}` : ''));
  while (log.children.length > MAX_EVENTS_SHOWN) log.firstElementChild.remove();
}

// ---- approvals --------------------------------------------------------

// Asks of every run; each entry remembers when it was added, so that a
// poll sent before an `approval_needed` frame does not drop the new ask.
// `done`: ids answered or decided here, which a poll that began before
// the answer must not bring back (ids are random, never reused).
const approvals = { items: new Map(), added: new Map(), answering: new Set(), done: new Set(), shown: '', polling: false };

function dropApproval(id) {
  approvals.done.add(id);
  approvals.items.delete(id);
  approvals.added.delete(id);
}

function addApproval(request) {
  if (approvals.items.has(request.id) || approvals.done.has(request.id)) return;
  approvals.items.set(request.id, request);
  approvals.added.set(request.id, Date.now());
  renderApprovals();
}

async function pollApprovals() {
  if (approvals.polling) return;
  approvals.polling = true;
  const started = Date.now();
  try {
    const data = await api('/api/approvals');
    const pending = new Set(data.approvals.map((a) => a.id));
    for (const request of data.approvals) {
      if (approvals.done.has(request.id)) continue;
      if (!approvals.items.has(request.id)) approvals.added.set(request.id, started);
      approvals.items.set(request.id, request);
    }
    for (const id of [...approvals.items.keys()]) {
      if (!pending.has(id) && !approvals.answering.has(id) && approvals.added.get(id) < started) {
        dropApproval(id);
      }
    }
    renderApprovals();
  } catch (e) {
    showError(`Could not load the pending approvals: ${e.message}`);
  } finally {
    approvals.polling = false;
  }
}

async function answerApproval(id, answer, item) {
  approvals.answering.add(id);
  for (const button of item.querySelectorAll('button')) button.disabled = true;
  try {
    await api(`/api/approvals/${enc(id)}`, { method: 'POST', body: { answer } });
    dropApproval(id);
  } catch (e) {
    if (e.status === 404) {
      dropApproval(id);
      showError('That approval is no longer pending: it was answered elsewhere or timed out.');
    } else {
      showError(`Could not answer the approval: ${e.message}`);
      for (const button of item.querySelectorAll('button')) button.disabled = false;
    }
  } finally {
    approvals.answering.delete(id);
    renderApprovals();
  }
}

function renderApprovals() {
  const requests = [...approvals.items.values()].sort((a, b) => a.id - b.id);
  const shown = requests.map((r) => r.id).join(',');
  $('approvals').hidden = requests.length === 0;
  if (shown === approvals.shown) return;
  approvals.shown = shown;
  $('approval-list').replaceChildren(...requests.map((r) => {
    const item = el('li', { class: 'approval', 'data-approval-id': r.id, 'data-trace-id': r.trace_id });
    const button = (answer, label) => el('button', {
      type: 'button', 'data-answer': answer, 'aria-label': `${label}: ${r.tool}`, text: label,
      onclick: () => answerApproval(r.id, answer, item),
    });
    item.append(
      el('div', {}, el('strong', { text: r.tool }), ' wants to run in trace ',
        el('a', { href: `#/traces/${enc(r.trace_id)}`, text: r.trace_id }),
        r.rule ? el('span', { class: 'muted', text: ` (rule: ${r.rule})` }) : null),
      el('pre', { text: prettyJson(r.arguments) }),
      el('div', { class: 'buttons' },
        button('once', 'Allow once'), button('always', 'Always allow'), button('deny', 'Deny')));
    return item;
  }));
}

// ---- questions (ask_human) ----------------------------------------------

// Open questions of every trace the caller sees, by id; typed answers are
// kept across redraws.
const questions = { items: new Map(), drafts: new Map(), sending: new Set(), done: new Set(), shown: '', polling: false };

async function pollQuestions() {
  if (questions.polling) return;
  questions.polling = true;
  try {
    const data = await api('/api/questions');
    const open = new Set(data.questions.map((q) => q.id));
    for (const q of data.questions) if (!questions.done.has(q.id)) questions.items.set(q.id, q);
    for (const id of [...questions.items.keys()]) {
      if (!open.has(id) && !questions.sending.has(id)) questions.items.delete(id);
    }
    renderQuestions();
  } catch (e) {
    showError(`Could not load the open questions: ${e.message}`);
  } finally {
    questions.polling = false;
  }
}

function addQuestion(question) {
  if (questions.items.has(question.id) || questions.done.has(question.id)) return;
  questions.items.set(question.id, { ...question, run_waiting: true });
  renderQuestions();
}

async function answerQuestion(id, answer, item) {
  if (!answer.trim()) return;
  questions.sending.add(id);
  for (const control of item.querySelectorAll('button, textarea')) control.disabled = true;
  try {
    const reply = await api(`/api/questions/${enc(id)}`, { method: 'POST', body: { answer } });
    questions.done.add(id);
    questions.items.delete(id);
    questions.drafts.delete(id);
    $('restore-state').textContent = reply.resumed
      ? `answered; trace ${reply.trace_id} continues with the answer`
      : 'answered; the run goes on';
    clearError();
  } catch (e) {
    if (e.status === 404) {
      questions.done.add(id);
      questions.items.delete(id);
    }
    showError(`Could not answer the question: ${e.message}`);
    for (const control of item.querySelectorAll('button, textarea')) control.disabled = false;
  } finally {
    questions.sending.delete(id);
    questions.shown = '';
    renderQuestions();
  }
}

function renderQuestions() {
  const open = [...questions.items.values()].sort((a, b) => a.asked_at_ms - b.asked_at_ms);
  $('questions').hidden = open.length === 0;
  const shown = JSON.stringify(open);
  if (shown === questions.shown) return;
  questions.shown = shown;
  $('question-list').replaceChildren(...open.map((q) => {
    const item = el('li', { class: 'approval question', 'data-question-id': q.id, 'data-trace-id': q.trace_id });
    const box = el('textarea', {
      rows: 2, class: 'answer', 'aria-label': `Your answer to: ${q.question}`,
      oninput: (e) => questions.drafts.set(q.id, e.target.value),
    });
    box.value = questions.drafts.get(q.id) || '';
    item.append(
      el('div', {}, el('strong', { text: 'The agent asks' }), ' in trace ',
        el('a', { href: `#/traces/${enc(q.trace_id)}`, text: q.trace_id }),
        el('span', { class: 'muted', text: q.run_waiting ? ' (the run waits)' : ' (the run stopped waiting: an answer continues the trace)' })),
      el('p', { class: 'pre-line question-text', text: q.question }),
      q.choices.length ? el('div', { class: 'buttons' }, q.choices.map((choice, i) => el('button', {
        type: 'button', 'data-choice': i + 1, text: choice, onclick: () => answerQuestion(q.id, choice, item),
      }))) : null,
      box,
      el('div', { class: 'buttons' }, el('button', {
        type: 'button', class: 'send-answer', text: 'Send answer', onclick: () => answerQuestion(q.id, box.value, item),
      })));
    return item;
  }));
}

// ---- wiring -----------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/traces\/(.+)$/);
  if (match) showTrace(decodeURIComponent(match[1]));
  else showList();
}

function init() {
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    token = $('token-input').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    settleToken(token !== '');
  });
  $('token-cancel').addEventListener('click', () => settleToken(false));
  $('token-dialog').addEventListener('close', () => settleToken(false));
  $('token-button').addEventListener('click', () => {
    askToken(token ? 'Replace the token this page sends.' : 'Give the token this server asks for.')
      .then((given) => given && route());
  });
  $('filters').addEventListener('submit', (e) => e.preventDefault());
  for (const id of ['status-filter', 'roots-only', 'user-filter', 'model-filter', 'cost-filter',
    'from-filter', 'to-filter', 'sort-by']) {
    $(id).addEventListener('change', () => { list.offset = 0; list.shown = ''; loadList(); });
  }
  $('prev-page').addEventListener('click', () => { list.offset = Math.max(0, list.offset - list.limit); loadList(); });
  $('next-page').addEventListener('click', () => { list.offset += list.limit; loadList(); });
  $('stop-button').addEventListener('click', () => view && stopRun(view));
  $('continue-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (view) continueRun(view);
  });
  for (const t of TABS) $(`tab-button-${t}`).addEventListener('click', () => showTab(t));
  $('tabs').addEventListener('keydown', (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (!step) return;
    const next = TABS[(TABS.indexOf(tab) + step + TABS.length) % TABS.length];
    showTab(next);
    $(`tab-button-${next}`).focus();
  });
  $('image-close').addEventListener('click', () => $('image-dialog').close());
  window.addEventListener('hashchange', route);
  setInterval(loadList, LIST_REFRESH_MS);
  setInterval(pollApprovals, APPROVALS_REFRESH_MS);
  setInterval(pollQuestions, APPROVALS_REFRESH_MS);
  showTab(tab);
  route();
  pollApprovals();
  pollQuestions();
}

init();
