// The log tail of one job: its lines (all ranks, or one), following new
// lines from the event stream. Lines are text nodes; at most MAX_LINES stay
// on screen.
import {call, query} from './api.js';
import {h} from './dom.js';

const MAX_LINES = 2000;
const READ_BYTES = 262144;
const MAX_ROUNDS = 8;

export class LogTail {
  constructor(path, ctx, signal) {
    this.path = path;
    this.ctx = ctx;
    this.signal = signal;
    this.rank = '';
    this.ranks = new Set();
    this.select = h('select', {id: 'log-rank', ariaLabel: 'rank filter'}, h('option', {value: ''}, 'all ranks'));
    this.follow = h('input', {id: 'log-follow', type: 'checkbox', checked: true});
    this.box = h('pre', {id: 'log-box', className: 'logs'});
    this.el = h('div', {className: 'logtail'},
                h('div', {className: 'toolbar'}, h('label', {}, 'rank ', this.select),
                  h('label', {}, this.follow, ' follow')),
                this.box);
    this.select.addEventListener('change', () => {
      this.rank = this.select.value;
      this.start();
    });
    this.seq = 0;
    this.cursor = '';
  }

  // (Re)loads the log for the current rank filter: reads it with the API's
  // cursor up to its end (at most MAX_ROUNDS reads; the last MAX_LINES lines
  // stay) and keeps the cursor, where the event stream's lines begin.
  async start() {
    const seq = ++this.seq;
    this.box.replaceChildren();
    this.box.dataset.rank = this.rank;
    let after = '';
    try {
      for (let round = 0; round < MAX_ROUNDS; round++) {
        const r = await call(this.path + '/logs' + query({rank: this.rank, after, limit: READ_BYTES}), {signal: this.signal});
        if (seq !== this.seq) return;
        (r.lines || []).forEach((l) => this.add(l));
        const done = !r.cursor || r.cursor === after || (r.lines || []).length === 0;
        after = r.cursor || after;
        if (done) break;
      }
      this.cursor = after;
    } catch (e) {
      if (!this.signal.aborted) this.ctx.fail(e);
    }
  }

  // One line {rank, stream, text}; shown when it passes the rank filter.
  add(line) {
    this.noteRank(line.rank);
    if (this.rank !== '' && String(line.rank) !== this.rank) return;
    const row = h('span', {className: 'line' + (line.stream === 'stderr' ? ' stderr' : ''), data: {rank: line.rank}},
                  h('span', {className: 'rank'}, `[${line.rank}] `), String(line.text ?? ''), '\n');
    this.box.append(row);
    while (this.box.childNodes.length > MAX_LINES) this.box.removeChild(this.box.firstChild);
    if (this.follow.checked) this.box.scrollTop = this.box.scrollHeight;
  }

  noteRank(rank) {
    if (rank === undefined || rank === null || this.ranks.has(String(rank))) return;
    this.ranks.add(String(rank));
    const opts = [...this.ranks].sort((a, b) => Number(a) - Number(b));
    const keep = this.select.value;
    this.select.replaceChildren(h('option', {value: ''}, 'all ranks'), ...opts.map((r) => h('option', {value: r}, 'rank ' + r)));
    this.select.value = keep;
  }

  // The ranks the job has, from its rank table (so the filter offers them
  // before any line arrived).
  setRanks(ranks) {
    for (const r of ranks) this.noteRank(r);
  }
}
