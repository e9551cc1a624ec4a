// Screenshots of the dashboard's three pages for docs/: the jobs page, one
// running job with its charts, and the agents page, taken in headless
// Chromium against a real coordinator and agent training small CPU jobs.
//
//   node tests/dashboard/screenshots.js     (from the repo root, after bazel build)
//
// Writes docs/dashboard-jobs.png, docs/dashboard-job.png, docs/dashboard-agents.png.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {Cluster, REPO, sleep} = require('./lib/cluster');
const {launch, newPage, signIn} = require('./lib/browser');

const MODEL = 'model: {family: gpt, n_layer: 2, n_head: 2, d_model: 64, seq_len: 32}\n';

async function main() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-shots-'));
  const c = new Cluster(root, 'main');
  let browser;
  try {
    await c.startCoordinator();
    c.startAgent(2);
    for (const n of ['tiny-a', 'tiny-b']) {
      const id = c.submit(n, `name: ${n}\n${MODEL}train: {steps: 200, batch_size: 8, log_every: 10}\n`);
      await c.waitState(id, ['SUCCEEDED'], 60000);
    }
    const live = c.submit('gpt-dp2', `name: gpt-dp2\n${MODEL}` +
        'train: {steps: 1000000, batch_size: 8, log_every: 25, eval_every: 250, lr: 0.003, warmup_steps: 500}\n' +
        "parallel: {dp: 2, backend: 'cpu:gloo'}\n");
    await c.waitState(live, ['RUNNING'], 60000);
    browser = await launch();
    const page = await newPage(browser);
    await signIn(page, c.base, c.token);
    await page.goto(`${c.base}/#/jobs/${live}`, {waitUntil: 'domcontentloaded'});
    await page.waitForFunction(() => Number(document.querySelector('.chart[data-chart=loss] svg').dataset.count) >= 60,
                               {timeout: 120000});
    await sleep(500);
    const out = (name) => path.join(REPO, 'docs', name);
    await page.screenshot({path: out('dashboard-job.png'), fullPage: true});
    await page.goto(`${c.base}/#/agents`, {waitUntil: 'domcontentloaded'});
    await page.waitForSelector('#agents-body tr[data-id]');
    await page.screenshot({path: out('dashboard-agents.png')});
    await page.goto(`${c.base}/#/jobs`, {waitUntil: 'domcontentloaded'});
    await page.waitForSelector('#jobs-body tr[data-id]');
    await page.screenshot({path: out('dashboard-jobs.png')});
    console.log('wrote docs/dashboard-{jobs,job,agents}.png');
  } finally {
    if (browser) await browser.close();
    await c.stop();
    fs.rmSync(root, {recursive: true, force: true});
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
