// Every permission decision of a trace: the tool, what decided (a rule,
// the default, or who answered an ask), when, and how long the call waited.

import { el, duration, when } from './dom.js';

/** Draws the decisions among trace view `v`'s events into `box`. */
export function renderDecisions(box, v, jump) {
  const resultOf = new Map();
  for (const m of v.messages.values()) if (m.role === 'tool' && m.tool_call_id) resultOf.set(m.tool_call_id, m);
  const decided = v.events.filter((e) => e.kind === 'permission_decided');
  if (!decided.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'No permission decisions: this trace ran no tool under permission rules.' }));
    return;
  }
  const rows = decided.map((e) => {
    const result = resultOf.get(e.call_id);
    const by = e.answered_by || (e.rule ? `rule ${e.rule}` : (e.decision.startsWith('ask-') ? '—' : 'the default'));
    return el('tr', { 'data-call': e.call_id, 'data-decision': e.decision, 'data-tool': e.tool },
      el('td', { text: when(e.at_ms) }),
      el('td', { text: e.tool }),
      el('td', { class: `decision decision-${e.decision.replace(/[^a-z-]/g, '')}`, text: e.decision }),
      el('td', { class: 'by', text: by }),
      el('td', { class: 'num waited', text: e.waited_ms ? duration(e.waited_ms) : '—' }),
      el('td', {}, result
        ? el('button', { type: 'button', class: 'link', text: `#${result.sequence}`, onclick: () => jump(result.sequence) })
        : el('span', { class: 'muted', text: e.call_id })));
  });
  box.replaceChildren(el('table', { id: 'decision-log' },
    el('thead', {}, el('tr', {}, ['When', 'Tool', 'Decision', 'Decided by', 'Waited', 'Result']
      .map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows)));
}
