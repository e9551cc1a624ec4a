// The dashboard in a real headless Chromium (puppeteer-core) against a real
// coordinator and agent running real small CPU jobs. Prints one line per
// case, "PASS: dashboard: NAME (T s)" or "FAIL: dashboard: NAME: why", then
// "N passed, N failed"; exits 1 when a case failed. Every case has its own
// time limit; scripts/test.sh gives the whole run one more.
//
//   node tests/dashboard/browser_test.js [--keep] [CASE...]   (from the repo root, after bazel build)
//
// --keep leaves the scratch folder (daemon logs, run folders) in place.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {Cluster} = require('./lib/cluster');
const {launch} = require('./lib/browser');
const {prepareMain, prepareScale} = require('./lib/jobs');
const cases = require('./cases');

async function runCase(c, env) {
  const t0 = Date.now();
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`time limit of ${c.limit_s} s reached`)), c.limit_s * 1000);
  });
  try {
    await Promise.race([c.run(env), limit]);
    console.log(`PASS: dashboard: ${c.name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return true;
  } catch (e) {
    console.log(`FAIL: dashboard: ${c.name}: ${e && e.stack ? e.stack : e}`);
    return false;
  } finally {
    clearTimeout(timer);
  }
}

async function main() {
  const args = process.argv.slice(2);
  const keep = args.includes('--keep');
  const only = args.filter((a) => !a.startsWith('--'));
  const chosen = cases.ALL.filter((c) => only.length === 0 || only.includes(c.name));
  if (chosen.length === 0) {
    console.error(`unknown case in ${only.join(', ')}; cases: ${cases.ALL.map((c) => c.name).join(', ')}`);
    process.exit(2);
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-dashboard-'));
  const env = {root, main: new Cluster(root, 'main'), scale: new Cluster(root, 'scale')};
  let passed = 0, failed = 0;
  // A stop from outside (scripts/test.sh's phase limit) ends the run at once:
  // the daemons get SIGTERM (the agent stops its workers), the browser is
  // killed, and the stop counts as one failed case.
  process.once('SIGTERM', () => {
    console.log('FAIL: dashboard: stopped by SIGTERM (time limit of the phase)');
    for (const p of [...env.main.procs, ...env.scale.procs]) if (p.exitCode === null) p.kill('SIGTERM');
    if (env.browser && env.browser.process()) env.browser.process().kill('SIGKILL');
    console.log(`scratch folder kept: ${root}`);
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
  });
  try {
    const t0 = Date.now();
    await prepareMain(env);
    if (chosen.some((c) => c.scale)) await prepareScale(env);
    env.browser = await launch();
    console.log(`setup: daemons, jobs and Chromium ready in ${((Date.now() - t0) / 1000).toFixed(1)} s (${root})`);
    for (const c of chosen) {
      if (await runCase(c, env)) passed++;
      else failed++;
    }
  } catch (e) {
    console.log(`FAIL: dashboard: setup: ${e && e.stack ? e.stack : e}`);
    console.log(`coordinator log:\n${env.main.log('coord.log')}\nagent log:\n${env.main.log('node.log')}`);
    failed++;
  } finally {
    if (env.browser) await env.browser.close().catch(() => {});
    await env.main.stop();
    await env.scale.stop();
    if (!keep && failed === 0) fs.rmSync(root, {recursive: true, force: true});
    else console.log(`scratch folder kept: ${root}`);
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();
