// Security cases: data calls without a valid token are refused (401) from
// the page's own origin, and strings a job controls render as text.
'use strict';
const {signIn} = require('./lib/browser');
const {HOSTILE} = require('./lib/jobs');
const {check, withPage} = require('./cases_jobs');

// Every data route of the API, as the page would call it.
function dataCalls(id) {
  return [
    ['GET', 'whoami'], ['GET', 'jobs'], ['GET', 'jobs?state=FAILED&page_size=5'], ['GET', `jobs/${id}`],
    ['GET', `jobs/${id}/metrics?after_step=-1`], ['GET', `jobs/${id}/logs?rank=0`], ['GET', `jobs/${id}/events`],
    ['POST', `jobs/${id}/cancel`], ['GET', 'agents'], ['GET', 'jobs/job-999999'],
  ];
}

// fetch() from inside the page (same origin as the dashboard) with the given
// Authorization header (null: none); returns [{call, status, auth, json}].
function fetchAll(page, calls, header) {
  return page.evaluate(async (calls, header) => {
    const out = [];
    for (const [method, p] of calls) {
      const ctl = new AbortController();
      const res = await fetch('/api/v1/' + p, {method, headers: header ? {Authorization: header} : {}, signal: ctl.signal});
      let json = null;
      if (res.status !== 200) json = await res.json().catch(() => null);
      ctl.abort();
      out.push({call: `${method} ${p}`, status: res.status, auth: res.headers.get('WWW-Authenticate'), json});
    }
    return out;
  }, calls, header);
}

async function unauthorized(env) {
  const c = env.main;
  await withPage(env, async (page) => {
    await page.goto(c.base + '/', {waitUntil: 'domcontentloaded'});
    const calls = dataCalls(env.liveId);
    const bad = [];
    for (const [label, header] of [['no token', null], ['a wrong token', 'Bearer not-the-token'],
                                   ['a token of another scheme', 'Basic ' + Buffer.from('u:' + c.token).toString('base64')]]) {
      for (const r of await fetchAll(page, calls, header)) {
        if (r.status !== 401 || !/^Bearer/.test(r.auth || '') || !r.json || typeof r.json.error !== 'string') {
          bad.push(`${label}: ${r.call} -> ${r.status} ${r.auth} ${JSON.stringify(r.json)}`);
        }
      }
    }
    // The real token in a URL is refused too (never a token in a query).
    const q = await fetchAll(page, [['GET', 'jobs?token=' + encodeURIComponent(c.token)]], null);
    if (q[0].status !== 400 && q[0].status !== 401) bad.push(`?token= in the URL -> ${q[0].status}`);
    const good = await fetchAll(page, [['GET', 'whoami']], 'Bearer ' + c.token);
    check(good[0].status === 200, `with the token, whoami answers ${good[0].status}`);
    check(bad.length === 0, 'not refused with 401:\n    ' + bad.join('\n    '));
    console.log(`  ${calls.length} data calls x 3 refused with 401 (WWW-Authenticate: Bearer); ?token= refused ` +
                `with ${q[0].status}`);
    // The prompt says so when the token is wrong, and stores nothing.
    await page.waitForSelector('#token', {visible: true});
    await page.type('#token', 'not-the-token');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('refused'));
    check(await page.evaluate(() => sessionStorage.length === 0), 'a refused token was kept in sessionStorage');
  }, {tokenInUrl: true});
  const job = await c.job(env.shortIds[0]);
  check(job.state === 'SUCCEEDED', `${env.shortIds[0]} is ${job.state} after unauthenticated cancels`);
}

// What the page's DOM and hooks show after rendering hostile text.
function audit(page) {
  return page.evaluate(() => ({
    xss: window.__xss.slice(),
    pwned: window.__pwned !== undefined,
    imgs: document.querySelectorAll('img').length,
    scripts: [...document.scripts].map((s) => s.getAttribute('src')),
    handlers: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
    jsLinks: [...document.querySelectorAll('[href],[src]')].filter((e) =>
        /^\s*javascript:/i.test(e.getAttribute('href') || e.getAttribute('src') || '')).length,
  }));
}

function checkClean(a, where) {
  check(a.xss.length === 0, `${where}: script ran or was blocked: ${a.xss.join('; ')}`);
  check(!a.pwned, `${where}: an injected <script> ran`);
  check(a.imgs === 0, `${where}: ${a.imgs} <img> element(s) in the DOM`);
  check(a.scripts.length === 1 && a.scripts[0] === '/static/app.js', `${where}: scripts ${JSON.stringify(a.scripts)}`);
  check(a.handlers === 0, `${where}: ${a.handlers} element(s) with on* attributes`);
  check(a.jsLinks === 0, `${where}: ${a.jsLinks} javascript: link(s)`);
}

async function hostileText(env) {
  const c = env.main;
  const id = env.hostileId;
  await withPage(env, async (page) => {
    await signIn(page, c.base, c.token);
    checkClean(await audit(page), 'jobs page');
    await page.goto(`${c.base}/#/jobs/${id}`, {waitUntil: 'domcontentloaded'});
    await page.waitForFunction(() => document.querySelector('#job-state').dataset.state === 'FAILED');
    await page.waitForFunction(() => document.querySelectorAll('#log-box .line').length > 0, {timeout: 15000});
    const shown = await page.evaluate(() => ({
      cause: (document.querySelector('#job-facts dd[data-field=root_cause]') || {}).textContent || '',
      ranks: document.querySelector('#ranks-body').textContent,
      logs: document.querySelector('#log-box').textContent,
      spec: document.querySelector('#job-spec').textContent,
    }));
    checkClean(await audit(page), 'job page');
    for (const [where, text] of Object.entries(shown)) {
      if (where === 'ranks') continue;
      for (const [k, s] of Object.entries(HOSTILE)) {
        check(text.includes(s), `${where} does not show the ${k} string as text: ${JSON.stringify(text.slice(0, 300))}`);
      }
    }
    check(page.dialogs.length === 0, 'dialogs opened: ' + page.dialogs.join('; '));
    console.log(`  root cause, log lines and spec show ${Object.keys(HOSTILE).length} hostile strings as text; ` +
                `0 script executions, 0 CSP violations, 0 injected elements`);
  });
}

module.exports = {unauthorized, hostileText};
