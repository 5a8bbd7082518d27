// The trace viewer of `reson serve`. Everything it shows comes from the
// model, tools or users, so it is untrusted: data only ever reaches the page
// as text nodes (textContent), never as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'reson.token';
  const LIST_REFRESH_MS = 2000;
  const APPROVALS_REFRESH_MS = 2000;
  const MAX_EVENTS_SHOWN = 200;

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  /** Builds an element; attributes named `text` set its text, `on*` add listeners. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = value;
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

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

  // ---- formatting -------------------------------------------------------

  function statusBadge(status) {
    const name = String(status || 'unknown');
    return el('span', { class: `status status-${name.replace(/[^a-z_]/g, '')}`, text: name.replace('_', ' ') });
  }

  function tokensOf(usage) {
    return usage ? (usage.prompt_tokens || 0) + (usage.completion_tokens || 0) : 0;
  }

  function when(ms) {
    return ms ? new Date(ms).toLocaleString() : '';
  }

  function ago(ms) {
    if (!ms) return '';
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return when(ms);
  }

  function duration(ms) {
    if (!ms) return '0 ms';
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
  }

  function statsText(stats) {
    const s = stats || {};
    const parts = [`${s.messages || 0} messages`, `${tokensOf(s.usage)} tokens`,
      `${s.requests || 0} requests`, duration(s.duration_ms)];
    if (s.cost) parts.push(`$${Number(s.cost).toFixed(4)}`);
    return parts.join(' · ');
  }

  function textOf(message) {
    return (message.content || [])
      .map((part) => {
        if (part.type === 'text') return part.text;
        if (part.type === 'image') return `[image: ${part.name}]`;
        return `[image: ${part.url}]`;
      })
      .join('');
  }

  // blob: URLs of the images shown, by trace and name: each is fetched once.
  const imageUrls = new Map();

  /** An image kept beside message `m`. An <img> cannot send the token, so
   * the bytes are fetched with it and shown from a blob: URL. */
  function imageOf(m, part) {
    const img = el('img', {
      class: 'msg-image',
      alt: `image ${part.name} (${part.width}×${part.height}, ${part.bytes} bytes)`,
    });
    const key = `${m.trace_id}/${part.name}`;
    if (!imageUrls.has(key)) {
      const url = fetchImage(`/api/traces/${enc(m.trace_id)}/images/${enc(part.name)}`);
      url.catch(() => imageUrls.delete(key));
      imageUrls.set(key, url);
    }
    imageUrls.get(key).then((url) => { img.src = url; }, (e) => { img.alt += `: ${e.message}`; });
    return el('figure', { class: 'msg-figure' }, img, el('figcaption', { text: part.name }));
  }

  async function fetchImage(path) {
    const headers = {};
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { headers });
    if (!response.ok) throw new Error(`not loaded (HTTP ${response.status})`);
    return URL.createObjectURL(await response.blob());
  }

  function prettyJson(text) {
    if (typeof text !== 'string') return JSON.stringify(text, null, 2);
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (e) {
      return text;
    }
  }

  function traceLink(trace) {
    return el('a', { href: `#/traces/${enc(trace.id)}`, text: trace.task || trace.id });
  }

  // ---- traces list ------------------------------------------------------

  const list = { offset: 0, limit: 50, total: 0, loading: false, shown: '' };

  async function loadList() {
    if (list.loading || $('list-view').hidden) return;
    list.loading = true;
    try {
      const query = new URLSearchParams({ limit: String(list.limit), offset: String(list.offset) });
      if ($('status-filter').value) query.set('status', $('status-filter').value);
      if ($('roots-only').checked) query.set('root_only', 'true');
      const data = await api(`/api/traces?${query}`);
      if ($('list-view').hidden) return;
      clearError();
      renderList(data);
    } catch (e) {
      showError(`Could not load the traces: ${e.message}`);
    } finally {
      list.loading = false;
    }
  }

  function renderList(data) {
    list.total = data.total || 0;
    $('prev-page').disabled = list.offset === 0;
    $('next-page').disabled = list.offset + list.limit >= list.total;
    const first = list.total ? list.offset + 1 : 0;
    $('trace-count').textContent = `${first}–${list.offset + data.traces.length} of ${list.total}`;
    $('no-traces').hidden = data.traces.length > 0;
    // Rebuilding only on change keeps keyboard focus between refreshes.
    const shown = JSON.stringify(data.traces);
    if (shown === list.shown) return;
    list.shown = shown;
    const rows = data.traces.map((trace) => el('tr', { 'data-trace-id': trace.id },
      el('td', {}, statusBadge(trace.status)),
      el('td', {}, traceLink(trace), ' ', el('span', { class: 'muted', text: trace.id })),
      el('td', { class: 'num', text: (trace.totals && trace.totals.messages) || 0 }),
      el('td', { class: 'num', text: tokensOf(trace.totals && trace.totals.usage) }),
      el('td', { title: when(trace.updated_at_ms), text: ago(trace.updated_at_ms) })));
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

  let view = null;

  async function showTrace(id) {
    closeTrace();
    $('list-view').hidden = true;
    $('trace-view').hidden = false;
    list.shown = '';
    const v = {
      id, trace: null, running: false, messages: new Map(), head: null, lastEventId: 0,
      ws: null, timer: null, retryMs: 500, closed: false, open: new Set(), deltas: 0,
    };
    view = v;
    $('trace-title').textContent = id;
    document.title = `Trace ${id} · Reson`;
    for (const part of ['trace-meta', 'messages', 'goals', 'subtraces', 'events']) $(part).replaceChildren();
    clearStream(v);
    $('stop-button').hidden = true;
    $('live-state').textContent = '';
    $('restore-state').textContent = '';
    delete $('trace-view').dataset.live;
    delete $('trace-view').dataset.status;
    try {
      const detail = await api(`/api/traces/${enc(id)}`);
      if (view !== v) return;
      // Events after this id are replayed by the socket; messages fetched
      // below may already hold some of them, and are keyed by sequence.
      v.lastEventId = detail.trace.last_event_id || 0;
      renderDetail(v, detail);
      await loadMessages(v);
      if (view !== v) return;
      clearError();
      connect(v);
    } catch (e) {
      if (view === v) showError(`Could not load trace ${id}: ${e.message}`);
    }
  }

  function closeTrace() {
    if (!view) return;
    const v = view;
    view = null;
    v.closed = true;
    clearTimeout(v.timer);
    if (v.ws) v.ws.close(1000);
  }

  async function refreshTrace(v) {
    try {
      const detail = await api(`/api/traces/${enc(v.id)}`);
      if (view !== v) return;
      renderDetail(v, detail);
      await loadMessages(v);
    } catch (e) {
      if (view === v) showError(`Could not refresh the trace: ${e.message}`);
    }
  }

  async function loadMessages(v) {
    const data = await api(`/api/traces/${enc(v.id)}/messages?mode=all`);
    if (view !== v) return;
    for (const message of data.messages) v.messages.set(message.sequence, message);
    v.head = data.head_sequence ?? null;
    renderMessages(v);
  }

  function renderDetail(v, detail) {
    v.trace = detail.trace;
    v.running = !!detail.running;
    renderMeta(v);
    renderGoals(detail.goal_tree, v.running || v.trace.status === 'running');
    const subs = detail.sub_traces || [];
    $('subtraces').replaceChildren(...(subs.length
      ? subs.map((t) => el('li', { 'data-trace-id': t.id }, statusBadge(t.status), ' ', traceLink(t)))
      : [el('li', { class: 'muted', text: 'None.' })]));
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
    if (t.parent_trace_id) {
      rows.push(['Parent', el('a', { href: `#/traces/${enc(t.parent_trace_id)}`, text: t.parent_trace_id })]);
    }
    if (t.result_summary) rows.push(['Result', t.result_summary]);
    if (t.error_message) rows.push(['Error', t.error_message]);
    $('trace-meta').replaceChildren(...rows.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', {}, value)]));
    $('trace-view').dataset.status = t.status;
    $('stop-button').hidden = !v.running;
  }

  // The tree: a run of only children is drawn as a column; where a message
  // has several children (a rewind or a regeneration) each child starts a
  // branch, the one on the main path marked.
  function renderMessages(v) {
    const children = new Map();
    const roots = [];
    const sorted = [...v.messages.values()].sort((a, b) => a.sequence - b.sequence);
    for (const m of sorted) {
      const parent = m.parent_sequence;
      if (parent === null || parent === undefined || !v.messages.has(parent)) {
        roots.push(m);
      } else {
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(m);
      }
    }
    const main = new Set();
    for (let s = v.head; s !== null && s !== undefined && v.messages.has(s) && !main.has(s);) {
      main.add(s);
      s = v.messages.get(s).parent_sequence;
    }
    const tree = { v, children, main };
    const root = document.createDocumentFragment();
    if (roots.length) renderSiblings(tree, roots, null, root);
    else root.append(el('p', { class: 'muted', text: 'No messages yet.' }));
    $('messages').replaceChildren(root);
  }

  function renderSiblings(tree, siblings, parent, into) {
    if (siblings.length === 1) {
      renderChain(tree, siblings[0], into);
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

  function renderChain(tree, first, into) {
    for (let m = first; ;) {
      into.append(renderMessage(tree.v, m, tree.main.has(m.sequence)));
      const kids = tree.children.get(m.sequence) || [];
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
    if (m.duration_ms) facts.push(duration(m.duration_ms));
    if (m.finish_reason) facts.push(m.finish_reason);
    if (m.synthetic) facts.push('written by the host');
    const node = el('article', {
      class: `msg role-${role}${onMain ? ' on-main' : ''}`,
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
    if (!v.running) {
      node.append(el('button', {
        type: 'button', class: 'rewind', 'data-rewind': m.sequence,
        text: 'Rewind here, restore files', onclick: () => rewindRestoring(v, m.sequence),
      }));
    }
    return node;
  }

  /**
   * Starts a run of the trace from after message `sequence`, with the
   * workspace files first put back as they were there. A 409 lists the
   * files changed outside Reson since, which the server would not overwrite.
   */
  async function rewindRestoring(v, sequence) {
    $('restore-state').textContent = `restoring files to message ${sequence}…`;
    try {
      const started = await api(`/api/traces/${enc(v.id)}/run`, {
        method: 'POST', body: { after_sequence: sequence, restore_files: true },
      });
      if (view !== v) return;
      $('restore-state').textContent = `files restored to message ${sequence}; ${started.mode} started`;
      clearError();
      v.running = true;
      renderMeta(v);
      renderMessages(v);
    } catch (e) {
      if (view !== v) return;
      $('restore-state').textContent = '';
      showError(e.status === 409 ? `Not restored: ${e.message}` : `Could not rewind: ${e.message}`);
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
    }
    switch (frame.kind) {
      case 'trace_started':
        v.trace.status = 'running';
        v.running = true;
        renderMeta(v);
        break;
      case 'message_added':
        v.messages.set(frame.message.sequence, frame.message);
        v.head = frame.message.sequence;
        // The server sends an answer's deltas before the event storing it.
        if (frame.message.role === 'assistant') clearStream(v);
        renderMessages(v);
        break;
      case 'goal_changed':
        renderGoals(frame.tree, true);
        break;
      case 'permission_decided':
        for (const [id, request] of approvals.items) {
          if (request.trace_id === v.id && request.call_id === frame.call_id) dropApproval(id);
        }
        renderApprovals();
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
      case 'permission_decided': return `${e.tool}: ${e.decision}`;
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
  const approvals = { items: new Map(), added: new Map(), answering: new Set(), shown: '', polling: false };

  function dropApproval(id) {
    approvals.items.delete(id);
    approvals.added.delete(id);
  }

  function addApproval(request) {
    if (approvals.items.has(request.id)) return;
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
    $('status-filter').addEventListener('change', () => { list.offset = 0; loadList(); });
    $('roots-only').addEventListener('change', () => { list.offset = 0; loadList(); });
    $('prev-page').addEventListener('click', () => { list.offset = Math.max(0, list.offset - list.limit); loadList(); });
    $('next-page').addEventListener('click', () => { list.offset += list.limit; loadList(); });
    $('stop-button').addEventListener('click', async () => {
      const v = view;
      if (!v) return;
      try {
        await api(`/api/traces/${enc(v.id)}/stop`, { method: 'POST' });
        $('live-state').textContent = 'stopping…';
      } catch (e) {
        showError(`Could not stop the run: ${e.message}`);
      }
    });
    window.addEventListener('hashchange', route);
    setInterval(loadList, LIST_REFRESH_MS);
    setInterval(pollApprovals, APPROVALS_REFRESH_MS);
    route();
    pollApprovals();
  }

  init();
})();
