// Debian's headless Chromium driven by puppeteer-core (scripts/setup.sh
// installs both), and the page-side helpers the cases share.
'use strict';
const path = require('path');
const puppeteer = require(path.join(__dirname, '../node_modules/puppeteer-core'));

const CHROMIUM = '/usr/bin/chromium';

async function launch() {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // --no-sandbox: the tests run as root in CI, where Chromium's sandbox
    // refuses to start.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run'],
  });
}

// A fresh page in its own browser context (no sessionStorage shared with
// other cases). Page errors and failed script hooks are collected in
// page.problems; alert/confirm/prompt, CSP violations and dialogs are
// counted in window.__xss (see installHooks).
async function newPage(browser) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({width: 1280, height: 900});
  page.problems = [];
  page.dialogs = [];
  page.on('pageerror', (e) => page.problems.push('page error: ' + e.message));
  page.on('dialog', async (d) => {
    page.dialogs.push(d.type() + ': ' + d.message());
    await d.dismiss();
  });
  await installHooks(page);
  page.closeAll = () => context.close();
  return page;
}

// Runs before any of the page's own scripts on every navigation: replaces
// alert/confirm/prompt with counters and records every CSP violation, so a
// string that turned into script (or into an element that tried to load
// one) is counted whether or not the CSP stopped it.
async function installHooks(page) {
  await page.evaluateOnNewDocument(() => {
    window.__xss = [];
    for (const f of ['alert', 'confirm', 'prompt']) {
      window[f] = (m) => { window.__xss.push(f + ': ' + m); };
    }
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__xss.push(`csp: ${e.violatedDirective} blocked ${e.blockedURI} (${e.sample || ''})`);
    });
  });
}

// Signs in through the token prompt; resolves when the jobs page is shown.
async function signIn(page, base, token) {
  await page.goto(base + '/#/jobs', {waitUntil: 'domcontentloaded'});
  await page.waitForSelector('#token', {visible: true});
  await page.type('#token', token);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('#whoami').textContent.startsWith('signed in as'));
  await page.waitForSelector('#jobs-body tr');
}

module.exports = {launch, newPage, signIn, CHROMIUM};
