// Cases on the jobs of the main service: the jobs page, the live loss chart,
// following logs and cancelling (see cases.js for the list).
'use strict';
const fs = require('fs');
const path = require('path');
const {newPage, signIn} = require('./lib/browser');
const {sleep, waitFor} = require('./lib/cluster');
const {HOSTILE, SCALE_JOBS, SCALE_CANCEL_EVERY} = require('./lib/jobs');

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// Runs fn(page) on a fresh page, then checks that the page raised no error
// and that no request it made carried a token in its URL (the token travels
// only in the Authorization header) unless `tokenInUrl` (the case that
// checks such a request is refused), and that it holds no cookie.
async function withPage(env, fn, {tokenInUrl = false} = {}) {
  const page = await newPage(env.browser);
  const urls = [];
  page.on('request', (r) => urls.push(r.url()));
  try {
    await fn(page);
    check(page.problems.length === 0, 'page errors: ' + page.problems.join('; '));
    const tokens = [env.main.token, env.scale.token].filter(Boolean);
    const leaked = urls.filter((u) => tokens.some((t) => u.includes(t) || u.includes(encodeURIComponent(t))));
    check(tokenInUrl || leaked.length === 0, `a token in request URLs: ${leaked.length} of ${urls.length}`);
    const cookies = await page.cookies();
    check(cookies.length === 0, `cookies set: ${cookies.map((c) => c.name)}`);
  } finally {
    await page.closeAll();
  }
}

// The jobs page lists the service's real jobs with the states the API gives.
async function jobsPageLoads(env) {
  const c = env.main;
  await withPage(env, async (page) => {
    await signIn(page, c.base, c.token);
    const ids = [env.hostileId, ...env.shortIds, env.liveId];
    await page.waitForFunction((n) => document.querySelectorAll('#jobs-body tr[data-id]').length >= n, {}, ids.length);
    const rows = await page.$$eval('#jobs-body tr[data-id]', (trs) => trs.map((tr) => ({
      id: tr.dataset.id, state: tr.dataset.state, cells: [...tr.cells].map((td) => td.textContent)})));
    check(rows[0].id === env.liveId, `newest first: first row is ${rows[0].id}, not ${env.liveId}`);
    for (const id of ids) {
      const row = rows.find((r) => r.id === id);
      check(row, `${id} is not on the jobs page`);
      const api = await c.job(id);
      check(row.cells[2] === api.state || (id === env.liveId && row.cells[2] === 'RUNNING'),
            `${id}: page says ${row.cells[2]}, API says ${api.state}`);
      check(row.cells[1] === api.name, `${id}: name ${row.cells[1]} != ${api.name}`);
    }
    const short = rows.find((r) => r.id === env.shortIds[0]);
    check(short.cells[3].includes('30 / 30'), `${env.shortIds[0]} progress: '${short.cells[3]}'`);
    await page.select('#state-filter', 'FAILED');
    await page.waitForFunction(() => document.querySelector('#jobs-table').dataset.filter === 'FAILED');
    const failed = await page.$$eval('#jobs-body tr[data-id]', (trs) => trs.map((tr) => tr.dataset.id));
    check(failed.length === 1 && failed[0] === env.hostileId, `FAILED filter shows ${failed}`);
    console.log(`  jobs page: ${rows.length} rows; FAILED filter: ${failed.join(', ')}`);
  });
}

// Reads metrics.jsonl as the worker appends to it, polling every 5 ms: for
// each new step with a loss, when it was written. The newest line of a poll
// gets the file's mtime (its write time); earlier lines of the same poll get
// the previous poll's time, which is before they were written, so a latency
// measured from it is never too small.
function tailMetrics(file) {
  const seen = new Map();
  let offset = fs.existsSync(file) ? fs.statSync(file).size : 0;
  let rest = '';
  let lastPoll = Date.now();
  const poll = () => {
    const before = lastPoll;
    lastPoll = Date.now();
    if (!fs.existsSync(file)) return;
    const st = fs.statSync(file);
    if (st.size <= offset) return;
    const fd = fs.openSync(file, 'r');
    const buf = Buffer.alloc(st.size - offset);
    fs.readSync(fd, buf, 0, buf.length, offset);
    fs.closeSync(fd);
    offset = st.size;
    const lines = (rest + buf.toString('utf8')).split('\n');
    rest = lines.pop();
    const fresh = lines.map((l) => JSON.parse(l)).filter((p) => typeof p.loss === 'number' && !seen.has(p.step));
    fresh.forEach((p, i) => seen.set(p.step, i === fresh.length - 1 ? st.mtimeMs : before));
  };
  const timer = setInterval(poll, 5);
  return {seen, stop: () => clearInterval(timer)};
}

// The open job's loss chart gains points as the worker logs steps, each
// within 2 s of its metrics.jsonl line (the issue's bound).
async function liveLossChart(env) {
  const c = env.main;
  const WANT = 8;
  await withPage(env, async (page) => {
    await signIn(page, c.base, c.token);
    await page.goto(`${c.base}/#/jobs/${env.liveId}`, {waitUntil: 'domcontentloaded'});
    await page.waitForFunction(() => Number(document.querySelector('.chart[data-chart=loss] svg').dataset.count) > 0);
    await page.evaluate(() => {
      const svg = document.querySelector('.chart[data-chart=loss] svg');
      window.__chart = [];
      new MutationObserver(() => window.__chart.push([Number(svg.dataset.lastStep), Number(svg.dataset.count),
                                                      Date.now()]))
          .observe(svg, {attributes: true, attributeFilter: ['data-last-step']});
    });
    const count0 = await page.$eval('.chart[data-chart=loss] svg', (s) => Number(s.dataset.count));
    const tail = tailMetrics(path.join(env.liveRun, 'metrics.jsonl'));
    try {
      await waitFor(`${WANT} new steps in metrics.jsonl`, () => tail.seen.size >= WANT, 60000);
    } finally {
      tail.stop();
    }
    const steps = [...tail.seen.keys()].sort((a, b) => a - b).slice(0, WANT);
    const last = steps[steps.length - 1];
    await page.waitForFunction((s) => window.__chart.some(([step]) => step >= s), {timeout: 5000}, last)
        .catch(() => {});
    const chart = await page.evaluate(() => window.__chart);
    const lat = steps.map((s) => {
      const hit = chart.find(([step]) => step >= s);
      return hit ? hit[2] - tail.seen.get(s) : Infinity;
    });
    console.log(`  loss points: ${count0} on open, ${chart.length ? chart[chart.length - 1][1] : count0} after; ` +
                `latency file->chart per step (ms): ${steps.map((s, i) => `${s}:${lat[i].toFixed(0)}`).join(' ')}`);
    check(chart.length > 0 && chart[chart.length - 1][1] > count0, 'the loss chart gained no points');
    const worst = Math.max(...lat);
    check(worst < 2000, `a step reached the chart ${worst} ms after metrics.jsonl (bound 2000 ms)`);
  });
}



// Lines of the log box: [{rank, text}].
function logLines(page) {
  return page.$$eval('#log-box .line', (ls) => ls.map((l) => ({rank: l.dataset.rank, text: l.textContent})));
}

// The job page's log tail follows new lines, its rank filter shows one rank
// only, and its cancel button (a POST) takes the job to CANCELLED. While the
// job trains only rank 0 prints; after the cancel rank 1 prints the line of
// its SIGTERM, which must reach the page filtered to rank 1.
async function logsAndCancel(env) {
  const c = env.main;
  await withPage(env, async (page) => {
    await signIn(page, c.base, c.token);
    await page.goto(`${c.base}/#/jobs/${env.liveId}`, {waitUntil: 'domcontentloaded'});
    await page.waitForFunction(() => document.querySelectorAll('#log-box .line').length > 0, {timeout: 20000});
    const n0 = (await logLines(page)).length;
    await page.waitForFunction((n) => document.querySelectorAll('#log-box .line').length > n, {timeout: 30000}, n0);
    const all = await logLines(page);
    check(all.every((l) => l.rank === '0'), 'a training line from a rank other than 0');
    console.log(`  log lines: ${n0} on open, ${all.length} after following`);
    await page.waitForFunction(() => [...document.querySelectorAll('#log-rank option')].some((o) => o.value === '1'));
    await page.select('#log-rank', '0');
    await page.waitForFunction(() => document.querySelector('#log-box').dataset.rank === '0');
    await page.waitForFunction(() => document.querySelectorAll('#log-box .line').length > 0);
    await page.select('#log-rank', '1');
    await page.waitForFunction(() => document.querySelector('#log-box').dataset.rank === '1');
    await sleep(500);  // rank 0 goes on logging meanwhile
    const one = await logLines(page);
    check(one.length === 0, `rank 1 filter shows ${one.length} line(s) of rank(s) ${[...new Set(one.map((l) => l.rank))]}`);

    await page.waitForSelector('#cancel:not([disabled])');
    await page.click('#cancel');
    const j = await c.waitState(env.liveId, ['CANCELLED'], 30000);
    await page.waitForFunction(() => document.querySelector('#job-state').dataset.state === 'CANCELLED',
                               {timeout: 15000});
    check(await page.$eval('#cancel', (b) => b.disabled), 'the cancel button is still enabled on a CANCELLED job');
    await page.waitForFunction(() => [...document.querySelectorAll('#log-box .line')].some((l) =>
        l.dataset.rank === '1' && l.textContent.includes('SIGTERM')), {timeout: 20000});
    const after = await logLines(page);
    check(after.every((l) => l.rank === '1'), 'rank 1 filter shows other ranks after the cancel');
    console.log(`  cancelled from the page (API: ${j.state}); rank 1 filter then shows: ` +
                JSON.stringify(after.map((l) => l.text.trim()).slice(-1)[0]));
  });
}

module.exports = {check, withPage, jobsPageLoads, liveLossChart, logsAndCancel};
