// The timeline (waterfall): every model call, failed model attempt, tool
// call, approval wait and sub-agent as a bar on one time axis, grouped
// under its goal, a sub-agent's own calls nested under it.

import { el, duration, goalsInOrder, tokensOf, when } from './dom.js';

/** The bars of one trace's messages and events, each with the goal it
 * belongs to and the message a click jumps to. */
export function barsOf(messages, events, now) {
  const all = [...messages].sort((a, b) => a.sequence - b.sequence);
  const resultOf = new Map();
  for (const m of all) if (m.role === 'tool' && m.tool_call_id) resultOf.set(m.tool_call_id, m);
  const answers = all.filter((m) => m.role === 'assistant' && !m.synthetic)
    .sort((a, b) => a.created_at_ms - b.created_at_ms);
  // A message's time covers its failed attempts and the waits between
  // them: its own bar starts where the last retry did.
  const retried = new Map();
  for (const e of events) {
    if (e.kind !== 'model_failed' || !e.retrying) continue;
    const answer = answers.find((m) => m.created_at_ms >= e.at_ms);
    if (answer) retried.set(answer.sequence, e.at_ms + (e.retry_in_ms || 0));
  }
  const bars = [];
  for (const m of answers) {
    const tries = m.attempts > 1 ? `, attempt ${m.attempts}` : '';
    const start = Math.max(m.created_at_ms - (m.duration_ms || 0), retried.get(m.sequence) || 0);
    bars.push({
      kind: 'model', start: Math.min(start, m.created_at_ms), end: m.created_at_ms,
      goal: m.goal_id, seq: m.sequence, trace: m.trace_id,
      label: `model → #${m.sequence}`,
      detail: `${tokensOf(m.usage)} tokens${tries}`,
    });
  }
  const started = new Map();
  for (const e of events) {
    if (e.kind === 'model_failed') {
      // It belongs to the answer that came after it, if one did.
      const answer = answers.find((m) => m.created_at_ms >= e.at_ms);
      bars.push({
        kind: 'attempt', start: e.at_ms - (e.duration_ms || 0), end: e.at_ms, failed: true,
        goal: answer && answer.goal_id, seq: answer && answer.sequence,
        label: `model, failed attempt ${e.attempt}`,
        detail: `${e.error}${e.retrying ? ' (retried)' : ''}`,
      });
    } else if (e.kind === 'tool_started') {
      started.set(e.call_id, e);
    } else if (e.kind === 'tool_finished') {
      const start = started.get(e.call_id);
      started.delete(e.call_id);
      const result = resultOf.get(e.call_id);
      bars.push({
        kind: 'tool', start: start ? start.at_ms : e.at_ms, end: e.at_ms, failed: !e.ok,
        goal: result && result.goal_id, seq: result && result.sequence, call: e.call_id,
        label: e.name, detail: e.summary,
      });
    } else if (e.kind === 'permission_decided' && e.waited_ms) {
      const result = resultOf.get(e.call_id);
      bars.push({
        kind: 'approval', start: e.at_ms - e.waited_ms, end: e.at_ms,
        failed: !/^ask-(once|always|remembered)$/.test(e.decision),
        goal: result && result.goal_id, seq: result && result.sequence, call: e.call_id,
        label: `approval: ${e.tool}`,
        detail: `${e.decision}${e.answered_by ? ` by ${e.answered_by}` : ''}`,
      });
    }
  }
  // A call still going (or cut off by a crash) ends now.
  for (const e of started.values()) {
    const result = resultOf.get(e.call_id);
    bars.push({
      kind: 'tool', start: e.at_ms, end: result ? result.created_at_ms : now, running: !result,
      goal: result && result.goal_id, seq: result && result.sequence, call: e.call_id,
      label: e.name, detail: result ? 'interrupted' : 'running',
    });
  }
  return bars;
}

/** Draws the timeline of trace model `t` into `box`; `jump(seq)` shows a
 * message, `open(traceId)` a sub-trace. */
export function renderTimeline(box, t, jump, open) {
  const now = Date.now();
  const bars = barsOf(t.messages.values(), t.events, now);
  for (const sub of t.subTraces) {
    const data = t.sub.get(sub.id);
    const end = sub.finished_at_ms || (sub.status === 'running' ? now : sub.updated_at_ms);
    bars.push({
      kind: 'agent', start: sub.created_at_ms, end, goal: sub.parent_goal_id, trace: sub.id,
      failed: sub.status === 'failed', label: `sub-agent: ${sub.task}`, detail: sub.status,
      children: data ? barsOf(data.messages, data.events, now) : [],
    });
  }
  if (!bars.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'Nothing ran yet.' }));
    return;
  }
  const every = bars.flatMap((b) => [b, ...(b.children || [])]);
  const t0 = Math.min(...every.map((b) => b.start));
  const t1 = Math.max(...every.map((b) => b.end), t0 + 1);
  const span = t1 - t0;
  const place = (bar, node) => {
    node.style.left = `${((bar.start - t0) / span) * 100}%`;
    node.style.width = `max(2px, ${((bar.end - bar.start) / span) * 100}%)`;
  };

  const rows = [];
  const row = (bar, depth, extra) => {
    const kind = bar.kind;
    const barNode = el('div', {
      class: `tl-bar tl-${kind}${bar.failed ? ' failed' : ''}${bar.running ? ' running' : ''}`,
      title: `${bar.label}: ${duration(bar.end - bar.start)}${bar.detail ? ` · ${bar.detail}` : ''}`,
    });
    place(bar, barNode);
    // A sub-agent's bars lead to its trace; the others to their message.
    const inner = extra && extra['data-parent-trace'];
    let target = bar.seq ? () => jump(bar.seq) : null;
    if (kind === 'agent') target = () => open(bar.trace);
    else if (inner) target = () => open(inner);
    const node = el('div', {
      class: `tl-row tl-row-${kind}`, role: target ? 'button' : null, tabindex: target ? '0' : null,
      'data-kind': kind, 'data-seq': bar.seq, 'data-call': bar.call, 'data-trace-id': bar.trace,
      'data-start': bar.start, 'data-duration': bar.end - bar.start,
      ...extra,
      onclick: target,
      onkeydown: target ? (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); target(); } } : null,
    },
    el('div', { class: 'tl-label' },
      el('span', { class: 'tl-indent', text: '\u00a0\u00a0'.repeat(depth) }),
      el('span', { class: 'tl-name', text: bar.label }),
      el('span', { class: 'tl-took', text: ` ${duration(bar.end - bar.start)}` }),
      bar.detail ? el('span', { class: 'tl-detail', text: bar.detail }) : null),
    el('div', { class: 'tl-track' }, barNode));
    rows.push(node);
  };
  const group = (label, goalId, depth, members) => {
    if (!members.length) return;
    members.sort((a, b) => a.start - b.start || a.end - b.end);
    const extent = {
      start: Math.min(...members.map((b) => b.start)),
      end: Math.max(...members.map((b) => b.end)),
    };
    const head = el('div', { class: 'tl-row tl-goal', 'data-kind': 'goal', 'data-goal-id': goalId || '' },
      el('div', { class: 'tl-label' },
        el('span', { class: 'tl-indent', text: '\u00a0\u00a0'.repeat(depth) }),
        el('strong', { text: label }),
        el('span', { class: 'tl-took', text: ` ${duration(extent.end - extent.start)}` })),
      el('div', { class: 'tl-track' }));
    const shade = el('div', { class: 'tl-bar tl-goal-span' });
    place(extent, shade);
    head.lastChild.append(shade);
    rows.push(head);
    for (const bar of members) {
      row(bar, depth + 1);
      for (const child of (bar.children || []).sort((a, b) => a.start - b.start)) {
        row(child, depth + 2, { 'data-parent-trace': bar.trace });
      }
    }
  };

  const ordered = goalsInOrder(t.goalTree);
  const known = new Set(ordered.map(({ goal }) => goal.id));
  group('before any goal', '', 0, bars.filter((b) => !b.goal || !known.has(b.goal)));
  for (const { goal, depth } of ordered) {
    group(`${goal.id}: ${goal.description}`, goal.id, depth, bars.filter((b) => b.goal === goal.id));
  }

  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => el('span', {
    class: 'tl-tick', text: f === 0 ? when(t0) : `+${duration(span * f)}`,
  }));
  const axis = el('div', { class: 'tl-row tl-axis' }, el('div', { class: 'tl-label', text: `${every.length} bars over ${duration(span)}` }),
    el('div', { class: 'tl-track tl-ticks' }, ticks));
  const legend = el('p', { class: 'tl-legend muted' },
    ['model', 'attempt', 'tool', 'approval', 'agent'].map((k) => el('span', { class: `tl-key tl-${k}`, text: {
      model: 'model call', attempt: 'failed attempt', tool: 'tool call', approval: 'approval wait', agent: 'sub-agent',
    }[k] })));
  box.replaceChildren(legend, el('div', { class: 'timeline', role: 'list' }, axis, rows));
}
