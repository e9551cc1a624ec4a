// The JSON API under /api/v1/ (docs/dashboard.md). The token lives in this
// tab's sessionStorage and travels only in the Authorization header, never
// in a URL.

const KEY = 'loom.token';

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

// Raised for a 401 so that the app can ask for a token again.
export class Unauthorized extends Error {}

function headers(extra) {
  return Object.assign({'Authorization': 'Bearer ' + token()}, extra || {});
}

async function errorOf(res) {
  let msg = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    if (body && typeof body.error === 'string') msg = body.error;
  } catch (e) { /* not JSON: keep the status line */ }
  return msg;
}

// GET or POST a JSON endpoint; resolves to the parsed body.
export async function call(path, {method = 'GET', signal} = {}) {
  const res = await fetch('/api/v1/' + path, {method, headers: headers(), signal, cache: 'no-store'});
  if (res.status === 401) throw new Unauthorized(await errorOf(res));
  if (!res.ok) throw new Error(await errorOf(res));
  return res.json();
}

// Query string from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// Reads a text/event-stream body with fetch() (so the token stays in a
// header) and calls onEvent(name, data) for each event; comments
// (keepalives) are skipped. Resolves when the server ends the stream;
// rejects on a network error, a non-2xx answer, or abort.
export async function stream(path, onEvent, signal) {
  const res = await fetch('/api/v1/' + path, {headers: headers({'Accept': 'text/event-stream'}), signal, cache: 'no-store'});
  if (res.status === 401) throw new Unauthorized(await errorOf(res));
  if (!res.ok) throw new Error(await errorOf(res));
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += value;
    let cut;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
      dispatch(block, onEvent);
    }
  }
  if (buf.trim()) dispatch(buf, onEvent);
}

function dispatch(block, onEvent) {
  let name = 'message';
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return;
  let parsed;
  try {
    parsed = JSON.parse(data.join('\n'));
  } catch (e) {
    return;  // a malformed event is dropped, the stream goes on
  }
  onEvent(name, parsed);
}
