// One job (#/jobs/<id>): its summary, spec and state history, live charts,
// the per-rank table, a following log tail with a rank filter, and a cancel
// button (a POST with the token). Live updates come from
// /api/v1/jobs/<id>/events read with fetch(), opened at the newest point and
// log position already shown (after_step, log_cursor); when the stream drops
// before the job ends it is reopened after a pause the same way.
import {call, query, stream, Unauthorized} from './api.js';
import {LineChart} from './chart.js';
import {LogTail} from './logs.js';
import {h, fmtNum, fmtAge, stateBadge, TERMINAL} from './dom.js';

const RETRY_MS = 2000;
const FINAL_LOGS_MS = 1500;

export function jobView(root, ctx, id) {
  const path = 'jobs/' + encodeURIComponent(id);
  const abort = new AbortController();
  const charts = [
    new LineChart('loss', [{key: 'loss', label: 'train'}, {key: 'val_loss', label: 'val'}]),
    new LineChart('tokens/s', [{key: 'tokens_per_s', label: 'tokens/s'}]),
    new LineChart('step time (ms)', [{key: 'step_time_ms', label: 'step time'}]),
    new LineChart('learning rate', [{key: 'lr', label: 'lr'}]),
  ];
  const ui = {
    title: h('h1', {id: 'job-title'}), badge: h('span', {id: 'job-state'}),
    cancel: h('button', {id: 'cancel', type: 'button', className: 'danger'}, 'Cancel job'),
    message: h('p', {id: 'job-message', className: 'error'}),
    facts: h('dl', {id: 'job-facts', className: 'facts'}),
    history: h('tbody', {id: 'history-body'}), ranks: h('tbody', {id: 'ranks-body'}),
    spec: h('pre', {id: 'job-spec', className: 'spec'}),
  };
  const logs = new LogTail(path, ctx, abort.signal);
  root.append(
      h('div', {className: 'toolbar'}, h('a', {href: '#/jobs'}, '\u2190 jobs'), ui.title, ui.badge,
        h('span', {className: 'spacer'}), ui.cancel),
      ui.message, ui.facts,
      h('section', {id: 'charts', className: 'charts'}, charts.map((c) => c.el)),
      h('h2', {}, 'Ranks'),
      table('ranks-table', ['rank', 'host', 'agent', 'state', 'step', 'exit code', 'root cause'], ui.ranks),
      h('h2', {}, 'Logs'), logs.el,
      h('div', {className: 'two'},
        h('div', {}, h('h2', {}, 'State history'), table('history-table', ['state', 'at', 'reason'], ui.history)),
        h('div', {}, h('h2', {}, 'Spec'), ui.spec)));

  let last = {state: ''};
  let lastStep = -1;
  const addPoint = (p) => {
    for (const c of charts) c.add(p);
    lastStep = Math.max(lastStep, Number(p.step));
  };
  const refresh = async () => {
    try {
      last = await call(path, {signal: abort.signal});
      renderJob(ui, last);
      if (Array.isArray(last.ranks)) logs.setRanks(last.ranks.map((r) => r.rank));
    } catch (e) {
      if (!abort.signal.aborted) ctx.fail(e);
    }
  };
  ui.cancel.addEventListener('click', () => cancelJob(ui, path, ctx, refresh));

  (async () => {
    await refresh();
    while (!abort.signal.aborted) {
      // The log tail, then the stream from the tail's cursor and the newest
      // point held: nothing between the reads and the stream is missed.
      await logs.start();
      try {
        const r = await call(path + '/metrics' + query({after_step: lastStep}), {signal: abort.signal});
        (r.points || []).forEach(addPoint);
        if (TERMINAL.has(last.state)) return;
        await stream(path + '/events' + query({after_step: lastStep, log_cursor: logs.cursor}),
                     (name, data) => onEvent(name, data), abort.signal);
      } catch (e) {
        if (abort.signal.aborted) return;
        if (e instanceof Unauthorized) return ctx.fail(e);
        ui.message.textContent = 'live updates interrupted: ' + e.message + '; reconnecting';
      }
      await refresh();
      if (abort.signal.aborted) return;
      if (TERMINAL.has(last.state)) {
        // Ranks write their last lines while they stop, which may be after
        // the final state event: read the log once more.
        await new Promise((r) => setTimeout(r, FINAL_LOGS_MS));
        if (!abort.signal.aborted) logs.start();
        return;
      }
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  })();

  let refreshing = null;
  function onEvent(name, data) {
    if (name === 'metrics') addPoint(data);
    else if (name === 'log') logs.add(data);
    else if (name === 'state') {
      last = Object.assign({}, last, data);
      renderJob(ui, last);
      if (!refreshing) refreshing = refresh().finally(() => { refreshing = null; });
    }
  }
  return () => abort.abort();
}

async function cancelJob(ui, path, ctx, refresh) {
  ui.cancel.disabled = true;
  ui.message.textContent = '';
  try {
    const r = await call(path + '/cancel', {method: 'POST'});
    ui.message.textContent = 'cancel requested: ' + (r.state || '');
  } catch (e) {
    ui.cancel.disabled = false;
    if (e instanceof Unauthorized) return ctx.fail(e);
    ui.message.textContent = 'cancel failed: ' + e.message;
  }
  refresh();
}

function table(id, columns, body) {
  return h('table', {id, className: 'grid'}, h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))), body);
}

function renderJob(ui, j) {
  ui.title.textContent = `${j.id || ''} ${j.name || ''}`;
  ui.badge.replaceChildren(stateBadge(j.state));
  ui.badge.dataset.state = j.state || '';
  ui.cancel.disabled = TERMINAL.has(j.state);
  const total = Number(j.total_steps) || 0;
  const facts = [
    ['progress', total ? `${j.step ?? 0} / ${total}` : String(j.step ?? '')],
    ['loss', fmtNum(j.loss, 4)], ['tokens/s', fmtNum(j.tokens_per_s, 0)],
    ['submitter', j.submitter], ['attempt', j.attempt], ['restarts', j.restarts],
    ['created', j.created_at ? `${j.created_at} (${fmtAge(j.created_at)} ago)` : ''],
    ['wait reason', j.wait_reason], ['root cause', j.root_cause],
  ];
  ui.facts.replaceChildren(...facts.filter(([, v]) => v !== undefined && v !== null && v !== '')
      .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {data: {field: k.replace(' ', '_')}}, String(v))]));
  if (j.spec !== undefined) ui.spec.textContent = j.spec;
  if (Array.isArray(j.history)) {
    ui.history.replaceChildren(...j.history.map((e) =>
        h('tr', {}, h('td', {}, stateBadge(e.state)), h('td', {}, e.at), h('td', {}, e.reason))));
  }
  if (Array.isArray(j.ranks)) {
    ui.ranks.replaceChildren(...j.ranks.map((r) =>
        h('tr', {data: {rank: r.rank}}, h('td', {className: 'num'}, r.rank), h('td', {}, r.host),
          h('td', {}, r.agent_id), h('td', {}, r.state), h('td', {className: 'num'}, fmtNum(r.step)),
          h('td', {className: 'num'}, r.exit_code ?? ''), h('td', {className: 'cause'}, r.root_cause))));
  }
}
