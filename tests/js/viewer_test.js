'use strict';
// Headless-Chromium test of the trace viewer (tools/viewer) against a live trace server.
//
//   node tests/js/viewer_test.js --url http://127.0.0.1:PORT/ --screenshot OUT.png
//        [--timeout-ms 60000] [--switch activation=tile] [--expect-kinds loss,activation,...] [--wait-end]
//        [--expect-runs N]
//
// Opens the page, waits for records, switches one kind's compressor with the flag picker as a user
// would (the control round trip), waits for the expected kinds, takes a screenshot and prints one
// JSON line (with --wait-end, the screenshot waits for the run's end message). --expect-runs N
// (magic-check --bite: the clean run and each mutation's) waits for records of N runs, then picks
// the first in the page's run picker and requires the page to show it. Exit: 0 passed, 1 failed (reason on stderr), 2 bad arguments.

const { chromium } = require('playwright-core');

const KINDS = ['input', 'activation', 'logits', 'loss', 'gradient', 'reduced_gradient', 'update',
  'parameter', 'cotangent', 'score', 'other', 'attention'];
const COMPRESSORS = ['none', 'stats', 'tile', 'projection', 'top', 'empty'];

function usage(reason) {
  process.stderr.write(`viewer_test: ${reason}\nusage: node viewer_test.js --url URL --screenshot OUT.png ` +
    '[--timeout-ms N] [--switch KIND=COMPRESSOR] [--expect-kinds K1,K2,...] [--wait-end] [--expect-runs N]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { url: null, screenshot: null, timeoutMs: 60000, switchKind: 'activation', switchTo: 'tile', expectKinds: [], waitEnd: false, expectRuns: 0 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--wait-end') {
      opts.waitEnd = true;
      continue;
    }
    const value = argv[i + 1];
    if (!['--url', '--screenshot', '--timeout-ms', '--switch', '--expect-kinds', '--expect-runs'].includes(flag)) usage(`unknown argument ${flag}`);
    if (value === undefined || value.startsWith('--')) usage(`${flag} needs a value`);
    i++;
    if (flag === '--url') opts.url = value;
    if (flag === '--screenshot') opts.screenshot = value;
    if (flag === '--timeout-ms') {
      opts.timeoutMs = Number(value);
      if (!Number.isInteger(opts.timeoutMs) || opts.timeoutMs <= 0) usage(`--timeout-ms must be a positive integer, got ${value}`);
    }
    if (flag === '--expect-runs') {
      opts.expectRuns = Number(value);
      if (!Number.isInteger(opts.expectRuns) || opts.expectRuns <= 0) usage(`--expect-runs must be a positive integer, got ${value}`);
    }
    if (flag === '--switch') {
      const m = /^([a-z_]+)=([a-z]+)$/.exec(value);
      if (!m || !KINDS.includes(m[1]) || !COMPRESSORS.includes(m[2])) usage(`--switch must be KIND=COMPRESSOR, got ${value}`);
      opts.switchKind = m[1];
      opts.switchTo = m[2];
    }
    if (flag === '--expect-kinds') {
      opts.expectKinds = value.split(',').map((s) => s.trim()).filter(Boolean);
      const bad = opts.expectKinds.filter((k) => !KINDS.includes(k));
      if (bad.length) usage(`unknown kind(s) in --expect-kinds: ${bad.join(', ')}`);
    }
  }
  if (!opts.url) usage('--url is required');
  if (!opts.screenshot) usage('--screenshot is required');
  try { new URL(opts.url); } catch (e) { usage(`--url is not a URL: ${opts.url}`); }
  return opts;
}

/** Waits until fn(arg) is truthy in the page; false when the deadline passes first. */
async function waitInPage(page, deadline, fn, arg) {
  const timeout = deadline - Date.now();
  if (timeout <= 0) return false;
  try {
    await page.waitForFunction(fn, arg, { timeout, polling: 100 });
    return true;
  } catch (e) {
    if (e.name === 'TimeoutError') return false;
    throw e;
  }
}

async function run(opts) {
  const deadline = Date.now() + opts.timeoutMs;
  const switchKey = `${opts.switchKind}/${opts.switchTo}`;
  let browser = null;
  let reason = null;
  let switched = false;
  let everConnected = false;   // the server closes after "end", so report whether the page connected
  const pageErrors = [];
  const summary = { connected: false, records: 0, dropped: 0, byKind: {}, switched: false, missingKinds: opts.expectKinds, runs: [], shownRun: null };

  // The watchdog makes sure a wedged browser cannot hang the test past its timeout.
  const watchdog = setTimeout(() => {
    process.stderr.write('viewer_test: watchdog: the test did not finish in time\n');
    const done = () => process.exit(1);
    (browser ? browser.close().catch(() => {}) : Promise.resolve()).then(done);
    setTimeout(done, 5000).unref();
  }, opts.timeoutMs + 30000);
  watchdog.unref();

  try {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(opts.url, { timeout: Math.max(1000, deadline - Date.now()) });

    if (await waitInPage(page, deadline, () => window.__trace && window.__trace.connected && window.__trace.records > 0)) {
      everConnected = true;
    } else {
      reason = 'no records arrived (not connected, or the stream stayed empty)';
    }

    if (!reason) {
      // The picker shows the control in force only after hello; Apply is disabled until then.
      if (!(await waitInPage(page, deadline, () => window.__trace.lastControl !== null
          && !document.getElementById('apply').disabled))) {
        reason = 'no control arrived from the server';
      }
    }

    if (!reason) {
      const errorsBefore = await page.evaluate(() => window.__trace.errors.length);
      await page.selectOption(`#compressor-${opts.switchKind}`, opts.switchTo);
      await page.click('#apply');
      const ok = await waitInPage(page, deadline,
        ([key, n]) => (window.__trace.byKind[key] || 0) > 0 || window.__trace.errors.length > n || window.__trace.ended,
        [switchKey, errorsBefore]);
      const t = await page.evaluate(() => window.__trace);
      switched = (t.byKind[switchKey] || 0) > 0;
      if (!switched) {
        if (t.errors.length > errorsBefore) {
          const e = t.errors[t.errors.length - 1];
          reason = `the server refused the control: ${e.field}: ${e.message}`;
        } else if (t.ended) {
          reason = `the run ended before any ${switchKey} record arrived`;
        } else if (!ok) {
          reason = `timed out waiting for ${switchKey} records after Apply`;
        }
      }
    }

    if (!reason && opts.expectKinds.length) {
      const all = await waitInPage(page, deadline, (kinds) => window.__trace.ended
        || kinds.every((k) => Object.keys(window.__trace.byKind).some((key) => key.startsWith(`${k}/`))), opts.expectKinds);
      if (!all) reason = 'timed out waiting for the expected kinds';
    }

    if (!reason && opts.waitEnd && !(await waitInPage(page, deadline, () => window.__trace.ended))) {
      reason = 'timed out waiting for the end of the run';
    }

    if (!reason && opts.expectRuns) {
      if (!(await waitInPage(page, deadline, (n) => window.__trace.runs.length >= n, opts.expectRuns))) {
        reason = `records of fewer than ${opts.expectRuns} runs arrived`;
      } else {
        // Pick the first run as a user would: the status bar must name it.
        const first = await page.evaluate(() => window.__trace.runs[0]);
        await page.waitForTimeout(300);   // the picker's options are refilled on the next redraw
        await page.selectOption('#run-name', first);
        const shown = await waitInPage(page, deadline,
          (name) => document.getElementById('st-run').textContent === name, first);
        summary.shownRun = await page.evaluate(() => document.getElementById('st-run').textContent);
        if (!shown) reason = `picked run "${first}" in the run picker, but the page shows "${summary.shownRun}"`;
      }
    }

    // Let the page's throttled redraw catch up so the screenshot shows the latest records.
    await page.waitForTimeout(500);
    await page.screenshot({ path: opts.screenshot });

    const t = await page.evaluate(() => window.__trace);
    const seen = new Set(Object.keys(t.byKind).map((key) => key.split('/')[0]));
    summary.missingKinds = opts.expectKinds.filter((k) => !seen.has(k));
    Object.assign(summary, { connected: everConnected || t.connected, records: t.records, dropped: t.dropped, byKind: t.byKind, runs: t.runs });
    if (!reason && summary.missingKinds.length) reason = `expected kinds never seen: ${summary.missingKinds.join(', ')}`;
    if (!reason && pageErrors.length) reason = `the page threw: ${pageErrors[0]}`;
  } catch (e) {
    reason = reason || `${e.name || 'Error'}: ${String(e.message).split('\n')[0]}`;
  } finally {
    clearTimeout(watchdog);
    if (browser) await browser.close().catch(() => {});
  }
  summary.switched = switched;
  process.stdout.write(`${JSON.stringify(summary)}\n`);
  if (reason) {
    process.stderr.write(`viewer_test: FAIL: ${reason}\n`);
    return 1;
  }
  return 0;
}

run(parseArgs(process.argv.slice(2))).then((code) => process.exit(code));
