// Cost and tokens: per model call, per goal (its own and with its
// sub-goals), the totals, and the budget of the latest run.

import { el, dollars, duration, goalsInOrder, statsText, tokensOf } from './dom.js';

const num = (n) => el('td', { class: 'num', text: String(n || 0) });

/** Draws the cost view of trace model `t` into `box`. */
export function renderCosts(box, t, jump) {
  const calls = [...t.messages.values()]
    .filter((m) => m.role === 'assistant' && !m.synthetic)
    .sort((a, b) => a.sequence - b.sequence);
  const callRows = calls.map((m) => {
    const u = m.usage || {};
    return el('tr', { 'data-seq': m.sequence, 'data-goal-id': m.goal_id || '' },
      el('td', {}, el('button', { type: 'button', class: 'link', text: `#${m.sequence}`, onclick: () => jump(m.sequence) })),
      el('td', { text: m.goal_id || '' }),
      num(u.prompt_tokens), num(u.completion_tokens), num(u.cache_read_tokens), num(u.reasoning_tokens),
      el('td', { class: 'num', text: dollars(m.cost) }),
      el('td', { class: 'num', text: duration(m.duration_ms) }),
      num(m.attempts || 1));
  });
  const totals = t.trace.totals || {};
  const tu = totals.usage || {};
  const callTable = el('table', { id: 'cost-calls' },
    el('caption', { text: 'Model calls, every branch' }),
    el('thead', {}, el('tr', {}, ['Message', 'Goal', 'Prompt', 'Completion', 'Cached', 'Reasoning', 'Cost', 'Time', 'Attempts']
      .map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, callRows),
    el('tfoot', {}, el('tr', { class: 'totals' },
      el('th', { scope: 'row', text: 'Totals' }), el('td', {}),
      num(tu.prompt_tokens), num(tu.completion_tokens), num(tu.cache_read_tokens), num(tu.reasoning_tokens),
      el('td', { class: 'num', text: dollars(totals.cost) }),
      el('td', { class: 'num', text: duration(totals.duration_ms) }),
      num(totals.requests))));

  const goalRows = goalsInOrder(t.goalTree).map(({ goal, depth }) => {
    const own = goal.self_stats || {};
    const all = goal.cumulative_stats || {};
    return el('tr', { 'data-goal-id': goal.id },
      el('td', { text: `${'\u00a0\u00a0'.repeat(depth)}${goal.id}: ${goal.description}` }),
      el('td', { class: 'num own-tokens', text: String(tokensOf(own.usage)) }),
      el('td', { class: 'num own-cost', text: dollars(own.cost) }),
      el('td', { class: 'num all-tokens', text: String(tokensOf(all.usage)) }),
      el('td', { class: 'num all-cost', text: dollars(all.cost) }),
      el('td', { class: 'num all-requests', text: String(all.requests || 0) }),
      el('td', { class: 'num', text: duration(all.duration_ms) }));
  });
  const goalTable = goalRows.length
    ? el('table', { id: 'cost-goals' },
      el('caption', { text: 'Goals of the main path: their own figures, and with their sub-goals' }),
      el('thead', {}, el('tr', {}, ['Goal', 'Own tokens', 'Own cost', 'Tokens', 'Cost', 'Requests', 'Time']
        .map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, goalRows))
    : el('p', { class: 'muted', text: 'No goals.' });

  box.replaceChildren(
    el('p', { id: 'cost-totals', text: `Totals: ${statsText(totals)}` }),
    budgetOf(t.trace),
    callTable,
    goalTable);
}

/** Bars of what the trace spent against its latest run's budget. */
function budgetOf(trace) {
  const budget = trace.context && trace.context.extra && trace.context.extra.budget;
  if (!budget) return el('p', { id: 'budget', class: 'muted', text: 'No budget: the run was not limited.' });
  const totals = trace.totals || {};
  const end = trace.status === 'running' ? Date.now() : (trace.finished_at_ms || trace.updated_at_ms);
  const limits = [
    ['tokens', budget.max_tokens, tokensOf(totals.usage), String],
    ['cost', budget.max_cost_usd, totals.cost || 0, dollars],
    ['time', budget.max_duration_ms, Math.max(0, end - trace.created_at_ms), duration],
  ].filter(([, limit]) => limit !== null && limit !== undefined);
  return el('div', { id: 'budget', class: 'budget' },
    el('h3', { text: 'Budget of the latest run' }),
    limits.map(([name, limit, spent, show]) => el('label', { class: 'budget-line', 'data-limit': name },
      `${name}: ${show(spent)} of ${show(limit)} `,
      el('meter', { min: 0, max: limit, value: Math.min(spent, limit), high: limit * 0.8, optimum: 0 }))));
}
