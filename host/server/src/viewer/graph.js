// The branch graph: the message tree drawn as a graph. Runs of messages
// with one child each fold into an edge labelled with their count, so a
// trace of thousands of messages draws as its branch points and ends. The
// main path is highlighted; a click picks a branch to read as the column.

import { el, svg } from './dom.js';

const COL = 84;
const LANE = 44;

/** The tree of `messages`: children by parent (in sequence order) and the
 * roots. */
export function treeOf(messages) {
  const children = new Map();
  const roots = [];
  const sorted = [...messages.values()].sort((a, b) => a.sequence - b.sequence);
  for (const m of sorted) {
    const parent = m.parent_sequence;
    if (parent === null || parent === undefined || !messages.has(parent)) {
      roots.push(m.sequence);
    } else {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(m.sequence);
    }
  }
  return { children, roots };
}

/** The sequences from the root to `leaf`, as a set. */
export function pathTo(messages, leaf) {
  const path = new Set();
  for (let s = leaf; s !== null && s !== undefined && messages.has(s) && !path.has(s);) {
    path.add(s);
    s = messages.get(s).parent_sequence;
  }
  return path;
}

/** The end of the branch through `seq`: down the main path where it goes,
 * otherwise the newest child each time. */
export function leafThrough(tree, main, seq) {
  let s = seq;
  for (;;) {
    const kids = tree.children.get(s) || [];
    if (!kids.length) return s;
    s = kids.find((k) => main.has(k)) ?? kids[kids.length - 1];
  }
}

/** Draws the graph of trace view `v` into `box`; `pick(leaf)` shows that
 * branch as the column. */
export function renderGraph(box, v, pick) {
  const tree = treeOf(v.messages);
  if (!tree.roots.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'No messages yet.' }));
    return;
  }
  const main = pathTo(v.messages, v.head);
  const shown = v.selected !== null ? pathTo(v.messages, v.selected) : main;
  const kept = (s) => {
    const kids = tree.children.get(s) || [];
    const m = v.messages.get(s);
    const parentKids = m && tree.children.get(m.parent_sequence);
    return !parentKids || kids.length !== 1 || s === v.head || s === v.selected || parentKids.length > 1;
  };
  const nodes = [];
  const edges = [];
  let lanes = 0;
  let cols = 0;
  // Each drawn node's children: follow each child's chain to the next
  // drawn node, counting what it folds. The branch shown keeps the lane.
  const place = (seq, col, lane, folded, from) => {
    const node = { seq, col, lane };
    nodes.push(node);
    cols = Math.max(cols, col);
    if (from) edges.push({ from, to: node, folded });
    const kids = [...(tree.children.get(seq) || [])];
    kids.sort((a, b) => (shown.has(b) ? 1 : 0) - (shown.has(a) ? 1 : 0) || a - b);
    kids.forEach((kid, i) => {
      let s = kid;
      let count = 0;
      while (!kept(s)) {
        count += 1;
        s = tree.children.get(s)[0];
      }
      const childLane = i === 0 ? lane : lanes++;
      place(s, col + 1, childLane, count, node);
    });
  };
  for (const root of tree.roots) place(root, 0, lanes++, 0, null);
  const x = (n) => n.col * COL + 30;
  const y = (n) => n.lane * LANE + 26;
  const width = (cols + 1) * COL + 40;
  const height = lanes * LANE + 20;
  const drawing = svg('svg', {
    id: 'graph-svg', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Message tree: ${nodes.length} nodes, ${lanes} branches`,
  });
  for (const e of edges) {
    const onMain = main.has(e.to.seq);
    const path = e.from.lane === e.to.lane
      ? `M${x(e.from)},${y(e.from)} H${x(e.to)}`
      : `M${x(e.from)},${y(e.from)} V${y(e.to)} H${x(e.to)}`;
    drawing.append(svg('path', {
      class: `edge${onMain ? ' on-main' : ''}${shown.has(e.to.seq) ? ' shown' : ''}`,
      d: path, 'data-from': e.from.seq, 'data-to': e.to.seq, 'data-folded': e.folded,
    }));
    if (e.folded) {
      drawing.append(svg('text', {
        class: 'folded', x: (x(e.from) + x(e.to)) / 2, y: y(e.to) - 6, 'text-anchor': 'middle',
        text: `+${e.folded}`,
      }));
    }
  }
  for (const n of nodes) {
    const m = v.messages.get(n.seq);
    const onMain = main.has(n.seq);
    const kids = (tree.children.get(n.seq) || []).length;
    const leaf = leafThrough(tree, main, n.seq);
    const label = `#${n.seq} ${m.role}${kids > 1 ? `, branch point (${kids})` : ''}${kids === 0 ? ', end' : ''}`;
    const choose = () => pick(leaf);
    drawing.append(svg('g', {
      class: `node${onMain ? ' on-main' : ''}${shown.has(n.seq) ? ' shown' : ''}${n.seq === v.head ? ' head' : ''}`,
      'data-seq': n.seq, 'data-leaf': leaf, 'data-children': kids, 'data-main': onMain ? 'true' : 'false',
      tabindex: '0', role: 'button', 'aria-label': `${label}: show this branch`,
      onclick: choose,
      onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); choose(); } },
    },
    svg('title', { text: label }),
    svg('circle', { cx: x(n), cy: y(n), r: 7 }),
    svg('text', { x: x(n), y: y(n) + 20, 'text-anchor': 'middle', text: `#${n.seq}` })));
  }
  const caption = v.selected !== null
    ? `Showing the branch ending at #${v.selected} as the column.`
    : 'Showing the main path (ending at the head) highlighted; click a node to read its branch as one column.';
  box.replaceChildren(el('p', { class: 'muted', id: 'graph-caption', text: caption }),
    el('div', { class: 'graph-scroll' }, drawing));
}
