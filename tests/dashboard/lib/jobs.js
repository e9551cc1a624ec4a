// The jobs the browser tests look at, submitted through the real `loom
// submit` (and, for the 1,000-job store, the real JobService from Python).
'use strict';
const {execFileSync} = require('child_process');
const fs = require('fs');
const path = require('path');
const {REPO} = require('./cluster');

// Strings a job controls that must render as text: each would run script or
// make an element if a page put it in as HTML, or a link if it became an href.
const HOSTILE = {
  img: '<img src=x onerror=alert(1)>',
  script: '"><script>window.__pwned=1</script>',
  url: 'javascript:alert(3)',
};

const TINY_MODEL = 'model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n';

// A two-rank job that trains until cancelled, logging every LIVE_LOG_EVERY
// steps: the live chart, log and cancel cases watch it.
const LIVE_LOG_EVERY = 20;
function liveSpec(runDir) {
  return 'name: live\n' +
         'model: {family: gpt, n_layer: 2, n_head: 2, d_model: 64, seq_len: 32}\n' +
         `train: {steps: 1000000, batch_size: 8, log_every: ${LIVE_LOG_EVERY}}\n` +
         "parallel: {dp: 2, backend: 'cpu:gloo'}\n" +
         `run_dir: ${runDir}\n`;
}

// The hostile job's data file: a folder and file whose names hold the
// hostile strings ('/' splits the script string across the two). It is a
// valid shard when submitted (the CLI checks it) and cut to 2 bytes before
// any agent runs the job, so the worker fails naming the path: its root
// cause, its stderr lines and its spec's data.path all carry the strings.
function hostileDataFile(root) {
  const [before, after] = HOSTILE.script.split('/script>');
  const dir = path.join(root, before);
  fs.mkdirSync(dir, {recursive: true});
  const file = path.join(dir, `script>${after}${HOSTILE.img} ${HOSTILE.url}.bin`);
  const bytes = Buffer.alloc(4096);
  for (let i = 0; i < bytes.length; i++) bytes[i] = 32 + ((i * 7919) % 90);
  fs.writeFileSync(file, bytes);
  return file;
}

// The main service: coordinator, then the jobs queued before the agent
// joins (so the hostile job's data can be cut first), then the agent.
async function prepareMain(env) {
  const c = env.main;
  await c.startCoordinator();
  const data = hostileDataFile(c.root);
  env.hostileId = c.submit('hostile', 'name: hostile\n' + TINY_MODEL +
                           'train: {steps: 20, batch_size: 4, log_every: 1}\n' +
                           `data: {path: ${JSON.stringify(data)}}\nmax_restarts: 0\n`);
  fs.writeFileSync(data, 'ab');
  env.shortIds = ['short-a', 'short-b'].map((n) => c.submit(n, `name: ${n}\n${TINY_MODEL}` +
                                                              'train: {steps: 30, batch_size: 4, log_every: 5}\n'));
  env.liveRun = path.join(c.root, 'live-run');
  env.liveId = c.submit('live', liveSpec(env.liveRun));
  c.startAgent(2);
  await c.waitState(env.hostileId, ['FAILED'], 60000);
  for (const id of env.shortIds) await c.waitState(id, ['SUCCEEDED'], 60000);
  await c.waitState(env.liveId, ['RUNNING'], 60000);
}

// A second coordinator, with no agent, holding 1,000 jobs: every 4th
// cancelled (250 CANCELLED), the rest PENDING.
const SCALE_JOBS = 1000, SCALE_CANCEL_EVERY = 4;
async function prepareScale(env) {
  const c = env.scale;
  await c.startCoordinator();
  execFileSync('/usr/bin/python3', [path.join(__dirname, '../fill_store.py'), c.grpc, c.data, String(SCALE_JOBS),
                                    String(SCALE_CANCEL_EVERY)],
               {cwd: REPO, env: {...process.env, PYTHONPATH: path.join(REPO, 'bazel-bin')}, encoding: 'utf8',
                timeout: 120000});
}

module.exports = {HOSTILE, LIVE_LOG_EVERY, SCALE_JOBS, SCALE_CANCEL_EVERY, prepareMain, prepareScale};
