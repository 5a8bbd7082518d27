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

/** Draws trace view `v`'s checkpoints into `box`. */
export function renderFiles(box, v, jump) {
  const shown = v.checkpoints.filter((c) => c.cause.kind !== 'base' || c.paths);
  if (!shown.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'No workspace checkpoints: no tool call of this trace wrote a recorded file.' }));
    return;
  }
  box.replaceChildren(...shown.map((c) => el('section', {
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
