// Workspace checkpoints: per message, what its tool calls wrote (unified
// diffs, coloured) and what changed outside Reson before it; restores.

import { el, when } from './dom.js';

function causeText(c) {
  switch (c.cause.kind) {
    case 'calls': return `written by the calls of message #${c.sequence} (${c.cause.calls.join(', ')})`;
    case 'outside': return `changed outside Reson, found before the calls of message #${c.sequence}`;
    case 'restore': return `restored to message #${c.cause.to}`;
    case 'base': return `first look: ${c.paths} paths recorded`;
    default: return c.cause.kind;
  }
}

/** A unified diff, each line its own element so that additions, removals
 * and hunk headers can be coloured. */
function patchOf(text) {
  return el('pre', { class: 'diff' }, text.split('\n').map((line) => {
    let kind = 'ctx';
    if (line.startsWith('+++') || line.startsWith('---')) kind = 'file';
    else if (line.startsWith('@@')) kind = 'hunk';
    else if (line.startsWith('+')) kind = 'add';
    else if (line.startsWith('-')) kind = 'del';
    return el('span', { class: `diff-${kind}`, text: `${line}\n` });
  }));
}

function sizeText(f) {
  const sizes = [f.old_size, f.new_size].map((s) => (s === null || s === undefined ? '—' : `${s} B`));
  return `${sizes[0]} → ${sizes[1]}`;
}

/** The reports of the trace's replays, in the words of `reson traces replay`. */
function replaysOf(v, jump) {
  if (!v.replays.length) return null;
  return el('section', { id: 'replays' }, el('h3', { text: 'Replays' }),
    el('ul', {}, v.replays.map((r) => {
      const report = r.report || {};
      const identical = !report.divergence;
      return el('li', { class: `replay ${identical ? 'identical' : 'diverged'}`, 'data-replayed': report.replayed },
        el('span', { class: 'muted', text: `${when(r.at_ms)}: ` }),
        report.divergence && report.divergence.sequence
          ? el('button', { type: 'button', class: 'link', text: `#${report.divergence.sequence}`, onclick: () => jump(report.divergence.sequence) })
          : null,
        el('pre', { text: r.summary || '' }));
    })));
}

/** Draws trace view `v`'s checkpoints and replay reports into `box`. */
export function renderFiles(box, v, jump) {
  const shown = v.checkpoints.filter((c) => c.cause.kind !== 'base' || c.paths);
  const replays = replaysOf(v, jump);
  const head = replays ? [replays] : [];
  if (!shown.length) {
    box.replaceChildren(...head, el('p', { class: 'muted', text: 'No workspace checkpoints: no tool call of this trace wrote a recorded file.' }));
    return;
  }
  box.replaceChildren(...head, ...shown.map((c) => el('section', {
    class: `checkpoint cause-${c.cause.kind}`, 'data-key': c.key, 'data-sequence': c.sequence, 'data-cause': c.cause.kind,
  },
  el('h3', {},
    c.sequence ? el('button', { type: 'button', class: 'link', text: `#${c.sequence}`, onclick: () => jump(c.sequence) }) : 'start',
    ` ${causeText(c)}`,
    el('span', { class: 'muted', text: ` · ${when(c.at_ms)}` })),
  c.files.length
    ? el('ul', { class: 'files' }, c.files.map((f) => el('li', { 'data-path': f.path, 'data-change': f.change },
      el('strong', { text: f.path }), ` ${f.change} `,
      el('span', { class: 'muted', text: `(${sizeText(f)}, in ${f.root})` }),
      f.patch ? patchOf(f.patch) : el('p', { class: 'muted', text: 'No text diff: binary, a link, or bytes the trace does not keep.' }))))
    : null)));
}
