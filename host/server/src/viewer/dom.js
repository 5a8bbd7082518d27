// Building blocks of the viewer's views. Everything shown comes from the
// model, tools or users, so it is untrusted: it only ever reaches the page
// as text nodes (textContent) or attribute values, never as markup.

export const $ = (id) => document.getElementById(id);
export const enc = encodeURIComponent;

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.setAttribute('class', value);
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

/** Builds an element; attributes named `text` set its text, `on*` add listeners. */
export function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** The same for SVG. */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function statusBadge(status) {
  const name = String(status || 'unknown');
  return el('span', { class: `status status-${name.replace(/[^a-z_]/g, '')}`, text: name.replace('_', ' ') });
}

export function tokensOf(usage) {
  return usage ? (usage.prompt_tokens || 0) + (usage.completion_tokens || 0) : 0;
}

export function when(ms) {
  return ms ? new Date(ms).toLocaleString() : '';
}

export function ago(ms) {
  if (!ms) return '';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return when(ms);
}

export function duration(ms) {
  if (!ms) return '0 ms';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function dollars(usd) {
  const n = Number(usd) || 0;
  return `$${n.toFixed(n !== 0 && Math.abs(n) < 0.01 ? 6 : 4)}`;
}

export function statsText(stats) {
  const s = stats || {};
  const parts = [`${s.messages || 0} messages`, `${tokensOf(s.usage)} tokens`,
    `${s.requests || 0} requests`, duration(s.duration_ms)];
  if (s.cost) parts.push(dollars(s.cost));
  return parts.join(' · ');
}

export function textOf(message) {
  return (message.content || [])
    .map((part) => {
      if (part.type === 'text') return part.text;
      if (part.type === 'image') return `[image: ${part.name}]`;
      return `[image: ${part.url}]`;
    })
    .join('');
}

export function prettyJson(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return text;
  }
}

/** The goals of a tree in drawing order (parents before children), each
 * with its depth; a cycle of parent ids in a damaged tree ends. */
export function goalsInOrder(tree) {
  const goals = (tree && tree.goals) || [];
  const byParent = new Map();
  for (const goal of goals) {
    const key = goal.parent_id || '';
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(goal);
  }
  const out = [];
  const seen = new Set();
  const walk = (parent, depth) => {
    for (const goal of byParent.get(parent) || []) {
      if (seen.has(goal.id)) continue;
      seen.add(goal.id);
      out.push({ goal, depth });
      walk(goal.id, depth + 1);
    }
  };
  walk('', 0);
  return out;
}
