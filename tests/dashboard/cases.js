// The browser cases, in the order they run. Each is {name, limit_s, run(env)}
// and throws to fail; env holds the clusters (lib/cluster.js), the job ids
// (lib/jobs.js) and the browser. `scale: true` needs the 1,000-job store.
'use strict';
const {jobsPageLoads, liveLossChart, logsAndCancel} = require('./cases_jobs');
const {scaleJobsPage} = require('./cases_scale');
const {unauthorized, hostileText} = require('./cases_security');

const ALL = [
  {name: 'jobs-page', limit_s: 30, run: jobsPageLoads},
  {name: 'live-loss-chart', limit_s: 60, run: liveLossChart},
  {name: 'logs-and-cancel', limit_s: 60, run: logsAndCancel},
  {name: 'unauthorized-401', limit_s: 20, run: unauthorized},
  {name: 'hostile-strings', limit_s: 30, run: hostileText},
  {name: 'scale-1000-jobs', limit_s: 40, run: scaleJobsPage, scale: true},
];

module.exports = {ALL};
