'use strict';
// Headless-Chromium test of the trace viewer (tools/viewer) against a live trace server.
//
//   node tests/js/viewer_test.js --url http://127.0.0.1:PORT/ --screenshot OUT.png
//        [--timeout-ms 60000] [--switch activation=tile] [--expect-kinds loss,activation,...] [--wait-end]
//        [--expect-runs N] [--late-screenshot LATE.png] [--check-views]
//
// Opens the page, waits for records, switches one kind's compressor with the flag picker as a user
// would (the control round trip), waits for the expected kinds, takes a screenshot and prints one
// JSON line (with --wait-end, the screenshot waits for the run's end message). --expect-runs N
// (magic-check --bite: the clean run and each mutation's) waits for records of N runs, then picks
// the first in the page's run picker and requires the page to show it. --late-screenshot opens a
// second page once the first has the loss of three steps: it must get the server's history and,
// at the end, plot the loss of every step the first page plotted, from the run's first (its
// screenshot goes to LATE.png). --check-views then feeds the first page records of its own
// (a run named "viewer_test: views"): each score table must hold only its sign, name examples by
// id, and say when none has the sign; the λ axis's tick labels must differ from their neighbours.
// When the URL carries the server's token (?token=...), the stream must refuse a WebSocket from the
// viewer's own origin without it and one from a page of another origin with it.
// Exit: 0 passed, 1 failed (reason on stderr), 2 bad arguments.

const { chromium } = require('playwright-core');

const KINDS = ['input', 'activation', 'logits', 'loss', 'gradient', 'reduced_gradient', 'update',
  'parameter', 'cotangent', 'score', 'other', 'attention'];
const COMPRESSORS = ['none', 'stats', 'tile', 'projection', 'top', 'empty'];

function usage(reason) {
  process.stderr.write(`viewer_test: ${reason}\nusage: node viewer_test.js --url URL --screenshot OUT.png ` +
    '[--timeout-ms N] [--switch KIND=COMPRESSOR] [--expect-kinds K1,K2,...] [--wait-end] [--expect-runs N] ' +
    '[--late-screenshot LATE.png] [--check-views]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { url: null, screenshot: null, timeoutMs: 60000, switchKind: 'activation', switchTo: 'tile', expectKinds: [], waitEnd: false, expectRuns: 0, lateScreenshot: null, checkViews: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--wait-end') {
      opts.waitEnd = true;
      continue;
    }
    if (flag === '--check-views') {
      opts.checkViews = true;
      continue;
    }
    const value = argv[i + 1];
    if (!['--url', '--screenshot', '--timeout-ms', '--switch', '--expect-kinds', '--expect-runs', '--late-screenshot'].includes(flag)) usage(`unknown argument ${flag}`);
    if (value === undefined || value.startsWith('--')) usage(`${flag} needs a value`);
    i++;
    if (flag === '--url') opts.url = value;
    if (flag === '--screenshot') opts.screenshot = value;
    if (flag === '--late-screenshot') opts.lateScreenshot = value;
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

/** What a page plotted of the loss, and the history it got. */
function lossView(page) {
  return page.evaluate(() => ({ loss: window.__trace.charts['chart-loss'] || null, history: window.__trace.history,
    ended: window.__trace.ended }));
}

/**
 * The late page (issue 43: a viewer that connected mid-run drew nothing of the run so far): it
 * must have received a history and plot the loss of the same steps as the page that was there
 * from the start, beginning at the run's first step. Returns a reason, or null.
 */
async function checkLatePage(first, late, deadline) {
  // Both pages redraw on their own timers: wait until they show the same last step.
  await waitInPage(late, deadline, () => window.__trace.ended);
  await first.waitForTimeout(500);
  const a = await lossView(first);
  const b = await lossView(late);
  if (!b.history || b.history.records <= 0) return 'the late page got no history';
  if (b.history.received !== b.history.records) return `the late page got ${b.history.received} of its ${b.history.records} history records`;
  if (!a.loss || !b.loss || !(b.loss.points > 1)) return `the late page plots ${b.loss ? b.loss.points : 0} loss points`;
  if (b.loss.firstX !== a.loss.firstX || b.loss.points !== a.loss.points || b.loss.lastX !== a.loss.lastX) {
    return `the late page plots loss steps ${b.loss.firstX}..${b.loss.lastX} (${b.loss.points} points), ` +
      `the first page ${a.loss.firstX}..${a.loss.lastX} (${a.loss.points})`;
  }
  return null;
}

/** Records of a run of the test's own, fed to the page as if the server had sent them. */
function feedViewRecords(page, run) {
  return page.evaluate((name) => {
    const rec = (extra) => JSON.stringify({ type: 'record', run: name, rank: 0, coords: [], seq: 0, ...extra });
    // Three examples, one of which raises the loss: "raise" must list one row, "lower" two.
    handleMessage(rec({ step: -1, phase: 'replay', order: 'metagradient', kind: 'score', layer: '', name: 'scores',
      shape: [3], compressor: 'top', data: { positive: 1, negative: 2,
        largest: { index: [2, 0, 1], value: [3e-4, -1e-4, -2e-4], id: ['doc-c', 'doc-a', 'doc-b'] },
        smallest: { index: [1, 0, 2], value: [-2e-4, -1e-4, 3e-4], id: ['doc-b', 'doc-a', 'doc-c'] } } }));
    // A λ norm that moves by less than its fourth significant digit.
    for (let t = 0; t < 10; t++) {
      handleMessage(rec({ step: t, phase: 'replay', order: 'metagradient', kind: 'cotangent', layer: '', name: 'wte',
        shape: [4], compressor: 'stats', data: { norm: 1234.5 + 0.01 * t } }));
    }
  }, run);
}

/** Every score table holds its own sign, names examples by id, and the λ axis's labels differ. */
async function checkViews(page, deadline) {
  const run = 'viewer_test: views';
  await feedViewRecords(page, run);
  // The run picker is refilled on the next redraw.
  await waitInPage(page, deadline, (name) => [...document.getElementById('run-name').options].some((o) => o.value === name), run);
  await page.selectOption('#run-name', run);
  await waitInPage(page, deadline, () => document.querySelectorAll('#scores-body .score-side').length === 2);
  await page.waitForTimeout(300);
  const v = await page.evaluate(() => ({
    sides: [...document.querySelectorAll('#scores-body .score-side')].map((side) => ({
      sign: Number(side.dataset.sign),
      heading: side.textContent,
      rows: [...side.querySelectorAll('tbody tr')].map((tr) => [tr.children[1].textContent, Number(tr.children[2].textContent)]),
    })),
    ticks: (window.__trace.charts['chart-lambda'] || {}).yTicks || [],
  }));
  const want = { 1: [['doc-c', 3e-4]], '-1': [['doc-b', -2e-4], ['doc-a', -1e-4]] };
  for (const side of v.sides) {
    if (JSON.stringify(side.rows) !== JSON.stringify(want[side.sign])) {
      return `the ${side.sign > 0 ? 'raise' : 'lower'} table shows ${JSON.stringify(side.rows)}, expected ${JSON.stringify(want[side.sign])}`;
    }
  }
  if (!/1 of 3 examples positive/.test(v.sides[0].heading) || !/2 of 3 examples negative/.test(v.sides[1].heading)) {
    return `the score tables' headings do not count the signs: ${v.sides.map((s) => s.heading).join(' | ')}`;
  }
  if (v.ticks.length < 2 || v.ticks.some((t, i) => i > 0 && t === v.ticks[i - 1])) {
    return `the λ axis repeats a tick label: ${v.ticks.join(', ')}`;
  }
  // A score record with no example of a sign says so.
  await page.evaluate((name) => handleMessage(JSON.stringify({ type: 'record', run: name, rank: 0, coords: [], seq: 1,
    step: -1, phase: 'replay', order: 'metagradient', kind: 'score', layer: '', name: 'scores', shape: [2],
    compressor: 'top', data: { positive: 0, negative: 2, largest: { index: [0, 1], value: [-1, -2] },
      smallest: { index: [1, 0], value: [-2, -1] } } })), run);
  await page.waitForTimeout(500);
  const none = await page.evaluate(() => document.querySelector('#scores-body .score-side[data-sign="1"]').textContent);
  if (!/none: no example raises the query loss/.test(none)) return `a table with no row of its sign shows "${none}"`;
  return null;
}

/** Opens a WebSocket from `page` to `target`: 'open', 'refused' or 'timeout' (5 s). */
function tryWebSocket(page, target) {
  return page.evaluate((t) => new Promise((resolve) => {
    const s = new WebSocket(t);
    s.onopen = () => { s.close(); resolve('open'); };
    s.onerror = () => resolve('refused');
    setTimeout(() => resolve('timeout'), 5000);
  }), target);
}

/**
 * The server's token (docs/tracer.md, "The token"): without it the viewer's own origin gets no
 * stream, and with it a page of another origin (about:blank: Origin null) gets none either.
 * Returns a reason on failure, else null.
 */
async function checkRefusals(browser, url) {
  const u = new URL(url);
  const token = u.searchParams.get('token');
  if (!token) return null;
  const ws = `ws://${u.host}/trace`;
  // The viewer's origin without the token: its page is refused (401), but its origin is the viewer's.
  const page = await browser.newPage();
  try {
    await page.goto(`http://${u.host}/`);
    const own = await tryWebSocket(page, ws);
    if (own !== 'refused') return `the viewer's origin without the token: ${own}, expected refused`;
  } finally {
    await page.close();
  }
  const foreign = await browser.newPage();
  try {
    const other = await tryWebSocket(foreign, `${ws}?token=${encodeURIComponent(token)}`);
    if (other !== 'refused') return `a page of another origin with the token: ${other}, expected refused`;
  } finally {
    await foreign.close();
  }
  return null;
}

async function run(opts) {
  const deadline = Date.now() + opts.timeoutMs;
  const switchKey = `${opts.switchKind}/${opts.switchTo}`;
  let browser = null;
  let late = null;
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
    // Before the viewer connects: the run waits for its first client (--trace-wait), so the server
    // is up, and refused clients are no client: the checks cost the run's steps nothing.
    reason = await checkRefusals(browser, opts.url);
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(opts.url, { timeout: Math.max(1000, deadline - Date.now()) });

    if (!reason) {
      if (await waitInPage(page, deadline, () => window.__trace && window.__trace.connected && window.__trace.records > 0)) {
        everConnected = true;
      } else {
        reason = 'no records arrived (not connected, or the stream stayed empty)';
      }
    }

    if (!reason && opts.lateScreenshot) {
      // A second viewer that comes mid-run: after the first has the loss of three steps.
      if (!(await waitInPage(page, deadline, () => Object.entries(window.__trace.byKind)
        .filter(([k]) => k.startsWith('loss/')).reduce((n, [, c]) => n + c, 0) >= 3))) {
        reason = 'the loss of three steps never arrived';
      } else {
        late = await browser.newPage({ viewport: { width: 1280, height: 900 } });
        late.on('pageerror', (e) => pageErrors.push(`late page: ${e.message}`));
        await late.goto(opts.url, { timeout: Math.max(1000, deadline - Date.now()) });
        if (!(await waitInPage(late, deadline, () => window.__trace.history.records > 0 || window.__trace.ended))) {
          reason = 'the late page got neither a history nor the end';
        }
      }
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

    if (!reason && late) {
      reason = await checkLatePage(page, late, deadline);
      const b = await lossView(late);
      summary.late = { history: b.history, loss: b.loss && { points: b.loss.points, firstX: b.loss.firstX, lastX: b.loss.lastX } };
      await late.screenshot({ path: opts.lateScreenshot });
    }

    const t = await page.evaluate(() => window.__trace);
    const seen = new Set(Object.keys(t.byKind).map((key) => key.split('/')[0]));
    summary.missingKinds = opts.expectKinds.filter((k) => !seen.has(k));
    Object.assign(summary, { connected: everConnected || t.connected, records: t.records, dropped: t.dropped, byKind: t.byKind, runs: t.runs });
    if (!reason && summary.missingKinds.length) reason = `expected kinds never seen: ${summary.missingKinds.join(', ')}`;
    if (!reason && opts.checkViews) reason = await checkViews(page, deadline);
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
