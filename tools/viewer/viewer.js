'use strict';
// Live viewer for the tensor tracer of magic-run and magic-check. The wire protocol is docs/tracer.md: JSON text frames
// over a WebSocket at /trace of the server that serves this page. No framework, no build step.

const KINDS = ['input', 'activation', 'logits', 'loss', 'gradient', 'reduced_gradient', 'update',
  'parameter', 'cotangent', 'score', 'other', 'attention'];
const COMPRESSORS = ['off', 'none', 'stats', 'tile', 'projection', 'top', 'empty'];
const MATCH_FIELDS = ['kind', 'phase', 'order', 'name', 'layer'];
const DEFAULT_PARAMS = { tile: { grid: [32, 32] }, top: { k: 10 } };
const MAX_POINTS = 2000;     // per series: a long run must not grow the page without bound
const MAX_KEYS = 256;        // distinct tile / score records kept for the selects
const MAX_RUNS = 64;         // runs kept (magic-check --bite: the clean run and each mutation's)
const MAX_MESSAGES = 60;
const REDRAW_MS = 200;       // at most ~5 redraws a second, however fast records arrive
const PALETTE = ['#2f6fdb', '#e4572e', '#2a9d5c', '#9b59b6', '#d4a017', '#17a2b8', '#c2185b',
  '#6d4c41', '#546e7a', '#7cb342'];

// What tests read (tests/js/viewer_test.js); updated as messages arrive.
const trace = window.__trace = {
  connected: false, records: 0, dropped: 0, byKind: {}, lastControl: null, errors: [], ended: false,
  runs: [],                 // the runs records came from, in the order they first came
  history: { records: 0, seen: 0, received: 0 },   // the history this page got when it connected
  charts: {},               // canvas id -> {series, points, firstX, lastX, yTicks, xTicks} as last drawn
};

const state = {
  conn: 'connecting',
  run: '',                  // the hello's run: the run in progress when this client came
  lastStep: null,
  lastPhase: '',
  runs: new Map(),          // run name -> what the charts show of it (newRunData)
  latestRun: '',            // the run of the latest record
  pickerParams: {},         // kind -> parameters of the rule in force (kept when re-applied)
  otherRules: [],           // {rule, shadowed}: rules the table cannot show
  selectsDirty: false,
  historyLeft: 0,           // records of the history still to come
};

/** What the charts show of one run: each record updates the data of the run it names. */
function newRunData() {
  return {
    loss: new Map(),          // series label -> Series of numbers
    activation: new Map(),    // layer label -> Series of stats objects
    projection: new Map(),    // layer label -> Series of numbers
    projectionVectors: new Set(),   // names of the vectors projected onto
    lambda: new Map(),        // rank label -> Map(step -> sum of norm^2)
    tiles: new Map(),         // record name -> latest tile record
    latestTile: '',
    scores: new Map(),        // key: the name, with ' (final)' for step -1 -> latest top record
    latestScore: '',
  };
}
const NO_RUN = newRunData();

function runData(name) {
  let d = state.runs.get(name);
  if (!d) {
    d = newRunData();
    state.runs.set(name, d);
    capMap(state.runs, MAX_RUNS);
    trace.runs = [...state.runs.keys()];
    state.selectsDirty = true;
  }
  return d;
}

/** The run the charts show: the one picked, else the run of the latest record. */
function shownRunName() {
  return $('run-name').value || state.latestRun;
}
const shownRun = () => state.runs.get(shownRunName()) || NO_RUN;

let socket = null;
let retryMs = 1000;
let dirty = true;

// ---------------------------------------------------------------- small helpers

/** A capped list of (x, value) points; the oldest points go first. */
class Series {
  constructor() { this.xs = []; this.vs = []; }
  push(x, v) {
    this.xs.push(x);
    this.vs.push(v);
    // Trim in batches so that a full series does not splice on every record.
    if (this.xs.length > MAX_POINTS + 200) {
      const cut = this.xs.length - MAX_POINTS;
      this.xs.splice(0, cut);
      this.vs.splice(0, cut);
    }
  }
}

const $ = (id) => document.getElementById(id);
const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
// Server strings go into HTML only escaped: nothing a message holds is markup.
const esc = (v) => String(v).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** A number to `digits` significant digits (4 by default). */
function fmt(v, digits = 4) {
  if (v === null || v === undefined) return '—';
  if (typeof v !== 'number') return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(digits - 2);
  return String(Number(v.toPrecision(digits)));
}

/** Labels for axis ticks: the fewest significant digits (4 or more) at which neighbours differ. */
function tickLabels(values) {
  for (let digits = 4; digits <= 15; digits++) {
    const labels = values.map((v) => fmt(v, digits));
    if (labels.every((l, i) => i === 0 || l !== labels[i - 1])) return labels;
  }
  return values.map(String);
}

function globMatch(pattern, text) {
  const re = pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*');
  return new RegExp(`^${re}$`).test(text);
}

/** Label of a series: ranks other than 0 get their own line. */
const seriesLabel = (label, rank) => (rank ? `${label} r${rank}` : label);

function seriesFor(map, label) {
  let s = map.get(label);
  if (!s) { s = new Series(); map.set(label, s); }
  return s;
}

/** Keeps a Map to MAX_KEYS entries by evicting the oldest inserted key. */
function capMap(map, max) {
  while (map.size > max) map.delete(map.keys().next().value);
}

// ---------------------------------------------------------------- connection

// The server asks its token on every request (docs/tracer.md, "The token"): the page was opened
// with it (?token=...) and passes it on to the WebSocket, which a browser cannot give a header.
function wsUrl() {
  const params = new URLSearchParams(location.search);
  const override = params.get('ws');
  if (override) return override;
  const token = params.get('token');
  const query = token ? `?token=${encodeURIComponent(token)}` : '';
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/trace${query}`;
}

function connect() {
  setConn('connecting');
  try {
    socket = new WebSocket(wsUrl());
  } catch (e) {
    addMessage('error', `cannot open ${wsUrl()}: ${e.message}`);
    scheduleReconnect();
    return;
  }
  socket.onopen = () => {
    trace.connected = true;
    retryMs = 1000;
    setConn('connected');
  };
  socket.onmessage = (ev) => handleMessage(ev.data);
  socket.onclose = (ev) => {
    trace.connected = false;
    socket = null;
    if (trace.ended) { setConn('ended'); return; }
    addMessage('warn', `connection closed (code ${ev.code})`);
    setConn('closed');
    scheduleReconnect();
  };
}

// A reconnect gets the server's history again (docs/tracer.md, "History"): the charts are redrawn from it.
function scheduleReconnect() {
  const wait = retryMs;
  retryMs = Math.min(retryMs * 2, 10000);
  setTimeout(() => { if (!trace.ended) connect(); }, wait);
}

function send(msg) {
  if (!socket || socket.readyState !== WebSocket.OPEN) {
    addMessage('error', 'not connected: control not sent');
    return false;
  }
  socket.send(JSON.stringify(msg));
  return true;
}

function setConn(conn) {
  state.conn = conn;
  const el = $('st-conn');
  el.textContent = conn;
  el.className = `pill pill-${conn}`;
  updateButtons();
}

// ---------------------------------------------------------------- messages from the server

function handleMessage(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (e) {
    addMessage('error', `frame is not JSON: ${String(text).slice(0, 80)}`);
    return;
  }
  if (msg === null || typeof msg !== 'object') {
    addMessage('error', `frame is not an object: ${String(text).slice(0, 80)}`);
    return;
  }
  switch (msg.type) {
    case 'hello':
      state.run = msg.run || '';
      if (msg.version !== 1) addMessage('warn', `protocol version ${msg.version}; this viewer reads 1`);
      addMessage('info', `hello: ${msg.ranks} rank(s)${msg.mesh && msg.mesh.length ? `, mesh ${JSON.stringify(msg.mesh)}` : ''}`);
      if (msg.control) applyControl(msg.control);
      break;
    case 'history':
      // The records sent before this page came, downsampled, follow; on a reconnect they replace
      // what the page had, so no point is drawn twice.
      if (trace.records > 0) forgetRecords();
      state.historyLeft = Number(msg.records) || 0;
      trace.history = { records: state.historyLeft, seen: Number(msg.seen) || 0, received: 0 };
      addMessage('info', `history: ${trace.history.records} of the ${trace.history.seen} records sent before this page connected`);
      break;
    case 'record':
      if (state.historyLeft > 0) {
        state.historyLeft -= 1;
        trace.history.received += 1;
      }
      onRecord(msg);
      break;
    case 'dropped':
      trace.dropped += msg.count || 0;
      break;
    case 'control':
      applyControl(msg.control || {});
      addMessage('info', `control: ${(msg.control && msg.control.points || []).length} rule(s), ${msg.control && msg.control.paused ? 'paused' : 'streaming'}`);
      break;
    case 'error':
      trace.errors.push({ field: String(msg.field ?? ''), message: String(msg.message ?? '') });
      if (trace.errors.length > 100) trace.errors.shift();
      addMessage('error', `${msg.field || '(message)'}: ${msg.message}`);
      break;
    case 'end':
      trace.ended = true;
      addMessage('info', `run ended: ${msg.records} records emitted`);
      setConn('ended');
      break;
    default:
      addMessage('warn', `unknown message type ${JSON.stringify(msg.type)}`);
  }
  dirty = true;
}

/** Drops every record's effect on the charts (a reconnect, before the history that replaces them). */
function forgetRecords() {
  state.runs.clear();
  state.latestRun = '';
  state.lastStep = null;
  trace.records = 0;
  trace.byKind = {};
  trace.runs = [];
  state.selectsDirty = true;
}

function onRecord(r) {
  trace.records += 1;
  const key = `${r.kind}/${r.compressor}`;
  trace.byKind[key] = (trace.byKind[key] || 0) + 1;
  if (isNum(r.step) && r.step >= 0) state.lastStep = r.step;
  state.lastPhase = r.phase || '';
  const run = String(r.run ?? '');
  state.latestRun = run;
  const view = runData(run);

  const d = r.data || {};
  const layer = seriesLabel(r.layer || r.name || '?', r.rank);
  if (r.kind === 'loss') {
    const y = r.compressor === 'none' ? (d.values || [])[0] : r.compressor === 'stats' ? d.mean : undefined;
    if (isNum(y)) seriesFor(view.loss, seriesLabel('loss', r.rank)).push(r.step, y);
  }
  if (r.kind === 'activation' && r.compressor === 'stats') {
    seriesFor(view.activation, layer).push(r.step, d);
  }
  if (r.compressor === 'tile' && Array.isArray(d.grid)) {
    view.tiles.delete(r.name);   // re-insert so that eviction drops the stalest name
    view.tiles.set(r.name, r);
    capMap(view.tiles, MAX_KEYS);
    view.latestTile = r.name;
    state.selectsDirty = true;
  }
  if (r.kind === 'cotangent' && r.phase === 'replay' && r.compressor === 'stats' && isNum(d.norm)) {
    let steps = view.lambda.get(seriesLabel('λ', r.rank));
    if (!steps) { steps = new Map(); view.lambda.set(seriesLabel('λ', r.rank), steps); }
    steps.set(r.step, (steps.get(r.step) || 0) + d.norm * d.norm);
    capMap(steps, MAX_POINTS);
  }
  if (r.kind === 'score' && r.compressor === 'top' && d.largest) {
    const k = r.step < 0 ? `${r.name} (final)` : r.name;
    view.scores.set(k, r);
    capMap(view.scores, MAX_KEYS);
    view.latestScore = k;
    state.selectsDirty = true;
  }
  if (r.compressor === 'projection' && isNum(d.mean)) {
    seriesFor(view.projection, layer).push(r.step, d.mean);
    if (d.vector && view.projectionVectors.size < MAX_KEYS) view.projectionVectors.add(d.vector);
  }
}

// ---------------------------------------------------------------- control: pause and flag picker

function buildPicker() {
  const body = document.querySelector('#picker tbody');
  for (const kind of KINDS) {
    const tr = document.createElement('tr');
    tr.id = `row-${kind}`;
    const options = COMPRESSORS.map((c) => `<option value="${c}">${c}</option>`).join('');
    tr.innerHTML = `<td>${kind}</td>
      <td><select id="compressor-${kind}">${options}</select></td>
      <td><input type="number" id="every-${kind}" min="1" step="1" value="1"></td>
      <td class="params" id="params-${kind}"></td>`;
    body.appendChild(tr);
    $(`compressor-${kind}`).addEventListener('change', () => refreshRow(kind));
    refreshRow(kind);
  }
}

/** The compressor parameters a kind's rule will carry: those in force if the compressor is the same. */
function paramsFor(kind, compressor) {
  const kept = state.pickerParams[kind];
  if (kept && kept.compressor === compressor) return kept.params;
  return DEFAULT_PARAMS[compressor] || {};
}

function refreshRow(kind) {
  const c = $(`compressor-${kind}`).value;
  $(`row-${kind}`).className = c === 'off' ? 'off' : '';
  const p = paramsFor(kind, c);
  $(`params-${kind}`).textContent = Object.entries(p)
    .map(([k, v]) => (Array.isArray(v) ? v.join('×') : k === 'max_elements' ? `≤${v}` : `${k} ${v}`)).join(', ');
}

/**
 * Shows the control in force in the picker. A rule that matches on the kind alone (or on nothing)
 * sets the row of each kind it is the first to match; other rules are listed as text, struck out
 * when an earlier kind-only rule already takes every record they could match.
 */
function applyControl(control) {
  trace.lastControl = control;
  const points = (Array.isArray(control.points) ? control.points : []).filter((r) => r && typeof r === 'object');
  const assigned = new Map();
  const others = [];
  for (const rule of points) {
    const kindsOf = KINDS.filter((k) => rule.kind === undefined || globMatch(String(rule.kind), k));
    const simple = MATCH_FIELDS.every((f) => f === 'kind' || rule[f] === undefined);
    const open = kindsOf.filter((k) => !assigned.has(k));
    if (simple && open.length) {
      for (const k of open) assigned.set(k, rule);
    } else {
      others.push({ rule, shadowed: !open.length });
    }
  }
  state.otherRules = others;
  for (const kind of KINDS) {
    const rule = assigned.get(kind);
    const select = $(`compressor-${kind}`);
    if (rule && !COMPRESSORS.includes(rule.compressor)) {
      select.add(new Option(rule.compressor, rule.compressor));
    }
    select.value = rule ? rule.compressor : 'off';
    $(`every-${kind}`).value = rule && isNum(rule.every) ? rule.every : 1;
    const params = { ...(rule && DEFAULT_PARAMS[rule.compressor]) };
    if (rule) for (const p of ['grid', 'k', 'max_elements']) if (rule[p] !== undefined) params[p] = rule[p];
    state.pickerParams[kind] = rule ? { compressor: rule.compressor, params } : null;
    refreshRow(kind);
  }
  renderOtherRules();
  updateButtons();
}

function renderOtherRules() {
  const box = $('other-rules');
  box.textContent = '';
  if (!state.otherRules.length) return;
  const head = document.createElement('div');
  head.textContent = 'other rules in force:';
  box.appendChild(head);
  for (const { rule, shadowed } of state.otherRules) {
    const div = document.createElement('div');
    div.textContent = JSON.stringify(rule) + (shadowed ? '  (never matches; dropped on Apply)' : '');
    if (shadowed) div.className = 'shadowed';
    box.appendChild(div);
  }
}

/** The points the picker describes, or null (with a message) when an input is invalid. */
function pickerPoints() {
  const points = $('keep-rules').checked
    ? state.otherRules.filter((o) => !o.shadowed).map((o) => ({ ...o.rule }))
    : [];
  for (const kind of KINDS) {
    const compressor = $(`compressor-${kind}`).value;
    if (compressor === 'off') continue;
    const every = Number($(`every-${kind}`).value);
    if (!Number.isInteger(every) || every < 1) {
      addMessage('error', `every for ${kind} must be a whole number ≥ 1`);
      return null;
    }
    points.push({ kind, compressor, every, ...paramsFor(kind, compressor) });
  }
  return points;
}

function onApply() {
  const points = pickerPoints();
  if (!points) return;
  const paused = !!(trace.lastControl && trace.lastControl.paused);
  if (send({ type: 'control', paused, points })) addMessage('info', `sent control: ${points.length} rule(s)`);
}

// The server replaces the whole control, so pausing resends the points in force unchanged.
function onPause() {
  const c = trace.lastControl || {};
  send({ type: 'control', paused: !c.paused, points: Array.isArray(c.points) ? c.points : [] });
}

function updateButtons() {
  const live = state.conn === 'connected' && trace.lastControl !== null;
  const pause = $('pause');
  const paused = !!(trace.lastControl && trace.lastControl.paused);
  pause.disabled = !live;
  pause.textContent = paused ? 'Resume' : 'Pause';
  pause.className = paused ? 'resume' : '';
  $('apply').disabled = !live;
}

// ---------------------------------------------------------------- message area

function addMessage(level, text) {
  const li = document.createElement('li');
  const time = document.createElement('span');
  time.className = 'time';
  time.textContent = new Date().toLocaleTimeString([], { hour12: false });
  const body = document.createElement('span');
  body.className = level;
  body.textContent = text;
  li.append(time, body);
  const list = $('messages');
  list.prepend(li);   // newest first, so errors are seen without scrolling
  while (list.children.length > MAX_MESSAGES) list.lastChild.remove();
}

// ---------------------------------------------------------------- canvas drawing

/** Sizes the canvas to its box at the device's pixel ratio and returns a cleared context. */
function setupCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = '11px system-ui, sans-serif';
  return { ctx, w, h };
}

function drawEmpty(ctx, w, h, text) {
  ctx.fillStyle = '#8a93a0';
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  ctx.fillText(text, w / 2, h / 2);
}

/** About `count` round tick values covering [lo, hi]; `integer` keeps the step at 1 or more. */
function niceTicks(lo, hi, count, integer) {
  const raw = (hi - lo) / Math.max(count, 1);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/**
 * A line chart with axes, grid and a legend. series: [{label, xs, ys}] (ys may hold non-numbers,
 * which are skipped); opts: {xLabel, logY, empty}.
 */
function drawLineChart(canvas, series, opts) {
  const { ctx, w, h } = setupCanvas(canvas);
  const tf = opts.logY ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
  let x0 = Infinity; let x1 = -Infinity; let y0 = Infinity; let y1 = -Infinity;
  const prepared = series.map((s, i) => {
    const pts = [];
    for (let j = 0; j < s.xs.length; j++) {
      const y = isNum(s.ys[j]) ? tf(s.ys[j]) : NaN;
      if (!isNum(s.xs[j]) || !isNum(y)) continue;
      pts.push(s.xs[j], y);
      x0 = Math.min(x0, s.xs[j]); x1 = Math.max(x1, s.xs[j]);
      y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    return { label: s.label, color: PALETTE[i % PALETTE.length], pts };
  }).filter((s) => s.pts.length);
  if (!prepared.length) {
    trace.charts[canvas.id] = { series: 0, points: 0 };
    drawEmpty(ctx, w, h, opts.empty || 'waiting for records');
    return;
  }

  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.06;
  y0 -= pad; y1 += pad;

  const m = { l: 54, r: 12, t: 20, b: 30 };
  const pw = w - m.l - m.r;
  const ph = h - m.t - m.b;
  const sx = (x) => m.l + ((x - x0) / (x1 - x0)) * pw;
  const sy = (y) => m.t + (1 - (y - y0) / (y1 - y0)) * ph;

  // Grid and tick labels.
  ctx.strokeStyle = '#e6e9ee';
  ctx.fillStyle = '#4a5361';
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  const yTicks = niceTicks(y0, y1, Math.max(2, Math.floor(ph / 30)), false);
  const yLabels = tickLabels(yTicks.map((t) => (opts.logY ? Math.pow(10, t) : t)));
  yTicks.forEach((t, i) => {
    const y = Math.round(sy(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(m.l, y); ctx.lineTo(m.l + pw, y); ctx.stroke();
    ctx.fillText(yLabels[i], m.l - 6, y);
  });
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const xTicks = niceTicks(x0, x1, Math.max(2, Math.floor(pw / 70)), true);
  for (const t of xTicks) {
    const x = Math.round(sx(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, m.t); ctx.lineTo(x, m.t + ph); ctx.stroke();
    ctx.fillText(String(t), x, m.t + ph + 4);
  }
  let points = 0; let firstX = Infinity; let lastX = -Infinity;
  for (const s of prepared) {
    points += s.pts.length / 2;
    for (let j = 0; j < s.pts.length; j += 2) { firstX = Math.min(firstX, s.pts[j]); lastX = Math.max(lastX, s.pts[j]); }
  }
  trace.charts[canvas.id] = { series: prepared.length, points, firstX, lastX, yTicks: yLabels, xTicks: xTicks.map(String) };
  ctx.strokeStyle = '#9aa3af';
  ctx.strokeRect(m.l + 0.5, m.t + 0.5, pw, ph);
  ctx.fillStyle = '#6b7482';
  ctx.textAlign = 'right';
  ctx.fillText(opts.xLabel || 'step', m.l + pw, m.t + ph + 17);

  // Lines, clipped to the plot; dots when few points so single steps stay visible.
  ctx.save();
  ctx.beginPath(); ctx.rect(m.l, m.t, pw, ph); ctx.clip();
  for (const s of prepared) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.lineWidth = 1.6;
    // Break the line where steps are missing (a pause, a compressor switched away and back):
    // a gap much wider than the usual spacing, or a step that goes back.
    let gap = Infinity;
    for (let j = 2; j < s.pts.length; j += 2) {
      const dx = s.pts[j] - s.pts[j - 2];
      if (dx > 0) gap = Math.min(gap, dx);
    }
    ctx.beginPath();
    for (let j = 0; j < s.pts.length; j += 2) {
      const x = sx(s.pts[j]); const y = sy(s.pts[j + 1]);
      const dx = j ? s.pts[j] - s.pts[j - 2] : -1;
      if (dx < 0 || dx > 3 * gap) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    }
    ctx.stroke();
    if (s.pts.length <= 120) {
      for (let j = 0; j < s.pts.length; j += 2) {
        ctx.beginPath(); ctx.arc(sx(s.pts[j]), sy(s.pts[j + 1]), 2, 0, 2 * Math.PI); ctx.fill();
      }
    }
  }
  ctx.restore();
  drawLegend(ctx, prepared, m.l, w - m.r);
}

function drawLegend(ctx, entries, left, right) {
  ctx.textAlign = 'left';
  ctx.textBaseline = 'middle';
  let x = left;
  for (let i = 0; i < entries.length; i++) {
    const width = 16 + ctx.measureText(entries[i].label).width + 12;
    if (x + width > right) {
      ctx.fillStyle = '#6b7482';
      ctx.fillText(`+${entries.length - i} more`, x, 9);
      return;
    }
    ctx.fillStyle = entries[i].color;
    ctx.fillRect(x, 7, 12, 4);
    ctx.fillStyle = '#333a46';
    ctx.fillText(entries[i].label, x + 16, 9);
    x += width;
  }
}

// Viridis, sampled; linear between stops. Diverging blue-white-red when values straddle zero.
const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
const DIVERGING = [[33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [239, 138, 98], [178, 24, 43]];

function colorAt(stops, t) {
  const u = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(u));
  const f = u - i;
  return stops[i].map((c, j) => Math.round(c + (stops[i + 1][j] - c) * f));
}

function drawHeatmap(canvas, rec, field) {
  const { ctx, w, h } = setupCanvas(canvas);
  const d = rec ? rec.data : null;
  const vals = d && Array.isArray(d[field]) ? d[field] : null;
  const [gr, gc] = d && Array.isArray(d.grid) ? d.grid : [0, 0];
  if (!vals || !(gr >= 1 && gc >= 1 && gr * gc <= 65536)) {
    drawEmpty(ctx, w, h, 'no tile records (pick "tile" for a kind)');
    return;
  }
  let lo = Infinity; let hi = -Infinity;
  for (const v of vals) if (isNum(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!isNum(lo)) { lo = 0; hi = 1; }
  const diverging = lo < 0 && hi > 0;
  const stops = diverging ? DIVERGING : VIRIDIS;
  const a = Math.max(Math.abs(lo), Math.abs(hi));
  const s0 = diverging ? -a : lo;
  const s1 = diverging ? a : (hi > lo ? hi : lo + 1);

  // One pixel per tile, then scaled up without smoothing: cheap for grids up to 256x256.
  const img = new ImageData(gc, gr);
  for (let i = 0; i < gr * gc; i++) {
    const v = vals[i];
    const c = isNum(v) ? colorAt(stops, (v - s0) / (s1 - s0)) : [200, 200, 200];
    img.data.set([c[0], c[1], c[2], 255], i * 4);
  }
  const off = document.createElement('canvas');
  off.width = gc; off.height = gr;
  off.getContext('2d').putImageData(img, 0, 0);

  const m = { l: 4, r: 62, t: 6, b: 22 };
  const pw = w - m.l - m.r;
  const ph = h - m.t - m.b;
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, m.l, m.t, pw, ph);
  ctx.strokeStyle = '#9aa3af';
  ctx.strokeRect(m.l + 0.5, m.t + 0.5, pw, ph);
  ctx.fillStyle = '#4a5361';
  ctx.textAlign = 'left';
  ctx.textBaseline = 'top';
  ctx.fillText(`${fmt(d.rows)}×${fmt(d.cols)} in ${gr}×${gc} tiles · ${field} min ${fmt(lo)}, max ${fmt(hi)}`, m.l, m.t + ph + 5);

  // Legend: a vertical color bar labelled with the scale's ends (the data's min and max are below the map).
  const bx = w - m.r + 12; const bw = 12;
  for (let y = 0; y < ph; y++) {
    const c = colorAt(stops, 1 - y / Math.max(ph - 1, 1));
    ctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`;
    ctx.fillRect(bx, m.t + y, bw, 1);
  }
  ctx.strokeRect(bx + 0.5, m.t + 0.5, bw, ph);
  ctx.fillStyle = '#333a46';
  ctx.textAlign = 'left';
  ctx.textBaseline = 'middle';
  const ly = (v) => m.t + (1 - (v - s0) / (s1 - s0)) * ph;
  ctx.fillText(fmt(s1), bx + bw + 4, m.t + 5);
  ctx.fillText(fmt(s0), bx + bw + 4, m.t + ph - 5);
  if (diverging) ctx.fillText('0', bx + bw + 4, ly(0));
}

// ---------------------------------------------------------------- rendering

function toSeries(map, pick) {
  return [...map.entries()].sort((a, b) => a[0].localeCompare(b[0], undefined, { numeric: true }))
    .map(([label, s]) => ({ label, xs: s.xs, ys: pick ? s.vs.map(pick) : s.vs }));
}

function renderStatus() {
  const run = shownRunName() || state.run;
  $('st-run').textContent = run || '—';
  $('st-run').title = run;
  $('st-records').textContent = trace.records.toLocaleString();
  $('st-dropped').textContent = trace.dropped.toLocaleString();
  $('st-step').textContent = state.lastStep === null ? '—' : `${state.lastStep}${state.lastPhase ? ` (${state.lastPhase})` : ''}`;
  const c = trace.lastControl;
  const el = $('st-paused');
  el.textContent = trace.ended ? 'ended' : !c ? '—' : c.paused ? 'paused' : 'live';
  el.className = c && c.paused ? 'paused' : '';
}

/** Refills a select's options from keys, keeping the first (automatic) option and the choice. */
function syncSelect(select, keys) {
  const chosen = select.value;
  while (select.options.length > 1) select.remove(1);
  for (const k of keys) select.add(new Option(k, k));
  select.value = keys.includes(chosen) ? chosen : '';
}

function renderTile() {
  const chosen = $('tile-name').value;
  const view = shownRun();
  const rec = view.tiles.get(chosen || view.latestTile);
  const field = $('tile-field').value;
  $('tile-title').textContent = rec
    ? `${rec.name} · step ${rec.step} · [${(rec.shape || []).join(',')}]${rec.rank ? ` · rank ${rec.rank}` : ''}`
    : 'no tile records yet';
  drawHeatmap($('chart-tile'), rec, field);
}

function lambdaSeries() {
  return [...shownRun().lambda.entries()].map(([label, steps]) => {
    const xs = [...steps.keys()].sort((a, b) => a - b);
    return { label: `${label} total`, xs, ys: xs.map((x) => Math.sqrt(steps.get(x))) };
  });
}

/** The score record to show: the final scores once they came, else the running scores, else any. */
function chosenScore() {
  const chosen = $('scores-name').value;
  const { scores, latestScore } = shownRun();
  if (chosen) return scores.get(chosen);
  for (const k of ['scores (final)', 'running_scores']) if (scores.has(k)) return scores.get(k);
  return scores.get(latestScore);
}

/**
 * One side of a score record sent with `top`: only the entries of its sign (+1: they raise the
 * query loss, -1: they lower it), each named by its example's id (magic-run sends them; else the
 * index), and how many entries of that sign the whole tensor holds.
 */
function scoreTable(rec, sign) {
  const part = rec.data[sign > 0 ? 'largest' : 'smallest'];
  const idx = part && Array.isArray(part.index) ? part.index : [];
  const val = part && Array.isArray(part.value) ? part.value : [];
  const ids = part && Array.isArray(part.id) ? part.id : null;
  const shape = Array.isArray(rec.shape) ? rec.shape : [];
  const perExample = shape.length > 1 ? shape.slice(1).reduce((a, b) => a * b, 1) : 1;
  const what = perExample > 1 ? 'tokens' : 'examples';
  const rows = [];
  idx.forEach((ix, i) => {
    const v = val[i];
    if (!isNum(v) || Math.sign(v) !== sign) return;
    const name = ids && ids[i] !== undefined
      ? `${ids[i]}${perExample > 1 ? ` · token ${ix % perExample}` : ''}` : String(ix);
    rows.push(`<tr><td>${rows.length + 1}</td><td title="index ${esc(ix)}">${esc(name)}</td>` +
      `<td class="${sign > 0 ? 'pos' : 'neg'}">${esc(fmt(v))}</td></tr>`);
  });
  const title = sign > 0 ? 'raise the query loss (score > 0)' : 'lower the query loss (score < 0)';
  const total = rec.data[sign > 0 ? 'positive' : 'negative'];
  const count = shape.reduce((a, b) => a * b, 1);
  const note = isNum(total) ? `${total} of ${count} ${what}` : '';
  const body = rows.length
    ? `<table><thead><tr><th>#</th><th>example</th><th>score</th></tr></thead><tbody>${rows.join('')}</tbody></table>`
    : `<div class="empty-note">none: no ${what.slice(0, -1)} ${sign > 0 ? 'raises' : 'lowers'} the query loss</div>`;
  return `<div class="score-side" data-sign="${sign}"><h3>${title}</h3>` +
    `${note ? `<div class="count">${esc(note)} ${sign > 0 ? 'positive' : 'negative'}</div>` : ''}${body}</div>`;
}

function renderScores() {
  const rec = chosenScore();
  const body = $('scores-body');
  if (!rec) {
    $('scores-title').textContent = 'no score records yet';
    body.innerHTML = '<div class="empty-note">waiting for score records with compressor "top"</div>';
    return;
  }
  const what = rec.step < 0 ? 'final' : rec.name === 'running_scores' ? `steps ≥ ${rec.step}` : `step ${rec.step} only`;
  $('scores-title').textContent = `${rec.name} · ${what}`;
  body.innerHTML = scoreTable(rec, 1) + scoreTable(rec, -1);
}

// One row per kind: the records received under each compressor.
function renderCounts() {
  const rows = new Map();
  for (const key of Object.keys(trace.byKind).sort()) {
    const [kind, compressor] = key.split('/');
    if (!rows.has(kind)) rows.set(kind, []);
    rows.get(kind).push(`${esc(compressor)} <b>${trace.byKind[key].toLocaleString()}</b>`);
  }
  $('counts').innerHTML = rows.size
    ? KINDS.concat([...rows.keys()].filter((k) => !KINDS.includes(k))).filter((k) => rows.has(k))
      .map((k) => `<div><span>${esc(k)}</span><span>${rows.get(k).join(' · ')}</span></div>`).join('')
    : '<span class="empty-note">none yet</span>';
}

function render() {
  if (state.selectsDirty) {
    state.selectsDirty = false;
    syncSelect($('run-name'), [...state.runs.keys()]);
    const shown = shownRun();
    syncSelect($('tile-name'), [...shown.tiles.keys()].sort());
    syncSelect($('scores-name'), [...shown.scores.keys()].sort());
  }
  renderStatus();
  const view = shownRun();
  const loss = toSeries(view.loss);
  const lastLoss = loss.length ? loss[0].ys[loss[0].ys.length - 1] : null;
  $('loss-sub').textContent = lastLoss === null ? '' : `latest ${fmt(lastLoss)}`;
  drawLineChart($('chart-loss'), loss, { empty: 'waiting for loss records' });

  const stat = $('act-stat').value;
  drawLineChart($('chart-activation'), toSeries(view.activation, (d) => d && d[stat]),
    { empty: 'waiting for activation records with compressor "stats"' });

  renderTile();
  drawLineChart($('chart-lambda'), lambdaSeries(),
    { logY: $('lambda-log').checked, empty: 'waiting for REPLAY cotangent records ("stats")' });

  const vectors = [...view.projectionVectors];
  $('proj-sub').textContent = vectors.length === 1 ? `mean projection onto ${vectors[0]}`
    : vectors.length ? `mean projection onto each layer's vector` : 'mean of the projections';
  drawLineChart($('chart-projection'), toSeries(view.projection),
    { empty: 'no projection records (pick "projection" for activation)' });
  renderScores();
  renderCounts();
}

// Records only mark the page dirty; a timer redraws at most every REDRAW_MS.
function startRedrawLoop() {
  setInterval(() => {
    if (!dirty) return;
    dirty = false;
    requestAnimationFrame(render);
  }, REDRAW_MS);
}

function init() {
  buildPicker();
  $('apply').addEventListener('click', onApply);
  $('pause').addEventListener('click', onPause);
  for (const id of ['act-stat', 'tile-name', 'tile-field', 'scores-name', 'lambda-log']) {
    $(id).addEventListener('change', () => { dirty = true; });
  }
  // Another run has other tile and score records to pick from.
  $('run-name').addEventListener('change', () => { state.selectsDirty = true; dirty = true; });
  window.addEventListener('resize', () => { dirty = true; });
  renderOtherRules();
  startRedrawLoop();
  connect();
}

init();
