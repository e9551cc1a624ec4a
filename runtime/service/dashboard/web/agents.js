// The agents page (#/agents): every agent with its resources, heartbeat and
// the ranks it runs, refreshed every few seconds.
import {call} from './api.js';
import {h, fmtAge, hashLink} from './dom.js';

const REFRESH_MS = 5000;

export function agentsView(root, ctx) {
  const body = h('tbody', {id: 'agents-body'});
  const info = h('span', {id: 'agents-info', className: 'muted'});
  root.append(h('div', {className: 'toolbar'}, h('h1', {}, 'Agents'), h('span', {className: 'spacer'}), info),
              h('table', {id: 'agents-table', className: 'grid'},
                h('thead', {}, h('tr', {}, ['agent', 'host', 'state', 'cpus', 'gpus', 'memory', 'last heartbeat',
                                             'running ranks'].map((c) => h('th', {}, c)))),
                body));
  let seq = 0;
  async function load() {
    const mine = ++seq;
    let r;
    try {
      r = await call('agents');
    } catch (e) {
      if (mine === seq) ctx.fail(e);
      return;
    }
    if (mine !== seq) return;
    const agents = r.agents || [];
    info.textContent = `${agents.length} agent${agents.length === 1 ? '' : 's'}`;
    body.replaceChildren(...agents.map(row));
    if (!agents.length) body.append(h('tr', {}, h('td', {colSpan: 8, className: 'muted'}, 'no agents')));
  }
  load();
  const timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(timer);
}

function row(a) {
  const ranks = (a.running_ranks || []).map((r) =>
      h('a', {className: 'chip', href: hashLink('#/jobs/' + encodeURIComponent(r.job_id))}, `${r.job_id}/${r.rank}`));
  return h('tr', {data: {id: a.id}},
           h('td', {}, a.id), h('td', {}, a.host), h('td', {}, a.state),
           h('td', {className: 'num'}, a.cpus ?? ''), h('td', {className: 'num'}, a.gpus ?? ''),
           h('td', {className: 'num'}, bytes(a.memory_bytes)),
           h('td', {title: a.last_heartbeat || ''}, a.last_heartbeat ? fmtAge(a.last_heartbeat) + ' ago' : ''),
           h('td', {}, ranks.length ? ranks : '\u2014'));
}

function bytes(n) {
  if (n === null || n === undefined) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + ' ' + units[i];
}
