// The jobs page (#/jobs): a table of jobs, newest first, 50 a page, with a
// state filter. The filter and the page are asked of the server
// (/api/v1/jobs?state=&page_size=&page_token=), so a filter covers every job
// in the store, not only the rows on screen.
import {call, query} from './api.js';
import {h, fmtAge, fmtNum, stateBadge, STATES} from './dom.js';

const PAGE_SIZE = 50;
const REFRESH_MS = 5000;

export function jobsView(root, ctx) {
  const state = {filter: '', tokens: [''], page: 0, timer: null, seq: 0};
  const select = h('select', {id: 'state-filter', ariaLabel: 'state filter'},
                   h('option', {value: ''}, 'all states'), STATES.map((s) => h('option', {value: s}, s)));
  const prev = h('button', {id: 'prev-page', type: 'button', disabled: true}, '\u2190 newer');
  const next = h('button', {id: 'next-page', type: 'button', disabled: true}, 'older \u2192');
  const info = h('span', {id: 'jobs-info', className: 'muted'});
  const body = h('tbody', {id: 'jobs-body'});
  const table = h('table', {id: 'jobs-table', className: 'grid'},
                  h('thead', {}, h('tr', {}, ['job', 'name', 'state', 'progress', 'tokens/s', 'loss', 'age',
                                               'submitter'].map((c) => h('th', {}, c)))),
                  body);
  root.append(h('div', {className: 'toolbar'}, h('h1', {}, 'Jobs'), h('span', {className: 'spacer'}),
                h('label', {}, 'state ', select), prev, next, info),
              table);

  async function load() {
    const seq = ++state.seq;
    const params = {page_size: PAGE_SIZE, state: state.filter, page_token: state.tokens[state.page]};
    const t0 = performance.now();
    let r;
    try {
      r = await call('jobs' + query(params));
    } catch (e) {
      if (seq === state.seq) ctx.fail(e);
      return;
    }
    if (seq !== state.seq) return;  // a newer request (filter or page change) owns the table
    renderRows(body, r.jobs || []);
    state.tokens[state.page + 1] = r.next_page_token || '';
    prev.disabled = state.page === 0;
    next.disabled = !r.next_page_token;
    const first = state.page * PAGE_SIZE;
    const n = (r.jobs || []).length;
    info.textContent = n ? `${first + 1}\u2013${first + n} of ${r.total ?? '?'}` : `0 of ${r.total ?? 0}`;
    table.dataset.loadedMs = (performance.now() - t0).toFixed(1);
    table.dataset.filter = state.filter;
    table.dataset.rows = String(n);
    table.dataset.seq = String(seq);
  }

  select.addEventListener('change', () => {
    state.filter = select.value;
    state.tokens = [''];
    state.page = 0;
    load();
  });
  prev.addEventListener('click', () => { if (state.page > 0) { state.page--; load(); } });
  next.addEventListener('click', () => { if (state.tokens[state.page + 1]) { state.page++; load(); } });
  load();
  state.timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(state.timer);
}

function renderRows(body, jobs) {
  const now = Date.now();
  const rows = jobs.map((j) => {
    const total = Number(j.total_steps) || 0;
    const step = Number(j.step) || 0;
    const pct = total > 0 ? Math.min(100, (100 * step) / total) : 0;
    const bar = h('span', {className: 'bar'}, h('span', {className: 'fill'}));
    bar.firstChild.style.width = pct.toFixed(1) + '%';
    return h('tr', {data: {id: j.id, state: j.state}},
             h('td', {}, h('a', {href: '#/jobs/' + encodeURIComponent(j.id)}, j.id)),
             h('td', {className: 'name'}, j.name),
             h('td', {}, stateBadge(j.state)),
             h('td', {className: 'progress'}, bar, total > 0 ? `${step} / ${total}` : String(step)),
             h('td', {className: 'num'}, fmtNum(j.tokens_per_s, 0)),
             h('td', {className: 'num'}, fmtNum(j.loss, 4)),
             h('td', {className: 'num', title: j.created_at || ''}, fmtAge(j.created_at, now)),
             h('td', {}, j.submitter));
  });
  body.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', {colSpan: 8, className: 'muted'}, 'no jobs'))]));
}
