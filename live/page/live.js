// live/page/live.js: the page of bin/live (docs/live.md). It loads the state once
// (GET /api/state), then applies the updates pushed by GET /api/events (Server-Sent Events)
// one by one, in sequence: every update has a number, and the page checks that each one is
// the next; a gap (it never expects one) or a "reset" from the server reloads the state.
// The number shown in the header is the last update applied: every update up to it is on
// the page. Curves are drawn with uPlot when the build vendored it, else shown as tables.
(() => {
  'use strict';
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
  const EVENTS = ['metrics', 'eval', 'ckpt', 'stage', 'forget', 'resume', 'run', 'evict', 'log'];
  const ORDER = ['loss', 'ce', 'lr', 'tok_s', 'grad_norm', 'data_wait_s', 'kl_bits', 'kl', 'kl_above_kappa', 'elbo', 'elbo_0', 'kl_seq', 'fast_lr', 'inner_steps'];
  // metrics drawn together with another one: name -> [members, title]
  const GROUPS = {
    kl_bits: [['kl_bits', 'kappa_bits'], 'KL per token (bits) against kappa (dashed)'],
    elbo_0: [['elbo_0', 'elbo_K'], 'LTM NELBO per token before (solid) and after (dashed) the inner loop'],
  };
  const MEMBER_OF = { kappa_bits: 'kl_bits', elbo_K: 'elbo_0' };
  const HAVE_UPLOT = typeof window.uPlot === 'function';

  const S = {
    seq: 0, cap: 2048, runs: new Map(), stages: new Map(), hidden: new Set(), log: [],
    es: null, charts: new Map(), specKey: '', dirty: true, resyncs: 0, loading: null, colorOf: new Map(),
  };
  const $ = (id) => document.getElementById(id);

  // ---- data ---------------------------------------------------------------------------
  function series() { return { x: [], y: [] }; }
  // the server's thinning rule (live/store.h): when full, every second point of the older
  // three quarters goes, the newest quarter stays
  function thin(s) {
    const keep = Math.floor(s.x.length / 4), old = s.x.length - keep, x = [], y = [];
    for (let i = 0; i < old; i += 2) { x.push(s.x[i]); y.push(s.y[i]); }
    for (let i = old; i < s.x.length; i++) { x.push(s.x[i]); y.push(s.y[i]); }
    s.x = x; s.y = y;
  }
  function put(s, step, v) {
    const n = s.x.length;
    if (n === 0 || s.x[n - 1] < step) {
      if (n >= S.cap) thin(s);
      s.x.push(step); s.y.push(v); return;
    }
    let lo = 0, hi = n;
    while (lo < hi) { const m = (lo + hi) >> 1; if (s.x[m] < step) lo = m + 1; else hi = m; }
    if (s.x[lo] === step) { s.y[lo] = v; return; }
    if (n >= S.cap) { thin(s); put(s, step, v); return; }
    s.x.splice(lo, 0, step); s.y.splice(lo, 0, v);
  }
  function runOf(name) {
    let r = S.runs.get(name);
    if (!r) {
      r = { name, model: '', last_step: -1, last_time: null, ckpt: null, metrics: new Map(), evals: new Map() };
      S.runs.set(name, r);
      if (!S.colorOf.has(name)) S.colorOf.set(name, COLORS[S.colorOf.size % COLORS.length]);
    }
    return r;
  }
  function setRun(j) {
    S.runs.delete(j.run);
    const r = runOf(j.run);
    r.model = j.model; r.last_step = j.last_step; r.last_time = j.last_time; r.ckpt = j.ckpt;
    for (const [k, pts] of Object.entries(j.metrics)) { const s = series(); for (const [x, y] of pts) { s.x.push(x); s.y.push(y); } r.metrics.set(k, s); }
    for (const [k, pts] of Object.entries(j.evals)) { const s = series(); for (const [x, y] of pts) { s.x.push(x); s.y.push(y); } r.evals.set(k, s); }
  }
  const stageKey = (st) => st.kind + '/' + st.name;

  function apply(t, u) {
    switch (t) {
      case 'metrics': {
        const r = runOf(u.run);
        for (const [k, v] of Object.entries(u.v)) {
          if (!r.metrics.has(k)) r.metrics.set(k, series());
          put(r.metrics.get(k), u.step, v);
        }
        if (u.step >= r.last_step) { r.last_step = u.step; r.last_time = u.time; }
        break;
      }
      case 'eval': {
        const r = runOf(u.run);
        for (const [k, v] of Object.entries(u.v)) {
          const name = u.task + '/' + k;
          if (!r.evals.has(name)) r.evals.set(name, series());
          put(r.evals.get(name), u.step, v);
        }
        break;
      }
      case 'ckpt': { const r = runOf(u.run); r.model = u.model || r.model; r.ckpt = { step: u.step, time: u.time, path: u.path }; break; }
      case 'resume': {
        const r = runOf(u.run);
        for (const s of r.metrics.values()) while (s.x.length && s.x[s.x.length - 1] >= u.from) { s.x.pop(); s.y.pop(); }
        break;
      }
      case 'stage': u.seen = performance.now() - 1000 * u.age; S.stages.set(stageKey(u), u); break;
      case 'forget': S.stages.delete(stageKey(u)); break;
      case 'evict': S.runs.delete(u.run); break;
      case 'run': reloadRun(u.run); break;
      case 'log': S.log.push(u); if (S.log.length > 200) S.log.shift(); renderLog(); break;
    }
    S.dirty = true;
  }

  // ---- the connection -------------------------------------------------------------------
  function setConn(ok, text) { const c = $('conn'); c.textContent = text; c.className = ok ? 'ok' : 'bad'; }
  function showSeq() { $('seq').textContent = S.seq ? 'update #' + S.seq + ' applied' : 'no update yet'; $('seq').dataset.seq = S.seq; }

  async function api(path, opts) {
    const r = await fetch(path, Object.assign({ credentials: 'same-origin', cache: 'no-store' }, opts || {}));
    let j = null;
    try { j = await r.json(); } catch (e) { j = { error: 'not JSON (' + r.status + ')' }; }
    if (!r.ok) throw new Error(j.error || ('HTTP ' + r.status));
    return j;
  }

  async function reloadRun(name) { // points came from disk in bulk: take the run as the server has it
    try {
      const j = await api('/api/state?runs=' + encodeURIComponent(name));
      // merged, not replaced: updates applied while the request was out are newer than it
      for (const rj of j.runs) {
        const r = runOf(rj.run);
        if (rj.ckpt && (!r.ckpt || rj.ckpt.step >= r.ckpt.step)) r.ckpt = rj.ckpt;
        r.model = rj.model || r.model;
        for (const [kind, src] of [['metrics', rj.metrics], ['evals', rj.evals]])
          for (const [k, pts] of Object.entries(src)) {
            if (!r[kind].has(k)) r[kind].set(k, series());
            for (const [x, y] of pts) put(r[kind].get(k), x, y);
          }
      }
      S.dirty = true;
    } catch (e) { /* a later update or a resync brings it */ }
  }

  function resync(why) {
    if (S.loading) return;
    if (S.es) { S.es.close(); S.es = null; }
    S.resyncs++;
    setConn(false, 'loading' + (why ? ' (' + why + ')' : ''));
    S.loading = (async () => {
      for (;;) {
        try {
          const j = await api('/api/state');
          S.runs.clear(); S.stages.clear();
          S.cap = j.cap; S.boot = j.boot;
          for (const rj of j.runs) setRun(rj);
          for (const st of j.stages) { st.seen = performance.now() - 1000 * st.age; S.stages.set(stageKey(st), st); }
          S.log = j.log.slice(); renderLog();
          S.seq = j.seq; showSeq(); S.dirty = true;
          connect(j.seq);
          return;
        } catch (e) {
          setConn(false, 'no server: ' + e.message);
          await new Promise((res) => setTimeout(res, 2000));
        }
      }
    })().finally(() => { S.loading = null; });
  }

  function connect(since) {
    const es = new EventSource('/api/events?since=' + since);
    S.es = es;
    es.onopen = () => setConn(true, 'live');
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) { if (S.es === es) resync('stream closed'); }
      else setConn(false, 'reconnecting');
    };
    for (const t of EVENTS)
      es.addEventListener(t, (ev) => {
        if (S.es !== es) return;
        const id = Number(ev.lastEventId);
        if (id !== S.seq + 1) { resync('gap ' + S.seq + ' to ' + id); return; }
        S.seq = id;
        apply(t, JSON.parse(ev.data));
        showSeq();
      });
    es.addEventListener('reset', () => { if (S.es === es) resync('fell behind'); });
    es.addEventListener('hello', (ev) => { // a reconnection may reach a restarted bin/live
      if (S.es === es && JSON.parse(ev.data).boot !== S.boot) resync('bin/live restarted');
    });
  }

  // ---- rendering -------------------------------------------------------------------------
  function ago(s) { if (s == null || !isFinite(s)) return ''; s = Math.max(0, s); return s < 90 ? s.toFixed(0) + ' s' : s < 5400 ? (s / 60).toFixed(0) + ' min' : (s / 3600).toFixed(1) + ' h'; }
  function fmt(v) { return v == null ? '–' : Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : (+v.toPrecision(5)).toString(); }

  function renderRuns() {
    const box = $('runs');
    if (!S.runs.size) return;
    const names = [...S.runs.keys()].sort();
    let html = '';
    for (const n of names) {
      const r = S.runs.get(n), id = 'run-' + n;
      const ck = r.ckpt ? `checkpoint ${r.ckpt.step} (${ago(Date.now() / 1000 - r.ckpt.time)} ago)` : 'no checkpoint yet';
      html += `<label data-run="${esc(n)}"><input type="checkbox" data-run="${esc(n)}" ${S.hidden.has(n) ? '' : 'checked'}>` +
        `<span class="swatch" style="background:${S.colorOf.get(n)}"></span><b>${esc(n)}</b> ` +
        `<span class="muted">${esc(r.model || '?')}, step ${r.last_step}, ${ck}</span></label>`;
    }
    if (box.dataset.html !== html) {
      box.innerHTML = html; box.dataset.html = html;
      for (const cb of box.querySelectorAll('input')) cb.onchange = () => { if (cb.checked) S.hidden.delete(cb.dataset.run); else S.hidden.add(cb.dataset.run); S.dirty = true; };
    }
    const sel = $('sample-run'), have = new Set([...sel.options].map((o) => o.value));
    for (const n of names) if (!have.has(n)) { const o = document.createElement('option'); o.value = n; o.textContent = n; sel.appendChild(o); }
  }

  function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c])); }

  function renderHealth() {
    const rows = [...S.stages.values()].sort((a, b) => (a.kind + a.name).localeCompare(b.kind + b.name));
    const now = performance.now();
    let html = '';
    for (const st of rows) {
      let doing = st.state;
      if (st.kind === 'trainer') doing += `, waited ${fmt(st.data_wait_s)} s on data, ${fmt(st.tok_s)} tok/s`;
      if (st.kind === 'loader') doing = `${st.state} (${st.endpoint})`;
      if (st.kind === 'sampler') doing = `${st.state} at ${st.endpoint}`;
      const status = st.alive ? 'alive' : st.bye ? 'stopped' : st.kind === 'trainer' ? 'quiet' : 'gone';
      html += `<tr class="${st.alive ? 'alive' : 'gone'}" data-kind="${esc(st.kind)}" data-name="${esc(st.name)}" data-status="${status}">` +
        `<td>${esc(st.kind)}</td><td>${esc(st.name)}</td><td>${esc(st.run)}</td><td>${esc(doing)}</td><td>${st.done}</td>` +
        `<td>${ago((now - st.seen) / 1000)} ago</td><td class="status ${st.alive ? 'alive' : ''}">${status}</td></tr>`;
    }
    $('health').tBodies[0].innerHTML = html;
  }

  // the newest line stays in view, unless the reader scrolled up to an older one
  function renderLog() {
    const el = $('log'), atEnd = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
    el.textContent = S.log.map((l) => `${l.program}: ${l.line}`).join('\n');
    if (atEnd) el.scrollTop = el.scrollHeight;
  }

  // the charts the selected runs call for: one per metric (some drawn together), one per
  // evaluator value
  function specs() {
    const m = new Set(), e = new Set();
    for (const r of S.runs.values()) {
      if (S.hidden.has(r.name)) continue;
      for (const k of r.metrics.keys()) if (!MEMBER_OF[k]) m.add(k);
      for (const k of r.evals.keys()) e.add(k);
    }
    const rank = (k) => { const i = ORDER.indexOf(k); return i < 0 ? 1000 : i; };
    const mk = [...m].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    const out = [];
    for (const k of mk) out.push({ id: 'chart-' + k, title: GROUPS[k] ? GROUPS[k][1] : k, kind: 'metrics', names: GROUPS[k] ? GROUPS[k][0] : [k] });
    for (const k of [...e].sort()) out.push({ id: 'chart-eval-' + k.replace(/[^A-Za-z0-9_-]/g, '_'), title: 'evaluator ' + k, kind: 'evals', names: [k] });
    return out;
  }

  function chartSeries(spec) {
    const list = [];
    for (const r of [...S.runs.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      if (S.hidden.has(r.name)) continue;
      spec.names.forEach((n, i) => {
        const s = r[spec.kind].get(n);
        if (s) list.push({ run: r.name, name: n, s, dash: i > 0 });
      });
    }
    return list;
  }

  function renderCharts() {
    const box = $('charts'), sp = specs();
    const key = sp.map((c) => c.id + ':' + chartSeries(c).map((x) => x.run + '/' + x.name).join(',')).join(';');
    if (key !== S.specKey) { // the set of charts or of their series changed: build them again
      for (const c of S.charts.values()) if (c.plot) c.plot.destroy();
      S.charts.clear(); box.innerHTML = ''; S.specKey = key;
      for (const spec of sp) {
        const div = document.createElement('div');
        div.className = 'chart'; div.id = spec.id;
        div.innerHTML = `<h3>${esc(spec.title)}</h3><div class="plot"></div>`;
        box.appendChild(div);
        S.charts.set(spec.id, { spec, div, plot: null });
      }
    }
    for (const c of S.charts.values()) {
      const list = chartSeries(c.spec);
      let points = 0;
      for (const x of list) points += x.s.x.length;
      c.div.dataset.points = points;
      c.div.dataset.series = list.length;
      const holder = c.div.querySelector('.plot');
      if (!HAVE_UPLOT) {
        holder.innerHTML = '<table><tr><th>run</th><th>series</th><th>points</th><th>last step</th><th>last value</th></tr>' +
          list.map((x) => `<tr><td>${esc(x.run)}</td><td>${esc(x.name)}</td><td>${x.s.x.length}</td><td>${x.s.x[x.s.x.length - 1]}</td><td>${fmt(x.s.y[x.s.y.length - 1])}</td></tr>`).join('') + '</table>';
        continue;
      }
      const data = list.length === 1 ? [x0(list[0].s.x), list[0].s.y.slice()] : uPlot.join(list.map((x) => [x0(x.s.x), x.s.y.slice()]));
      if (!c.plot) {
        const w = Math.max(300, holder.clientWidth || 420);
        c.plot = new uPlot({
          width: w, height: 200,
          scales: { x: { time: false } },
          legend: { live: false },
          series: [{ label: 'step' }].concat(list.map((x) => ({
            label: x.run + ' ' + x.name, stroke: S.colorOf.get(x.run), width: 1.5, spanGaps: true,
            dash: x.dash ? [6, 4] : undefined, points: { show: false },
          }))),
          axes: [{ label: c.spec.kind === 'evals' ? 'checkpoint step' : 'step' }, { size: 80 }],
        }, data, holder);
      } else c.plot.setData(data);
    }
  }
  function x0(xs) { return xs.slice(); }

  function frame() { // four redraws a second at most, however fast updates come
    if (S.dirty) { S.dirty = false; renderRuns(); renderCharts(); }
    renderHealth();
  }

  // ---- samples ---------------------------------------------------------------------------
  $('sample-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const out = $('sample-out'), btn = $('sample-go');
    const body = {
      prompt: $('prompt').value, n: Number($('n').value), temperature: Number($('temperature').value),
      max_new: Number($('max_new').value), seed: 1,
    };
    if ($('sample-run').value) body.run = $('sample-run').value;
    btn.disabled = true; out.innerHTML = '<p class="muted">sampling…</p>';
    try {
      const j = await api('/api/sample', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      const ft = j.model === 'free';
      out.innerHTML = j.texts.map((t, i) => `<div class="sample"><b>${ft ? 'latent' : 'sample'} ${i}</b>${esc(body.prompt)}<u>${esc(t)}</u></div>`).join('') +
        `<p class="muted" style="grid-column: 1 / -1">${esc(j.model || 'model')} checkpoint ${esc(j.ckpt)} (step ${j.step}), from ${esc(j.endpoint)}</p>`;
    } catch (e) {
      out.innerHTML = `<p class="error">${esc(e.message)}</p>`;
    } finally { btn.disabled = false; }
  });

  // for tests and the curious: what the page holds
  window.liveDebug = {
    seq: () => S.seq, resyncs: () => S.resyncs, haveUplot: HAVE_UPLOT,
    points: (run, name) => { const r = S.runs.get(run); const s = r && (r.metrics.get(name) || r.evals.get(name)); return s ? s.x.length : 0; },
  };
  $('plotlib').textContent = HAVE_UPLOT ? '' : '(uPlot was not vendored when bin/live was built: npm was unreachable; tables instead of curves)';
  resync();
  setInterval(frame, 250);
})();
