// The sweep dashboard: polls /api/state and /api/members once a second and redraws. No framework, nothing
// loaded from elsewhere. Every value from the coordinator goes into the page as text (textContent), never as
// HTML: job parameters are whatever a user submitted.
'use strict';

const POLL_MS = 1000;
const HISTORY_MS = 3600 * 1000;
const MAX_RESULTS = 10;

const model = {
  since: 0,
  samples: [],
  results: new Map(), // job id -> result view, or an error string
  resultsKey: '',
  // The group as this member sees it (/api/members); null on a single coordinator, which has none.
  group: undefined,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

const SI = ['', 'k', 'M', 'G', 'T', 'P', 'E', 'Z', 'Y'];
function fmtNum(n) {
  if (!isFinite(n)) return '–';
  if (Math.abs(n) < 1000) return Number.isInteger(n) ? String(n) : n.toFixed(1);
  let i = 0;
  while (Math.abs(n) >= 1000 && i < SI.length - 1) { n /= 1000; i++; }
  return (Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(1)) + ' ' + SI[i];
}

function fmtInt(n) {
  return Number(n).toLocaleString('en-US');
}

function fmtDur(s) {
  if (s === null || s === undefined || !isFinite(s)) return '–';
  s = Math.round(s);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

// Axis labels: the largest unit only ("−15 s", "−2 min", "−1 h").
function fmtAxis(s) {
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.round(s / 60) + ' min';
  return (s / 3600).toFixed(s % 3600 ? 1 : 0) + ' h';
}

function fmtAgo(ms) {
  const s = Math.max(0, ms) / 1000;
  return (s < 10 ? s.toFixed(1) + ' s' : fmtDur(s)) + ' ago';
}

// {"points":6,"method":"brute"} -> "points=6 method=brute"
function fmtParams(json) {
  try {
    const v = JSON.parse(json);
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.entries(v)
        .map(([k, x]) => k + '=' + (typeof x === 'object' ? JSON.stringify(x) : String(x)))
        .join(' ');
    }
  } catch (_) { /* shown as sent */ }
  return json;
}

function badge(text, cls) {
  return el('span', { class: 'badge ' + (cls || text) }, text);
}

function setText(id, text) {
  $(id).textContent = text;
}

// The plan's chunks covered, whole when whole, else rounded down to a tenth (never "64 / 64" before the end).
function fmtCovered(c) {
  return Number.isInteger(c) ? fmtInt(c) : (Math.floor(c * 10) / 10).toFixed(1);
}

// The bar's length is the plan's chunks and its done part the plan they cover: slots grow when a running chunk
// splits, so done slots over all slots would go back. Leased and poisoned slots are drawn at the average share
// of a slot not done (what is left of the plan over the slots left), since a slot's own share is not sent.
function progressBar(j) {
  const plan = j.plan_chunks != null ? j.plan_chunks : j.chunks_total;
  const covered = j.chunks_covered != null ? j.chunks_covered : j.chunks_done;
  const total = Math.max(1, plan);
  const pct = (n) => (100 * Math.min(n, total) / total).toFixed(3) + '%';
  const slotsLeft = j.chunks_total - j.chunks_done;
  const share = slotsLeft > 0 ? Math.max(0, plan - covered) / slotsLeft : 0;
  const bar = el('div', { class: 'bar', role: 'progressbar',
    'aria-valuemin': '0', 'aria-valuemax': String(plan), 'aria-valuenow': String(covered) });
  // Widths through the CSSOM: the page's content security policy allows no inline style attributes.
  for (const [cls, n] of [['done', covered], ['leased', j.chunks_leased * share], ['poisoned', j.chunks_poisoned * share]]) {
    const seg = el('span', { class: cls });
    seg.style.width = pct(n);
    bar.append(seg);
  }
  const percent = plan ? Math.floor(100 * covered / plan) : 0;
  let text = fmtCovered(covered) + ' / ' + fmtInt(plan) + ' chunks (' + percent + '%)';
  if (j.pieces) text += ' · ' + fmtInt(j.pieces) + (j.pieces === 1 ? ' piece' : ' pieces') + ' split off';
  if (j.chunks_leased) text += ' · ' + fmtInt(j.chunks_leased) + ' leased';
  if (j.chunks_poisoned) text += ' · ' + fmtInt(j.chunks_poisoned) + ' poisoned';
  if (j.reissued) text += ' · ' + fmtInt(j.reissued) + ' re-issued';
  if (j.failures.length) text += ' · ' + fmtInt(j.failures.length) + ' failed attempts';
  const out = el('div', null, bar, el('div', { class: 'bar-text' }, text));
  // The latest failure in full (a program's exit status and stderr tail); the others on hover.
  const last = j.failures[j.failures.length - 1];
  if (last) {
    const all = j.failures.map((f) => 'chunk ' + f.chunk + ' on ' + f.worker + ': ' + f.error).join('\n\n');
    out.append(el('pre', { class: 'failure', title: all }, 'chunk ' + last.chunk + ' on ' + last.worker + ': ' + last.error));
  }
  return out;
}

function renderTiles(s) {
  setText('t-workers', fmtInt(s.live_workers));
  const threads = s.workers.filter((w) => w.live).reduce((a, w) => a + w.threads, 0);
  setText('t-threads', fmtInt(threads) + (threads === 1 ? ' thread' : ' threads'));
  setText('t-rate', fmtNum(s.nodes_per_s));
  setText('t-crate', 'nodes/s · ' + fmtNum(s.chunks_per_s) + ' chunks/s');
  const running = s.jobs.filter((j) => j.state === 'running').length;
  setText('t-jobs', running + ' running');
  setText('t-jobs-note', fmtInt(s.jobs.length) + ' in total');
  for (const k of ['pending', 'leased', 'done', 'poisoned']) setText('c-' + k, fmtInt(s.chunks[k]));
  const c = s.counters;
  setText('t-events', [
    fmtInt(c.completions) + ' completions',
    fmtInt(c.lease_expiries) + ' lease expiries',
    fmtInt(c.reissued) + ' re-issued',
    fmtInt(c.duplicates) + ' duplicates',
    fmtInt(c.verification_failures) + ' failed verification',
  ].join(' · '));
}

// A job's inputs in a few words: every id for a short list, a count for a layered search's long one.
function inputsNote(j) {
  const ids = j.input_jobs || [];
  if (ids.length === 0) return '';
  const waiting = j.inputs_waiting ? ', waiting for ' + j.inputs_waiting : '';
  if (ids.length <= 3) {
    return ' (input' + (ids.length > 1 ? 's: jobs ' : ': job ') + ids.join(', ') + waiting + ')';
  }
  return ' (inputs: ' + ids.length + ' jobs' + waiting + ')';
}

// An ETA from an estimated job size (no exact total) is the range the coordinator allows for it (see
// eta_spread in state.rs); one from chunks counted as if equal is marked as the guess it is.
function fmtEta(j) {
  if (j.eta_s == null) return fmtDur(j.eta_s);
  if (j.eta_low_s != null && j.eta_high_s != null) return fmtDur(j.eta_low_s) + ' to ' + fmtDur(j.eta_high_s);
  const eta = fmtDur(j.eta_s);
  return j.total_nodes ? eta : '~' + eta;
}

function renderJobs(s) {
  const body = document.querySelector('#jobs tbody');
  const rows = s.jobs.slice().sort((a, b) => b.id - a.id).map((j) => {
    const params = fmtParams(j.params);
    const input = inputsNote(j);
    return el('tr', { 'data-job': String(j.id), 'data-state': j.state },
      el('td', { class: 'num' }, String(j.id)),
      el('td', null, j.space),
      el('td', { class: 'params', title: params + input }, params + input),
      el('td', { class: 'state' }, badge(j.state),
        j.unverified ? el('span', { title: 'nothing re-checks these answers: submit with --replicate 2 or more' }, ' ', badge('unverified')) : null),
      el('td', null, progressBar(j)),
      el('td', { class: 'num', title: j.nodes }, fmtNum(Number(j.nodes) + j.running_nodes)),
      el('td', { class: 'num' }, j.state === 'running' ? fmtNum(j.nodes_per_s) : '–'),
      el('td', { class: 'num' }, j.state === 'running' ? fmtEta(j) : '–'),
      el('td', { class: 'num' }, String(j.workers)));
  });
  body.replaceChildren(...rows);
  $('jobs-empty').hidden = rows.length > 0;
}

function renderWorkers(s) {
  const body = document.querySelector('#workers tbody');
  const rows = s.workers.map((w) => el('tr', { 'data-worker': w.name, 'data-live': String(w.live) },
    el('td', null, w.name, ' ', w.live ? null : badge('lost', 'lost')),
    el('td', { class: 'num' }, String(w.threads)),
    el('td', { class: 'num' }, String(w.leases)),
    el('td', { class: 'num' }, fmtInt(w.chunks_done)),
    el('td', { class: 'num' }, fmtNum(w.nodes_per_s)),
    el('td', { class: 'ago' }, fmtAgo(s.now_ms - w.last_seen_ms))));
  body.replaceChildren(...rows);
  $('workers-empty').hidden = rows.length > 0;
}

function renderIdentities(s) {
  const body = document.querySelector('#identities tbody');
  const rows = s.identities.map((u) => el('tr', null,
    el('td', null, u.identity || '(no token)'),
    el('td', { class: 'num' }, fmtNum(u.share)),
    el('td', { class: 'num' }, fmtInt(u.running_threads)),
    el('td', { class: 'num' }, fmtNum(u.decayed_thread_seconds / 3600))));
  body.replaceChildren(...rows);
}

const SVG = 'http://www.w3.org/2000/svg';
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// Nodes per second over time, the last hour at most, newest on the right.
function renderPlot(s) {
  const box = $('plot');
  const W = Math.max(200, box.clientWidth), H = Math.max(120, box.clientHeight);
  const left = 64, right = 10, top = 10, bottom = 22;
  const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'throughput over time' });
  const pts = model.samples;
  const now = s.now_ms;
  const first = pts.length ? pts[0].t_ms : now;
  const span = Math.min(HISTORY_MS, Math.max(60 * 1000, now - first));
  const max = Math.max(1, ...pts.map((p) => p.nodes_per_s)) * 1.1;
  const x = (t) => left + (W - left - right) * (1 - (now - t) / span);
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    svg.append(svgEl('line', { class: 'grid', x1: left, x2: W - right, y1: y(v), y2: y(v) }));
    const label = svgEl('text', { class: 'axis', x: left - 6, y: y(v) + 4, 'text-anchor': 'end' });
    label.textContent = fmtNum(v);
    svg.append(label);
  }
  for (let i = 0; i <= 4; i++) {
    const t = now - span * (1 - i / 4);
    const ago = Math.round((now - t) / 1000);
    const label = svgEl('text', { class: 'axis', x: x(t), y: H - 6,
      'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' });
    label.textContent = ago === 0 ? 'now' : '−' + fmtAxis(ago);
    svg.append(label);
  }
  const shown = pts.filter((p) => p.t_ms >= now - span);
  if (shown.length > 1) {
    const line = shown.map((p) => `${x(p.t_ms).toFixed(1)},${y(p.nodes_per_s).toFixed(1)}`).join(' ');
    const base = y(0).toFixed(1);
    const area = `${x(shown[0].t_ms).toFixed(1)},${base} ${line} ${x(shown[shown.length - 1].t_ms).toFixed(1)},${base}`;
    svg.append(svgEl('polygon', { class: 'area', points: area }));
    svg.append(svgEl('polyline', { class: 'line', points: line }));
  }
  box.replaceChildren(svg);
  setText('plot-span', 'nodes/s, last ' + fmtAxis(Math.round(span / 1000)));
}

function resultCard(j) {
  const r = model.results.get(j.id);
  const card = el('div', { class: 'result', 'data-result': String(j.id) });
  card.append(el('h3', null, 'Job ' + j.id + ' · ' + j.space, el('span', { class: 'sub' }, fmtParams(j.params))));
  if (r === undefined) {
    card.append(el('div', { class: 'note' }, 'loading the answer…'));
  } else if (typeof r === 'string') {
    card.append(el('div', { class: 'note' }, 'answer not available: ' + r));
  } else {
    card.append(el('pre', null, r.text + (r.truncated ? '\n… (cut; the whole answer: sweep results ' + j.id + ')' : '')));
    if (r.poisoned) card.append(el('div', { class: 'note' }, r.poisoned + ' poisoned chunks: this answer is incomplete'));
    if (r.pictures.length) {
      const pics = el('div', { class: 'pictures' });
      r.pictures.forEach((name, i) => pics.append(el('img', { src: `api/jobs/${j.id}/pictures/${i}`, alt: name, title: name })));
      card.append(pics);
      if (r.pictures_total > r.pictures.length) {
        card.append(el('div', { class: 'note' },
          `${r.pictures.length} of ${r.pictures_total} pictures shown; all of them: sweep results ${j.id} --svg DIR`));
      }
    }
  }
  return card;
}

async function loadResult(id) {
  try {
    const resp = await fetch(`api/jobs/${id}/result`, { cache: 'no-store' });
    model.results.set(id, resp.ok ? await resp.json() : (await resp.text()) || ('HTTP ' + resp.status));
  } catch (e) {
    model.results.delete(id);
    return;
  }
  model.resultsKey = ''; // redraw with the answer
}

function renderResults(s) {
  const finished = s.jobs
    .filter((j) => j.state === 'done' || j.state === 'done-with-poisoned-chunks')
    .sort((a, b) => b.finished_ms - a.finished_ms || b.id - a.id)
    .slice(0, MAX_RESULTS);
  for (const j of finished) {
    if (!model.results.has(j.id)) {
      model.results.set(j.id, undefined);
      loadResult(j.id);
    }
  }
  // Redrawn only when something changed: pictures are not reloaded every second.
  const key = finished.map((j) => j.id + ':' + (model.results.get(j.id) === undefined ? 0 : 1)).join(',');
  if (key === model.resultsKey) return;
  model.resultsKey = key;
  $('results').replaceChildren(...finished.map(resultCard));
  $('results-empty').hidden = finished.length > 0;
}

function render(s) {
  renderTiles(s);
  renderJobs(s);
  renderWorkers(s);
  renderIdentities(s);
  renderPlot(s);
  renderResults(s);
}

// A member's role as the member that served the page sees it: it knows the leader of its term, no more.
function roleOf(g, id) {
  if (g.leader === null || g.leader === undefined) return 'unknown';
  return id === g.leader ? 'leader' : 'follower';
}

// Why this member's page shows no jobs, or null when it leads and serves. Member URLs are gRPC addresses, not
// dashboards (a member does not know the others' --http), so the leader is named, not linked.
function standbyNote(g) {
  if (g.leader === null || g.leader === undefined) {
    return 'This member is not the leader, and it knows of no leader now: an election is under way.';
  }
  if (g.leader !== g.id) {
    const l = g.members.find((m) => m.id === g.leader);
    return 'This member is not the leader: member ' + g.leader + (l ? ' (gRPC ' + l.url + ')' : '') +
      ' leads. Jobs and workers are on the dashboard that member serves with --http.';
  }
  if (!g.serving) {
    return 'This member was elected leader and is loading its store: jobs and workers show once it serves.';
  }
  return null;
}

// The members of a replicated coordinator; the panel stays hidden on a single coordinator. Lag is the
// leader's last index minus what a member is known to hold, so only the leader's view has it.
function renderMembers(g) {
  $('members-panel').hidden = !g;
  $('members-link').hidden = !g;
  if (!g) return;
  const leads = g.leader === g.id;
  setText('members-self', 'this member (' + g.id + '): term ' + fmtInt(g.term) + ' · applied ' +
    fmtInt(g.applied) + ' · last index ' + fmtInt(g.last_index));
  const note = standbyNote(g);
  $('not-leader').hidden = note === null;
  setText('not-leader', note || '');
  const body = document.querySelector('#members tbody');
  const rows = g.members.map((m) => {
    const role = roleOf(g, m.id);
    const self = m.id === g.id;
    const known = leads && m.matched !== null && m.matched !== undefined;
    const attrs = { 'data-member': String(m.id), 'data-role': role, 'data-self': String(self) };
    if (self) attrs.class = 'self';
    return el('tr', attrs,
      el('td', { class: 'num' }, String(m.id)),
      el('td', { class: 'url' }, m.url),
      el('td', null, badge(role), self ? ' ' : null, self ? badge('this member', 'self') : null),
      el('td', { class: 'num' }, known ? fmtInt(m.matched) : '–'),
      el('td', { class: 'num' }, known ? fmtInt(Math.max(0, g.last_index - m.matched)) : '–'));
  });
  body.replaceChildren(...rows);
  $('members-lag-note').hidden = leads;
}

// The state, or why there is none: {state} or {status, why}.
async function fetchState() {
  try {
    const resp = await fetch('api/state?since=' + model.since, { cache: 'no-store' });
    if (!resp.ok) return { status: resp.status, why: 'HTTP ' + resp.status };
    return { state: await resp.json() };
  } catch (e) {
    return { why: e.message };
  }
}

// The group view; null on a single coordinator (404), undefined when it did not answer (what is shown stays).
async function fetchMembers() {
  try {
    const resp = await fetch('api/members', { cache: 'no-store' });
    if (resp.status === 404) return null;
    return resp.ok ? await resp.json() : undefined;
  } catch (_) {
    return undefined;
  }
}

async function poll() {
  const [got, group] = await Promise.all([fetchState(), fetchMembers()]);
  if (group !== undefined) model.group = group;
  const conn = $('conn');
  try {
    // A member that does not run the coordinator now (a follower, or a leader still loading its store)
    // answers the state with 503: its page shows the members alone.
    const standby = !got.state && got.status === 503 && !!model.group;
    document.body.classList.toggle('standby', standby);
    renderMembers(model.group);
    if (standby) {
      conn.className = 'conn ok';
      const g = model.group;
      const role = roleOf(g, g.id) === 'unknown' ? 'no leader known' : roleOf(g, g.id);
      conn.textContent = 'live · member ' + g.id + ', ' + role + ' · updated ' + new Date().toLocaleTimeString();
    } else if (!got.state) {
      throw new Error(got.why);
    } else {
      const s = got.state;
      for (const p of s.samples) model.samples.push(p);
      if (s.samples.length) model.since = s.samples[s.samples.length - 1].t_ms;
      const oldest = s.now_ms - HISTORY_MS;
      while (model.samples.length && model.samples[0].t_ms < oldest) model.samples.shift();
      render(s);
      conn.className = 'conn ok';
      conn.textContent = 'live · updated ' + new Date(s.now_ms).toLocaleTimeString();
    }
  } catch (e) {
    conn.className = 'conn bad';
    conn.textContent = 'coordinator unreachable, retrying (' + e.message + ')';
  }
  setTimeout(poll, POLL_MS);
}

poll();
