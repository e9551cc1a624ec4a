// DOM helpers. Every string is placed with textContent or a text node, never
// parsed as HTML: job-controlled text (names, root causes, log lines, spec
// fields) renders as text whatever it holds.

// h('td', {className: 'num'}, 'text', childNode, ...): an element with the
// given properties and children. Property values are set as DOM properties
// (className, title, type, value, disabled, ...); `data` is an object of
// data-* attributes; `href` accepts only in-page hash links ('#/...').
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'data') {
      for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    } else if (k === 'href') {
      el.setAttribute('href', hashLink(v));
    } else if (k.startsWith('on')) {
      el.addEventListener(k.slice(2), v);
    } else {
      el[k] = v;
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// Only hash routes of this page are links; anything else (a `javascript:`
// URL, another origin) becomes an inert '#'.
export function hashLink(v) {
  const s = String(v);
  return /^#\/[A-Za-z0-9_\-/%.]*$/.test(s) ? s : '#';
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

export function byId(id) {
  return document.getElementById(id);
}

// A number for a table cell: '' for null/undefined, else fixed or compact.
export function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return '';
  const n = Number(v);
  if (Number.isInteger(n)) return n.toLocaleString('en-US');
  const a = Math.abs(n);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return n.toExponential(2);
  return n.toFixed(digits);
}

// Age of an RFC 3339 time relative to now: '5s', '3m', '2h', '4d'.
export function fmtAge(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  let s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return s + 's';
  s = Math.floor(s / 60);
  if (s < 60) return s + 'm';
  s = Math.floor(s / 60);
  if (s < 48) return s + 'h';
  return Math.floor(s / 24) + 'd';
}

export const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
export const STATES = ['PENDING', 'SCHEDULED', 'RUNNING', 'RESTARTING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

// A state badge: its class comes from the fixed list, its text from the data.
export function stateBadge(state) {
  const known = STATES.includes(state) ? state.toLowerCase() : 'unknown';
  return h('span', {className: 'state state-' + known}, state || '?');
}
