// The dashboard's entry: the token prompt, the hash router (#/jobs,
// #/jobs/<id>, #/agents) and the shared error handling. Each view is a
// function (root, ctx, ...args) that fills `root` and returns its cleanup.
import {call, setToken, token, Unauthorized} from './api.js';
import {agentsView} from './agents.js';
import {byId, clear, h} from './dom.js';
import {jobView} from './job.js';
import {jobsView} from './jobs.js';

let cleanup = null;

const ctx = {
  // A failed data call: a 401 asks for the token again; anything else is
  // shown above the view.
  fail(e) {
    if (e instanceof Unauthorized) {
      setToken('');
      showLogin('token refused: ' + e.message);
      return;
    }
    let bar = byId('view-error');
    if (!bar) {
      bar = h('p', {id: 'view-error', className: 'error'});
      byId('view').prepend(bar);
    }
    bar.textContent = e.message || String(e);
  },
};

function route() {
  if (cleanup) cleanup();
  cleanup = null;
  const view = byId('view');
  clear(view);
  if (!token()) return showLogin('');
  byId('login').classList.add('hidden');
  const hash = location.hash || '#/jobs';
  const job = /^#\/jobs\/([^/]+)$/.exec(hash);
  byId('nav-jobs').classList.toggle('active', hash.startsWith('#/jobs'));
  byId('nav-agents').classList.toggle('active', hash === '#/agents');
  if (job) cleanup = jobView(view, ctx, decodeURIComponent(job[1]));
  else if (hash === '#/agents') cleanup = agentsView(view, ctx);
  else cleanup = jobsView(view, ctx);
}

function showLogin(message) {
  if (cleanup) cleanup();
  cleanup = null;
  clear(byId('view'));
  byId('login').classList.remove('hidden');
  byId('signout').classList.add('hidden');
  byId('whoami').textContent = '';
  byId('login-error').textContent = message;
  byId('token').focus();
}

async function whoami() {
  const me = await call('whoami');
  byId('whoami').textContent = 'signed in as ' + (me.name || '?');
  byId('signout').classList.remove('hidden');
}

async function signIn(ev) {
  ev.preventDefault();
  const input = byId('token');
  setToken(input.value.trim());
  input.value = '';
  try {
    await whoami();
  } catch (e) {
    setToken('');
    showLogin(e instanceof Unauthorized ? 'token refused: ' + e.message : String(e.message || e));
    return;
  }
  route();
}

function start() {
  byId('login-form').addEventListener('submit', signIn);
  byId('signout').addEventListener('click', () => {
    setToken('');
    showLogin('');
  });
  window.addEventListener('hashchange', route);
  if (token()) whoami().catch((e) => ctx.fail(e));
  route();
}

start();
