/*
 * console.js — berthd's web console: one script, no framework, no build
 * step, nothing fetched but the API of the berthd that served it
 * (console/README.md is the design; README.md documents the API).
 *
 * The DOM is built with createElement and text nodes only: every value a
 * task carries (topic, headers, error, payload) lands as text, never as
 * markup. With an admin key, each API request is signed with
 * HMAC-SHA256(key, ts ‖ method \n path \n body), computed by the SHA-256
 * below (WebCrypto exists only in secure contexts; the console must work
 * over plain http too). The key stays in this tab's sessionStorage and is
 * never sent.
 */
'use strict';

(function () {
  // ---- SHA-256 (FIPS 180-4) and HMAC (RFC 2104) over Uint8Arrays ----

  const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);

  function rotr(x, n) {
    return (x >>> n) | (x << (32 - n));
  }

  function sha256(bytes) {
    const H = new Uint32Array([
      0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]);
    const len = bytes.length;
    const n = ((len + 9 + 63) >> 6) << 6;
    const m = new Uint8Array(n);
    m.set(bytes);
    m[len] = 0x80;
    const dv = new DataView(m.buffer);
    dv.setUint32(n - 8, Math.floor(len / 0x20000000));
    dv.setUint32(n - 4, (len * 8) >>> 0);
    const w = new Uint32Array(64);
    for (let off = 0; off < n; off += 64) {
      for (let i = 0; i < 16; i++) w[i] = dv.getUint32(off + 4 * i);
      for (let i = 16; i < 64; i++) {
        const a = w[i - 15], b = w[i - 2];
        const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
        const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
        w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
      }
      let a = H[0], b = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
      for (let i = 0; i < 64; i++) {
        const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
        const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g;
        g = f;
        f = e;
        e = (d + t1) | 0;
        d = c;
        c = b;
        b = a;
        a = (t1 + t2) | 0;
      }
      H[0] += a;
      H[1] += b;
      H[2] += c;
      H[3] += d;
      H[4] += e;
      H[5] += f;
      H[6] += g;
      H[7] += h;
    }
    const out = new Uint8Array(32);
    const ov = new DataView(out.buffer);
    for (let i = 0; i < 8; i++) ov.setUint32(4 * i, H[i]);
    return out;
  }

  function concat(a, b) {
    const out = new Uint8Array(a.length + b.length);
    out.set(a);
    out.set(b, a.length);
    return out;
  }

  function hmacSha256(key, msg) {
    if (key.length > 64) key = sha256(key);
    const ipad = new Uint8Array(64), opad = new Uint8Array(64);
    for (let i = 0; i < 64; i++) {
      const k = i < key.length ? key[i] : 0;
      ipad[i] = k ^ 0x36;
      opad[i] = k ^ 0x5c;
    }
    return sha256(concat(opad, sha256(concat(ipad, msg))));
  }

  function hex(bytes) {
    let s = '';
    for (const b of bytes) s += (b < 16 ? '0' : '') + b.toString(16);
    return s;
  }

  const utf8 = new TextEncoder();

  // ---- the API ----

  const KEY = 'berth.key';

  function key() {
    try {
      return sessionStorage.getItem(KEY);
    } catch (e) {
      return null;
    }
  }

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.message) || 'HTTP ' + status);
      this.status = status;
      this.code = (body && body.code) || 'HTTP_' + status;
    }
  }

  // One request to /api/v1/<path>; resolves to the answer's JSON, rejects
  // with an ApiError (or a network TypeError).
  async function api(method, path, body) {
    const target = '/api/v1/' + path;
    const text = body === undefined ? '' : JSON.stringify(body);
    const headers = {};
    const k = key();
    if (k !== null) {
      const ts = Date.now();
      const tsb = new Uint8Array(8);
      new DataView(tsb.buffer).setBigUint64(0, BigInt(ts));
      const msg = concat(tsb, utf8.encode(method + '\n' + target + '\n' + text));
      headers['X-Berth-Ts'] = String(ts);
      headers['X-Berth-Auth'] = hex(hmacSha256(utf8.encode(k), msg));
    }
    if (method === 'POST') {
      headers['Content-Type'] = 'application/json';
      headers['X-Berth-Console'] = '1';
    }
    const res = await fetch(target, {
      method, headers, body: method === 'POST' ? text : undefined,
      cache: 'no-store', credentials: 'omit', redirect: 'error',
    });
    let json = null;
    try {
      json = await res.json();
    } catch (e) {
      json = null;
    }
    if (!res.ok) throw new ApiError(res.status, json);
    return json;
  }

  // ---- the DOM, as text only ----

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'onclick') e.addEventListener('click', v);
      else if (k === 'onsubmit') e.addEventListener('submit', v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      e.append(kid instanceof Node ? kid : String(kid));
    }
    return e;
  }

  const SVG = 'http://www.w3.org/2000/svg';

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // encodeURIComponent, and the few characters it leaves that a URL
  // parser may encode on its own (the signature covers the exact target).
  function enc(s) {
    return encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
  }

  function link(hash, text) {
    return el('a', { href: hash }, text);
  }

  function fmt(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
  }

  function rate(n) {
    if (n === null || n === undefined || !isFinite(n)) return '—';
    if (n === 0) return '0';
    return n >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(n >= 10 ? 1 : 2);
  }

  function seconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return '—';
    if (s < 0.001) return (s * 1e6).toFixed(0) + ' µs';
    if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + ' ms';
    return s.toFixed(2) + ' s';
  }

  function when(ms) {
    if (!ms) return '—';
    return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  }

  function fromNow(ms) {
    if (!ms) return '—';
    const d = Math.round((ms - Date.now()) / 1000);
    return when(ms) + (d >= 0 ? ' (in ' + d + ' s)' : ' (' + -d + ' s ago)');
  }

  const main = document.getElementById('main');
  const banner = document.getElementById('banner');
  const status = document.getElementById('status');

  function show(...kids) {
    main.replaceChildren(...kids.flat());
  }

  // Brings node a to what b is, touching only what differs (a text, an
  // attribute, a child added or gone): a page redrawn every second then
  // costs the browser a few text changes, not a new layout of everything.
  // (For nodes without listeners: the overview's.)
  function morph(a, b) {
    if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) {
      a.replaceWith(b);
      return;
    }
    if (a.nodeType === Node.TEXT_NODE) {
      if (a.data !== b.data) a.data = b.data;
      return;
    }
    for (const { name, value } of b.attributes) if (a.getAttribute(name) !== value) a.setAttribute(name, value);
    for (const { name } of [...a.attributes]) if (!b.hasAttribute(name)) a.removeAttribute(name);
    const ak = [...a.childNodes], bk = [...b.childNodes];
    for (let i = 0; i < bk.length; i++) {
      if (i < ak.length) morph(ak[i], bk[i]);
      else a.append(bk[i]);
    }
    for (let i = bk.length; i < ak.length; i++) ak[i].remove();
  }

  // show(), in place when main already holds the same page.
  function update(page, ...kids) {
    const wrap = el('div', { class: 'page', 'data-page': page }, ...kids);
    const old = main.firstElementChild;
    if (old && old.dataset.page === page && main.childNodes.length === 1) morph(old, wrap);
    else show(wrap);
  }

  function say(text, kind) {
    if (!text) {
      banner.hidden = true;
      banner.replaceChildren();
      return;
    }
    banner.hidden = false;
    banner.className = 'banner ' + (kind || 'error');
    banner.replaceChildren(text);
  }

  // The page greys and says why when a read fails; the next one that
  // succeeds restores it.
  function stale(err) {
    document.body.classList.add('stale');
    status.textContent = 'not live';
    say(err ? 'berthd did not answer: ' + err.message : '', 'error');
  }

  // (an action's outcome stays up; only a staleness is taken down)
  function live() {
    if (document.body.classList.contains('stale')) say('');
    document.body.classList.remove('stale');
    status.textContent = 'live · ' + new Date().toLocaleTimeString('en-GB');
  }

  // ---- the key ----

  function keyForm(why) {
    const input = el('input', {
      type: 'password', id: 'key', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'the contents of the admin key file',
    });
    const form = el('form', {
      class: 'key', id: 'key-form',
      onsubmit(ev) {
        ev.preventDefault();
        const v = input.value.replace(/\s+$/, '');
        if (v.length === 0) return;
        sessionStorage.setItem(KEY, v);
        route();
      },
    },
    el('h1', {}, 'This berthd asks for its admin key'),
    el('p', {}, 'Paste the admin key file\u2019s contents. It stays in this tab and is never sent: each request is signed with it.'),
    why ? el('p', { class: 'refusal', id: 'key-refusal' }, why) : null,
    input, el('button', { type: 'submit' }, 'Use key'));
    show(form);
    input.focus();
  }

  function forgetKey() {
    sessionStorage.removeItem(KEY);
  }

  // A failed read: the key form for 401, else the page greys.
  function failed(err) {
    if (err instanceof ApiError && err.status === 401) {
      stopPolling();
      const had = key() !== null;
      forgetKey();
      keyForm(had ? 'berthd refused that key: ' + err.message : null);
      status.textContent = 'locked';
      return true;
    }
    stale(err);
    return false;
  }

  // ---- the confirmation dialog (built here, not confirm()) ----

  function confirmDialog(title, text, extra) {
    return new Promise((resolve) => {
      const close = (v) => {
        wrap.remove();
        resolve(v);
      };
      const ok = el('button', { class: 'danger', id: 'confirm-ok', onclick: () => close(true) }, 'Confirm');
      const wrap = el('div', { class: 'overlay' },
        el('div', { class: 'dialog', role: 'dialog', 'aria-modal': 'true' },
          el('h2', {}, title), el('p', {}, text), extra || null,
          el('div', { class: 'buttons' },
            el('button', { id: 'confirm-cancel', onclick: () => close(false) }, 'Cancel'), ok)));
      document.body.append(wrap);
      ok.focus();
    });
  }

  // ---- overview ----

  const SAMPLES = 600; // ten minutes, one a second
  let samples = [];
  let timer = null;

  function stopPolling() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
  }

  // What the rates are made of: every topic's submitted and completed.
  function totals(o) {
    const t = { submitted: 0, completed: 0 };
    for (const c of o.counters) {
      t.submitted += c.submitted;
      t.completed += c.completed;
    }
    return t;
  }


  // The q-quantile of the observations between two reads of a histogram.
  function quantile(h1, h0, q) {
    const counts = h1.counts.map((c, i) => c - (h0 ? h0.counts[i] || 0 : 0));
    const total = counts.reduce((a, b) => a + b, 0);
    if (total <= 0) return null;
    let want = q * total, lo = 0;
    for (let i = 0; i < counts.length; i++) {
      const hi = i < h1.bounds.length ? h1.bounds[i] : lo * 2 || 1;
      if (counts[i] >= want && counts[i] > 0) return lo + (hi - lo) * (want / counts[i]);
      want -= counts[i];
      lo = hi;
    }
    return lo;
  }

  // The chart spans what the page has seen: a minute at first, growing
  // to ten.
  function sparkline(values, label) {
    const w = 300, h = 48;
    const max = Math.max(1, ...values);
    const s = svg('svg', { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: 'none', class: 'spark', role: 'img', 'aria-label': label });
    const span = Math.min(SAMPLES, Math.max(60, values.length));
    const step = w / Math.max(1, span - 1);
    const x0 = w - (values.length - 1) * step;
    const pts = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
    if (pts.length > 1) {
      s.append(svg('polygon', { points: `${x0.toFixed(1)},${h} ${pts.join(' ')} ${w},${h}`, class: 'area' }));
      s.append(svg('polyline', { points: pts.join(' '), class: 'line' }));
    }
    return s;
  }

  function card(title, value, id, sub, cls) {
    return el('div', { class: 'card' + (cls ? ' ' + cls : ''), id },
      el('div', { class: 'label' }, title),
      el('div', { class: 'value' }, value),
      sub ? el('div', { class: 'sub' }, sub) : null);
  }

  function chartCard(title, id, values, label) {
    const peak = values.length ? Math.max(...values) : null;
    const minutes = Math.max(1, Math.round(Math.min(SAMPLES, Math.max(60, values.length)) / 60));
    return el('div', { class: 'card wide', id },
      el('div', { class: 'label' }, title),
      el('div', { class: 'value' }, rate(values.length ? values[values.length - 1] : null)),
      sparkline(values, label),
      el('div', { class: 'sub' }, 'last ' + minutes + ' min · peak ' + rate(peak)));
  }

  function renderOverview(o) {
    const now = samples[samples.length - 1];
    const prev = samples.length > 1 ? samples[samples.length - 2] : null;
    const dt = prev ? (now.at - prev.at) / 1000 : 0;
    const series = (k) => {
      const out = [];
      for (let i = 1; i < samples.length; i++) {
        const d = (samples[i].at - samples[i - 1].at) / 1000;
        out.push(d > 0 ? Math.max(0, samples[i].t[k] - samples[i - 1].t[k]) / d : 0);
      }
      return out;
    };
    const sub = series('submitted'), done = series('completed');
    const back = samples[Math.max(0, samples.length - 11)];
    const latency = back !== now ? back.o.task_latency_seconds : null;
    const p50 = quantile(o.task_latency_seconds, latency, 0.5);
    const p99 = quantile(o.task_latency_seconds, latency, 0.99);
    const fsync99 = quantile(o.fsync_seconds, back !== now ? back.o.fsync_seconds : null, 0.99);
    const halted = o.store.halts > o.store.reopens;
    const terminal = o.topics.reduce((a, t) => a + t.terminal, 0);

    const byTopic = new Map(o.counters.map((c) => [c.topic, c]));
    const prevTopic = new Map(prev ? prev.o.counters.map((c) => [c.topic, c]) : []);
    const perSec = (t, k) => {
      const a = byTopic.get(t), b = prevTopic.get(t);
      return a && b && dt > 0 ? Math.max(0, a[k] - b[k]) / dt : null;
    };
    const names = new Set([...o.topics.map((t) => t.topic), ...o.counters.map((c) => c.topic)]);
    const gauges = new Map(o.topics.map((t) => [t.topic, t]));
    const rows = [...names].sort().map((name) => {
      const g = gauges.get(name) || {};
      const cell = (k, v) => el('td', { class: 'num', 'data-k': k }, fmt(v));
      return el('tr', { 'data-topic': name },
        el('th', { scope: 'row' }, link('#/topic/' + encodeURIComponent(name), name)),
        cell('ready', g.ready), cell('delayed', g.delayed), cell('locked', g.locked),
        cell('backoff', g.backoff),
        el('td', { class: 'num' + (g.terminal ? ' warn' : ''), 'data-k': 'terminal' }, fmt(g.terminal)),
        cell('waiting_fetches', g.waiting_fetches),
        el('td', { class: 'num', 'data-k': 'submitted_per_s' }, rate(perSec(name, 'submitted'))),
        el('td', { class: 'num', 'data-k': 'completed_per_s' }, rate(perSec(name, 'completed'))));
    });

    update('overview',
      el('section', { class: 'cards' },
        chartCard('Submitted / s', 'submitted-rate', sub, 'submitted per second'),
        chartCard('Completed / s', 'completed-rate', done, 'completed per second'),
        card('Latency p50 / p99', seconds(p50) + ' / ' + seconds(p99), 'latency', 'submit → completion, last 10 s'),
        card('Terminal tasks', fmt(terminal), 'terminal', link('#/incidents', 'incidents →'), terminal ? 'alarm' : null),
        card('Poisoned deliveries', fmt(o.deliveries_poisoned), 'poisoned', fmt(o.outbox_pending) + ' pending in the outbox',
          o.deliveries_poisoned ? 'alarm' : null),
        card('Store', halted ? 'halted' : 'serving', 'store',
          'fsync p99 ' + seconds(fsync99) + (o.shared ? ' · PostgreSQL' : ''), halted ? 'alarm' : null),
        card('Calls waiting', fmt(o.calls.waiting), 'calls-waiting', fmt(o.calls.backoff) + ' backing off'),
        card('Waiting fetches', fmt(o.waiting_fetches), 'waiting-fetches', 'long polls held open'),
        card('Deployments', fmt(o.deployments.live) + ' live', 'deployments',
          [fmt(o.deployments.draining) + ' draining · ', link('#/deployments', 'versions →')]),
        card('Calls ended', fmt(o.calls.resolved + o.calls.failed), 'calls-ended', fmt(o.calls.failed) + ' failed')),
      el('section', {},
        el('h2', {}, 'Topics'),
        o.shared ? el('p', { class: 'note' }, 'Tasks by state are the cluster\u2019s; rates are this replica\u2019s.') : null,
        el('div', { class: 'scroll' },
          el('table', { id: 'topics' },
            el('thead', {}, el('tr', {},
              el('th', {}, 'topic'), el('th', { class: 'num' }, 'ready'), el('th', { class: 'num' }, 'delayed'),
              el('th', { class: 'num' }, 'locked'), el('th', { class: 'num' }, 'backoff'),
              el('th', { class: 'num' }, 'terminal'), el('th', { class: 'num' }, 'waiting fetches'),
              el('th', { class: 'num' }, 'submitted/s'), el('th', { class: 'num' }, 'completed/s'))),
            el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 9, class: 'empty' }, 'No topic yet.')))))));
  }

  async function pollOverview(token) {
    try {
      const o = await api('GET', 'overview');
      if (token !== routeToken) return;
      const s = { at: Date.now(), o, t: totals(o) };
      const last = samples[samples.length - 1];
      if (last && (s.t.submitted < last.t.submitted || s.t.completed < last.t.completed)) samples = [];
      samples.push(s);
      if (samples.length > SAMPLES + 1) samples.shift();
      renderOverview(o);
      live();
    } catch (err) {
      if (token !== routeToken) return;
      if (failed(err)) return;
    }
    timer = setTimeout(() => pollOverview(token), 1000);
  }

  // ---- topic ----

  const STATES = ['ready', 'delayed', 'locked', 'backoff', 'terminal'];

  async function topicPage(topic, state, after, token) {
    const q = 'tasks?topic=' + enc(topic) + (state ? '&state=' + enc(state) : '') +
      (after ? '&after=' + enc(after) : '') + '&limit=50';
    const page = await api('GET', q);
    if (token !== routeToken) return;
    const base = '#/topic/' + encodeURIComponent(topic);
    const tabs = el('nav', { class: 'tabs' },
      link(base, 'all'), STATES.map((s) => link(base + '/' + s, s)));
    for (const a of tabs.querySelectorAll('a'))
      if (a.textContent === (state || 'all')) a.classList.add('current');
    const rows = page.tasks.map((t) => el('tr', { 'data-id': t.id },
      el('td', { class: 'mono' }, link('#/task/' + encodeURIComponent(t.id), t.id)),
      el('td', {}, t.state.toLowerCase()), el('td', { class: 'num' }, fmt(t.attempt)),
      el('td', { class: 'num' }, fmt(t.retries_left)), el('td', {}, t.worker_id || '—'),
      el('td', {}, t.state === 'LOCKED' ? fromNow(t.lock_expires_at_ms) : '—'),
      el('td', {}, t.last_error ? t.last_error.code || t.last_error.message || '' : ''),
      el('td', {}, when(t.created_at_ms))));
    show(el('h1', {}, 'Topic ', el('span', { class: 'mono' }, topic)), tabs,
      el('div', { class: 'scroll' }, el('table', { id: 'tasks' },
        el('thead', {}, el('tr', {}, ['id', 'state', 'attempt', 'retries left', 'worker', 'lock expires', 'last error', 'created']
          .map((h) => el('th', {}, h)))),
        el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 8, class: 'empty' }, 'No task here.'))))),
      page.next_after
        ? el('p', {}, link(base + (state ? '/' + state : '/all') + '/after/' + encodeURIComponent(page.next_after), 'Next page →'))
        : null);
    live();
  }

  // ---- task ----

  function kv(rows) {
    return el('table', { class: 'kv' }, el('tbody', {}, rows.filter(Boolean).map(([k, v]) =>
      el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, v)))));
  }

  async function taskPage(id, token) {
    const { task: t } = await api('GET', 'tasks/' + enc(id));
    if (token !== routeToken) return;
    const e = t.last_error;
    const parts = [
      el('h1', {}, 'Task ', el('span', { class: 'mono' }, t.id)),
      kv([
        ['topic', link('#/topic/' + encodeURIComponent(t.topic), t.topic)],
        ['state', el('span', { id: 'task-state' }, t.state.toLowerCase())],
        ['attempt', fmt(t.attempt)], ['failures', fmt(t.failures)], ['retries left', fmt(t.retries_left)],
        ['worker', t.worker_id || '—'],
        t.state === 'LOCKED' ? ['lock expires', fromNow(t.lock_expires_at_ms)] : null,
        ['available', when(t.available_at_ms)], ['created', when(t.created_at_ms)],
        ['priority', fmt(t.priority)], ['payload', fmt(t.payload_bytes) + ' bytes'],
      ]),
    ];
    if (e) parts.push(el('h2', {}, 'Last error'), kv([['code', e.code || '—'], ['message', e.message || '—']]),
      e.details ? el('pre', { class: 'text' }, e.details) : null);
    if (t.headers) parts.push(el('h2', {}, 'Headers'), kv(t.headers.map((h) => [h.name, h.value])));
    if (t.content_type) parts.push(el('p', {}, 'content type: ', el('span', { class: 'mono' }, t.content_type)));
    if (t.payload) {
      const p = t.payload;
      parts.push(el('h2', {}, 'Payload ', el('span', { class: 'sub' },
        (p.encoding === 'hex' ? 'hex, ' : 'text, ') + fmt(p.size) + ' bytes' + (p.cut ? ', cut at ' + fmt(p.shown) : ''))),
      el('pre', { class: 'text', id: 'payload' }, p.encoding === 'hex' ? p.hex : p.text));
    }
    if (t.state === 'TERMINAL') parts.push(el('div', { class: 'buttons' }, retryButton(t.id, () => route(true)), discardButton(t.id, () => route(true))));
    show(parts);
    live();
  }

  // ---- actions ----

  async function act(title, text, path, body, done, extra) {
    const ok = await confirmDialog(title, text, extra ? extra.node : null);
    if (!ok) return;
    try {
      await api('POST', path, extra ? extra.body() : body);
      say(title + ': done.', 'ok');
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return failed(err);
      say(title + ': ' + err.message + (err.code ? ' (' + err.code + ')' : ''), 'error');
    }
    done();
  }

  function retryButton(id, done) {
    return el('button', {
      class: 'retry', 'data-id': id,
      onclick() {
        const input = el('input', { type: 'number', min: '0', step: '1', id: 'retries', placeholder: 'the default budget' });
        act('Retry task', 'Offer task ' + id + ' to workers again?', 'tasks/' + enc(id) + '/retry', undefined, done, {
          node: el('label', {}, 'New failure budget (optional) ', input),
          body: () => (input.value === '' ? {} : { retries: Number(input.value) }),
        });
      },
    }, 'Retry');
  }

  function discardButton(id, done) {
    return el('button', {
      class: 'discard danger', 'data-id': id,
      onclick: () => act('Discard task', 'Delete terminal task ' + id + ' for good?', 'tasks/' + enc(id) + '/discard', {}, done),
    }, 'Discard');
  }

  function retryDeliveryButton(id, done) {
    return el('button', {
      class: 'retry-delivery', 'data-id': id,
      onclick: () => act('Retry delivery', 'Send delivery ' + id + ' to its sink again?', 'deliveries/' + enc(id) + '/retry', {}, done),
    }, 'Retry delivery');
  }

  // ---- incidents ----

  // The open incidents (each subject once, its latest record), or with
  // everything, the whole record. At most 50 pages of 100 a look.
  async function incidentsPage(everything, token) {
    let all = [];
    let after = null;
    for (let i = 0; i < 50; i++) {
      const q = 'incidents?limit=100' + (everything ? '' : '&open=true') + (after ? '&after=' + enc(after) : '');
      const page = await api('GET', q);
      all.push(...page.incidents);
      after = page.next_after;
      if (!after) break;
    }
    if (token !== routeToken) return;
    if (!everything) {
      const latest = new Map(all.map((n) => [n.subject_id, n]));
      all = all.filter((n) => latest.get(n.subject_id) === n);
    }
    const again = () => route(true);
    const rows = all.map((n) => el('tr', { 'data-subject': n.subject_id, 'data-kind': n.kind, class: n.open ? null : 'closed' },
      el('td', {}, when(n.at_ms)),
      el('td', {}, n.kind.toLowerCase().replace(/_/g, ' ')),
      el('td', {}, link('#/topic/' + encodeURIComponent(n.topic), n.topic)),
      el('td', { class: 'mono' }, n.kind === 'TASK_TERMINAL' ? link('#/task/' + encodeURIComponent(n.subject_id), n.subject_id) : n.subject_id),
      el('td', {}, n.error ? [n.error.code ? el('b', {}, n.error.code + ' ') : null, n.error.message || ''] : ''),
      el('td', { class: 'buttons' }, !n.open ? el('span', { class: 'sub' }, 'closed')
        : n.kind === 'TASK_TERMINAL' ? [retryButton(n.subject_id, again), discardButton(n.subject_id, again)]
          : n.kind === 'DELIVERY_POISONED' ? retryDeliveryButton(n.subject_id, again) : null)));
    show(el('h1', {}, 'Incidents'),
      el('p', { class: 'note' }, everything
        ? ['Every incident recorded, oldest first. ', link('#/incidents', 'Only those still open')]
        : ['Terminal tasks and poisoned deliveries still waiting for an operator, oldest first. ', link('#/incidents/all', 'The whole record')]),
      el('div', { class: 'scroll' }, el('table', { id: 'incidents' },
        el('thead', {}, el('tr', {}, ['at', 'kind', 'topic', 'subject', 'error', ''].map((h) => el('th', {}, h)))),
        el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 6, class: 'empty' }, everything ? 'Nothing recorded.' : 'Nothing is stuck.'))))));
    live();
    timer = setTimeout(() => {
      if (token === routeToken && !document.querySelector('.overlay')) route(true);
    }, 3000);
  }

  // ---- deployments ----

  async function deploymentsPage(token) {
    const [{ deployments }, o] = await Promise.all([api('GET', 'deployments'), api('GET', 'overview')]);
    if (token !== routeToken) return;
    const items = deployments.slice().reverse().map((d) => el('article', { class: 'deployment', 'data-id': d.id, 'data-version': d.version },
      el('h2', {}, el('span', { class: 'mono' }, d.id), ' v' + d.version, ' ', el('span', { class: 'pill ' + d.state.toLowerCase() }, d.state.toLowerCase())),
      kv([['created', when(d.created_at_ms)], d.retired_at_ms ? ['retired', when(d.retired_at_ms)] : null,
        ['pending deliveries', fmt(d.pending_deliveries)], ['tasks', fmt(d.tasks)],
        ['calls retrying', fmt(d.calls_retrying)], ['calls backing off', fmt(d.calls_backing_off)],
        ['terminal tasks', fmt(d.terminal_tasks)], ['poisoned deliveries', fmt(d.poisoned_deliveries)]]),
      el('div', { class: 'scroll' }, el('table', {},
        el('thead', {}, el('tr', {}, ['channel', 'transport', 'reply max bytes', 'content types'].map((h) => el('th', {}, h)))),
        el('tbody', {}, d.channels.map((c) => el('tr', {},
          el('td', {}, link('#/topic/' + encodeURIComponent(c.name), c.name)), el('td', { class: 'mono' }, c.transport),
          el('td', { class: 'num' }, c.reply_max_bytes ? fmt(c.reply_max_bytes) : 'default'),
          el('td', {}, c.content_types.length ? c.content_types.join(', ') : 'any'))))))));
    show(el('h1', {}, 'Deployments'),
      kv([['calls waiting', el('span', { id: 'calls-waiting' }, fmt(o.calls.waiting))], ['calls backing off', fmt(o.calls.backoff)]]),
      items.length ? items : el('p', { class: 'empty' }, 'No deployment yet.'));
    live();
  }

  // ---- routing: #/, #/topic/NAME[/STATE[/after/ID]], #/task/ID, #/incidents, #/deployments ----

  let routeToken = 0;

  async function route(quiet) {
    stopPolling();
    const token = ++routeToken;
    const parts = location.hash.replace(/^#\/?/, '').split('/').map((p) => {
      try {
        return decodeURIComponent(p);
      } catch (e) {
        return '';
      }
    });
    const page = parts[0] || 'overview';
    for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === page);
    if (!quiet) say('');
    try {
      if (page === 'overview') {
        if (!quiet) samples = [];
        await pollOverview(token);
      } else if (page === 'topic') {
        const state = parts[2] && parts[2] !== 'all' ? parts[2] : null;
        await topicPage(parts[1] || '', state, parts[3] === 'after' ? parts[4] : null, token);
      } else if (page === 'task') {
        await taskPage(parts[1] || '', token);
      } else if (page === 'incidents') {
        await incidentsPage(parts[1] === 'all', token);
      } else if (page === 'deployments') {
        await deploymentsPage(token);
      } else {
        show(el('p', {}, 'No such page. ', link('#/', 'Overview')));
      }
    } catch (err) {
      if (token !== routeToken) return;
      if (!failed(err) && !main.firstChild) show(el('p', { class: 'empty' }, err.message));
      else if (err instanceof ApiError && err.status === 404) show(el('p', { class: 'empty' }, err.message));
    }
  }

  window.addEventListener('hashchange', () => route());
  document.addEventListener('DOMContentLoaded', () => route());

  // For the tests of the page itself (FIPS 180-4 and RFC 4231 vectors).
  window.berthConsole = Object.freeze({ sha256, hmacSha256, hex });
})();
