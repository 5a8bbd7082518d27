// Runs inside a page's isolated world (the page's scripts cannot patch
// what it calls), as `(function)(op, arg)`; returns plain JSON.
(op, arg) => {
  const MAX_ITEMS = 500;
  const squash = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const textOf = (n) => squash(n ? n.innerText || n.textContent : '');
  const tag = (el) => el.tagName.toLowerCase();
  const typeOf = (el) => (el.getAttribute('type') || '').toLowerCase();
  const implicitRole = (el) => {
    const t = tag(el);
    const type = typeOf(el);
    if (t === 'a' || t === 'area') return el.hasAttribute('href') ? 'link' : '';
    if (t === 'button') return 'button';
    if (t === 'input') {
      if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
      if (type === 'checkbox') return 'checkbox';
      if (type === 'radio') return 'radio';
      if (type === 'search') return 'searchbox';
      if (type === 'range') return 'slider';
      if (type === 'number') return 'spinbutton';
      if (type === 'hidden') return '';
      return 'textbox';
    }
    if (t === 'textarea') return 'textbox';
    if (t === 'select') return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
    if (t === 'option') return 'option';
    if (/^h[1-6]$/.test(t)) return 'heading';
    if (t === 'img') return el.getAttribute('alt') === '' ? 'presentation' : 'img';
    const table = { nav: 'navigation', main: 'main', form: 'form', ul: 'list', ol: 'list',
      li: 'listitem', table: 'table', tr: 'row', td: 'cell', th: 'columnheader',
      dialog: 'dialog', article: 'article', aside: 'complementary', summary: 'button' };
    return table[t] || '';
  };
  const roleOf = (el) =>
    (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase() || implicitRole(el);
  const labelOf = (el) => {
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const text = squash(by.split(/\s+/).map((id) => textOf(document.getElementById(id))).join(' '));
      if (text) return text;
    }
    const aria = squash(el.getAttribute('aria-label'));
    if (aria) return aria;
    if (el.labels && el.labels.length) return squash(Array.from(el.labels).map(textOf).join(' '));
    return '';
  };
  const nameOf = (el) => {
    const label = labelOf(el);
    if (label) return label;
    const t = tag(el);
    if (t === 'input') {
      const type = typeOf(el);
      if (['submit', 'button', 'reset'].includes(type)) return el.value || (type === 'submit' ? 'Submit' : '');
      if (type === 'image') return el.alt || '';
      return squash(el.placeholder || el.title);
    }
    if (t === 'textarea' || t === 'select') return squash(el.placeholder || el.title);
    if (t === 'img') return squash(el.alt || el.title);
    return textOf(el) || squash(el.title);
  };
  const shown = (el) => {
    const style = getComputedStyle(el);
    return style.display !== 'none' && style.visibility !== 'hidden';
  };
  const find = (loc) => {
    if (loc.css !== undefined) {
      try {
        return document.querySelector(loc.css);
      } catch (e) {
        return { error: `invalid CSS selector: ${e.message}` };
      }
    }
    const want = loc.role.toLowerCase();
    const name = loc.name == null ? null : loc.name.toLowerCase();
    let hidden = null;
    for (const el of document.querySelectorAll('*')) {
      if (roleOf(el) !== want) continue;
      if (name !== null && !nameOf(el).toLowerCase().includes(name)) continue;
      const rect = el.getBoundingClientRect();
      if (shown(el) && rect.width > 0 && rect.height > 0) return el;
      hidden = hidden || el;
    }
    return hidden;
  };
  const selectorOf = (el) => {
    const esc = (s) => CSS.escape(s);
    if (el.id && document.querySelectorAll(`#${esc(el.id)}`).length === 1) return `#${esc(el.id)}`;
    const name = el.getAttribute('name');
    if (name) {
      const s = `${tag(el)}[name="${name.replace(/["\\]/g, '\\$&')}"]`;
      if (document.querySelectorAll(s).length === 1) return s;
    }
    const path = [];
    for (let n = el; n && n.nodeType === 1 && n !== document.documentElement; n = n.parentElement) {
      let i = 1;
      for (let s = n.previousElementSibling; s; s = s.previousElementSibling) if (tag(s) === tag(n)) i++;
      path.unshift(`${tag(n)}:nth-of-type(${i})`);
    }
    return `html > ${path.join(' > ')}`;
  };
  const markdown = (root) => {
    const out = [];
    const block = ['p', 'div', 'section', 'article', 'main', 'header', 'footer', 'nav', 'form',
      'table', 'tr', 'ul', 'ol', 'blockquote', 'fieldset', 'figure', 'aside', 'dl', 'dt', 'dd'];
    const walk = (n) => {
      if (n.nodeType === 3) {
        out.push(n.textContent.replace(/\s+/g, ' '));
        return;
      }
      if (n.nodeType !== 1) return;
      const el = n;
      const t = tag(el);
      if (['script', 'style', 'noscript', 'template', 'svg', 'head', 'canvas'].includes(t)) return;
      if (!shown(el)) return;
      const kids = () => el.childNodes.forEach(walk);
      if (/^h[1-6]$/.test(t)) {
        out.push(`\n\n${'#'.repeat(Number(t[1]))} `);
        kids();
        out.push('\n\n');
        return;
      }
      if (block.includes(t)) {
        out.push('\n\n');
        kids();
        out.push('\n\n');
        return;
      }
      switch (t) {
        case 'br': out.push('\n'); return;
        case 'hr': out.push('\n\n---\n\n'); return;
        case 'li': out.push('\n- '); kids(); return;
        case 'a': {
          const href = el.getAttribute('href');
          if (href && !/^\s*javascript:/i.test(href)) {
            out.push('[');
            kids();
            out.push(`](${el.href})`);
          } else kids();
          return;
        }
        case 'img': {
          const alt = squash(el.getAttribute('alt'));
          if (alt) out.push(`![${alt}]`);
          return;
        }
        case 'strong': case 'b': out.push('**'); kids(); out.push('**'); return;
        case 'em': case 'i': out.push('_'); kids(); out.push('_'); return;
        case 'code': out.push('`'); kids(); out.push('`'); return;
        case 'pre': out.push(`\n\n\`\`\`\n${el.innerText}\n\`\`\`\n\n`); return;
        case 'td': case 'th': out.push(' | '); kids(); return;
        case 'input': {
          const type = typeOf(el) || 'text';
          if (type === 'hidden') return;
          const name = nameOf(el);
          const value = type === 'password' || !el.value ? '' : ` = "${el.value}"`;
          out.push(`[${type} field${name ? ` "${name}"` : ''}${value}]`);
          return;
        }
        case 'textarea': case 'select': {
          const name = nameOf(el);
          const value = t === 'select' ? textOf(el.selectedOptions[0]) : el.value;
          out.push(`[${t}${name ? ` "${name}"` : ''}${value ? ` = "${value}"` : ''}]`);
          return;
        }
        case 'button': out.push(`[button "${nameOf(el)}"]`); return;
        case 'iframe': {
          out.push(`\n\n[frame ${el.src}]\n`);
          try {
            if (el.contentDocument && el.contentDocument.body) walk(el.contentDocument.body);
          } catch (e) {
            // A frame of another origin cannot be read from here.
          }
          out.push('\n\n');
          return;
        }
        default: kids();
      }
    };
    walk(root);
    return out.join('').replace(/[ \t]+\n/g, '\n').replace(/\n[ \t]+/g, '\n')
      .replace(/\n{3,}/g, '\n\n').trim();
  };
  const located = (loc) => {
    const el = find(loc);
    if (el && el.error) return el;
    return el ? { el } : { missing: true };
  };
  switch (op) {
    case 'mark': {
      const found = located(arg);
      if (!found.el) return found;
      const ref = String(Date.now()) + String(Math.random()).slice(2, 10);
      found.el.setAttribute('data-reson-ref', ref);
      found.el.scrollIntoView({ block: 'center', inline: 'center' });
      return { ref, tag: tag(found.el), type: typeOf(found.el) };
    }
    case 'exists': {
      const found = located(arg);
      return found.el ? { found: true } : found;
    }
    case 'clear': {
      const el = document.querySelector(`[data-reson-ref="${arg}"]`);
      if (!el) return { missing: true };
      el.focus();
      if ('value' in el) {
        el.value = '';
        el.dispatchEvent(new Event('input', { bubbles: true }));
      } else if (el.isContentEditable) el.textContent = '';
      return {};
    }
    case 'choose': {
      const el = document.querySelector(`[data-reson-ref="${arg.ref}"]`);
      if (!el) return { missing: true };
      const want = arg.text.toLowerCase();
      const option = Array.from(el.options).find((o) => o.value.toLowerCase() === want
        || textOf(o).toLowerCase() === want);
      // The page's words: the host labels them.
      if (!option) return { options: Array.from(el.options).map((o) => textOf(o)) };
      el.value = option.value;
      el.dispatchEvent(new Event('input', { bubbles: true }));
      el.dispatchEvent(new Event('change', { bubbles: true }));
      return {};
    }
    case 'read': {
      let root = document.body || document.documentElement;
      if (arg.loc) {
        const found = located(arg.loc);
        if (!found.el) return found;
        root = found.el;
      }
      const content = arg.markdown ? markdown(root) : (root.innerText || root.textContent || '');
      return { content };
    }
    case 'links':
      return Array.from(document.querySelectorAll('a[href], area[href]'))
        .filter((a) => !/^\s*javascript:/i.test(a.getAttribute('href')))
        .slice(0, MAX_ITEMS)
        .map((a) => ({ text: nameOf(a), href: a.href }));
    case 'fields':
      return Array.from(document.querySelectorAll('input, textarea, select, button'))
        .filter((el) => typeOf(el) !== 'hidden')
        .slice(0, MAX_ITEMS)
        .map((el) => ({
          selector: selectorOf(el),
          tag: tag(el),
          kind: tag(el) === 'input' ? typeOf(el) || 'text' : tag(el) === 'button' ? typeOf(el) || 'submit' : '',
          name: el.getAttribute('name') || '',
          label: nameOf(el),
          value: typeOf(el) === 'password' ? '' : tag(el) === 'select' ? el.value : el.value || '',
        }));
    case 'ready':
      return document.readyState;
    case 'mark-document':
      // A global of this isolated world: a new document starts without it,
      // and one restored from the back-forward cache has an older mark.
      window.__resonMark = arg;
      return {};
    case 'go':
      location.assign(arg);
      return {};
    case 'document':
      return { marked: window.__resonMark === arg, ready: document.readyState, url: document.URL,
        title: document.title };

    case 'size': {
      const d = document.documentElement;
      const b = document.body || d;
      return { width: Math.max(d.scrollWidth, b.scrollWidth, d.clientWidth),
        height: Math.max(d.scrollHeight, b.scrollHeight, d.clientHeight) };
    }
    default:
      return { error: `unknown operation ${op}` };
  }
}
