// A real Loom service for the browser tests: `loom coordinator` (gRPC and
// its HTTP port, where the dashboard is served) and optionally one `loom
// agent`, started from the built binary (bazel-bin/runtime/loom) in a
// scratch folder, and stopped by pid.
'use strict';
const {spawn, execFileSync} = require('child_process');
const fs = require('fs');
const path = require('path');

const REPO = path.resolve(__dirname, '../../..');
const LOOM = path.join(REPO, 'bazel-bin/runtime/loom');

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitFor(what, fn, ms, every = 50) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(every);
  }
}

class Cluster {
  // root: a scratch folder (made here); name: a label for its files.
  constructor(root, name) {
    if (!fs.existsSync(LOOM)) throw new Error(`${LOOM} is missing: build //runtime:loom first`);
    this.root = path.join(root, name);
    fs.mkdirSync(this.root, {recursive: true});
    this.data = path.join(this.root, 'coord');
    this.procs = [];
  }

  spawnLogged(args, log) {
    const fd = fs.openSync(path.join(this.root, log), 'a');
    const p = spawn(LOOM, args, {stdio: ['ignore', fd, fd]});
    fs.closeSync(fd);
    this.procs.push(p);
    return p;
  }

  // Starts the coordinator; resolves once it wrote its ports.
  async startCoordinator(extra = []) {
    const portFile = path.join(this.root, 'port');
    this.coordinator = this.spawnLogged(['coordinator', '--data-dir', this.data, '--listen', '127.0.0.1:0',
                                         '--metrics-listen', '127.0.0.1:0', '--port-file', portFile,
                                         '--data-roots', this.root, ...extra], 'coord.log');
    const ports = await waitFor('the coordinator\'s port file', () => {
      const s = fs.existsSync(portFile) ? fs.readFileSync(portFile, 'utf8').trim().split(/\s+/) : [];
      return s.length === 2 && Number(s[1]) > 0 ? s.map(Number) : null;
    }, 20000);
    this.grpc = `127.0.0.1:${ports[0]}`;
    this.base = `http://127.0.0.1:${ports[1]}`;
    this.token = fs.readFileSync(path.join(this.data, 'token'), 'utf8').trim();
  }

  startAgent(slots = 2) {
    this.agent = this.spawnLogged(['agent', '--coordinator', this.grpc, '--token-dir', this.data, '--data-dir',
                                   path.join(this.root, 'node'), '--cpu-slots', String(slots), '--hostname', 'node-a'],
                                  'node.log');
  }

  // Writes `yaml` to a file and submits it; returns the job id.
  submit(name, yaml) {
    const file = path.join(this.root, name + '.yaml');
    fs.writeFileSync(file, yaml);
    const out = execFileSync(LOOM, ['submit', file, '--wait-for-capacity', '--coordinator', this.grpc, '--data-dir',
                                    this.data], {encoding: 'utf8', timeout: 30000});
    const m = /\b(job-\d+)\b/.exec(out);
    if (!m) throw new Error(`loom submit printed no job id: ${out}`);
    return m[1];
  }

  // A JSON API call from node (not the browser): {status, headers, body}.
  async api(p, {method = 'GET', token = this.token} = {}) {
    const headers = token === null ? {} : {Authorization: 'Bearer ' + token};
    const res = await fetch(this.base + '/api/v1/' + p, {method, headers});
    const text = await res.text();
    let body = text;
    try { body = JSON.parse(text); } catch (e) { /* keep the text */ }
    return {status: res.status, headers: res.headers, body};
  }

  async job(id) {
    const r = await this.api('jobs/' + id);
    if (r.status !== 200) throw new Error(`GET jobs/${id}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  async waitState(id, states, ms) {
    return waitFor(`${id} in ${states}`, async () => {
      const j = await this.job(id);
      return states.includes(j.state) ? j : null;
    }, ms, 200);
  }

  log(name) {
    const f = path.join(this.root, name);
    return fs.existsSync(f) ? fs.readFileSync(f, 'utf8').slice(-3000) : '';
  }

  // SIGTERM to each process this cluster started (agent first), SIGKILL to
  // any still there after 10 s.
  async stop() {
    for (const p of this.procs.slice().reverse()) {
      if (p.exitCode !== null || p.signalCode !== null) continue;
      p.kill('SIGTERM');
      const gone = await Promise.race([new Promise((r) => p.once('exit', () => r(true))), sleep(10000)]);
      if (!gone) p.kill('SIGKILL');
    }
  }
}

module.exports = {Cluster, REPO, LOOM, sleep, waitFor};
