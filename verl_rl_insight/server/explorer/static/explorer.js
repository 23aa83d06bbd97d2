// The run explorer: the runs list, a run page (its curves by step) and a step page (its swimlane,
// hardware, findings and samples). Plain JS, no build step. Data comes from the server's JSON API
// (/api/v1/explorer/...) or, in a file written by `rl-insight report`, from window.RL_INSIGHT_REPORT.
// What the page drew is in window.RL_INSIGHT_PAGE (point counts, finding bands, lanes): the tests read it.
"use strict";
(() => {
  const REPORT = window.RL_INSIGHT_REPORT || null;
  const TOKEN_KEY = "rl-insight-token";
  const MAX_KEYS = 64; // keys per /curves request (the API's limit)
  const COLORS = ["#2f6fca", "#e0592a", "#2e9d5b", "#8e44ad", "#c0392b", "#16a2b8", "#b8860b", "#555"];
  const SEVERITY = { critical: "rgba(198,40,40,0.16)", warning: "rgba(224,138,0,0.16)", info: "rgba(47,111,202,0.12)" };
  const page = (window.RL_INSIGHT_PAGE = { view: null, ready: false, curves: {}, bands: [], marks: [], step: null });

  // -- small helpers -----------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const svg = (tag, attrs) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    return node;
  };
  const main = () => document.getElementById("main");
  // the page's content: el's children rules (arrays flattened, null left out)
  const show = (...children) => main().replaceChildren(el("div", { class: "view" }, ...children));
  const fmt = (v, digits = 4) => (v === null || v === undefined ? "–" : typeof v === "number" ? +v.toPrecision(digits) : v);
  function age(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 90) return `${Math.round(seconds)} s`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
    if (seconds < 172800) return `${Math.round(seconds / 3600)} h`;
    return `${Math.round(seconds / 86400)} d`;
  }
  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  // -- URLs a person can paste (in a report file: #/ for the run, #/steps/N for a step) ----------
  const runHref = (p, e, query) =>
    REPORT ? "#/" : `/runs/${encodeURIComponent(p)}/${encodeURIComponent(e)}${query ? "?" + query : ""}`;
  const stepHref = (p, e, n) => (REPORT ? `#/steps/${n}` : `${runHref(p, e)}/steps/${n}`);

  function route() {
    if (REPORT) {
      const run = REPORT.run;
      const m = location.hash.match(/^#\/steps\/(\d+)$/);
      if (m) return { view: "step", project: run.project, experiment: run.experiment, step: +m[1] };
      return { view: "run", project: run.project, experiment: run.experiment };
    }
    const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[0] === "runs" && parts.length === 3) return { view: "run", project: parts[1], experiment: parts[2] };
    if (parts[0] === "runs" && parts.length === 5 && parts[3] === "steps")
      return { view: "step", project: parts[1], experiment: parts[2], step: +parts[4] };
    return { view: "runs" };
  }

  // -- the data layer: the API, or the report's copy of its answers -------------------------------
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }
  function fromReport(name, params) {
    const compare = (REPORT.compare || {})[params.experiment_name];
    const own = !params.experiment_name || params.experiment_name === REPORT.run.experiment;
    if (name === "runs") return REPORT.runs || { runs: [] };
    if (name === "run") {
      if (own) return REPORT.run;
      if (compare) return compare.run;
    }
    if (name === "curves") {
      const curves = own ? REPORT.curves : compare && compare.curves;
      if (curves) {
        const series = {};
        for (const key of params.keys.split(",")) if (key in curves.series) series[key] = curves.series[key];
        return { ...curves, series };
      }
    }
    if (name === "step" && (REPORT.steps || {})[params.step]) return REPORT.steps[params.step];
    if (name === "samples") {
      if ((REPORT.samples || {})[params.step]) return REPORT.samples[params.step];
      throw new ApiError(401, "this report holds no samples (rl-insight report --samples writes them)");
    }
    throw new ApiError(404, `this report holds no ${name} for ${JSON.stringify(params)}`);
  }
  async function api(name, params) {
    if (REPORT) return fromReport(name, params || {});
    const query = new URLSearchParams(params || {}).toString();
    const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
    const response = await fetch(`/api/v1/explorer/${name}${query ? "?" + query : ""}`, {
      headers,
      credentials: "omit",
      cache: "no-store",
    });
    let body = {};
    try {
      body = await response.json();
    } catch (_) {
      body = {};
    }
    if (!response.ok) throw new ApiError(response.status, body.error || response.statusText);
    return body;
  }
  async function curvesOf(project, experiment, keys) {
    const merged = { steps: [], times: [], series: {}, nonfinite: {} };
    const chunks = [];
    for (let i = 0; i < keys.length; i += MAX_KEYS) chunks.push(keys.slice(i, i + MAX_KEYS));
    const answers = await Promise.all(
      chunks.map((chunk) => api("curves", { project, experiment_name: experiment, keys: chunk.join(",") }))
    );
    for (const answer of answers) {
      merged.steps = answer.steps;
      merged.times = answer.times;
      Object.assign(merged.series, answer.series);
      Object.assign(merged.nonfinite, answer.nonfinite || {});
    }
    return merged;
  }

  // -- the token: asked once, kept in this tab's sessionStorage, sent as a header -----------------
  function tokenBox(why) {
    const input = el("input", { type: "password", autocomplete: "off", placeholder: "the server's token", "aria-label": "token" });
    const form = el(
      "form",
      {
        class: "token-box",
        "data-testid": "token-form",
        onsubmit: (event) => {
          event.preventDefault();
          if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
          location.reload();
        },
      },
      el("span", { text: why }),
      input,
      el("button", { type: "submit", text: "use token" })
    );
    return form;
  }
  function showTokenState() {
    const state = document.getElementById("token-state");
    if (!state || REPORT) return;
    state.replaceChildren();
    if (token())
      state.append(
        "token kept in this tab",
        el("button", { type: "button", text: "forget", onclick: () => (sessionStorage.removeItem(TOKEN_KEY), location.reload()) })
      );
  }
  function crumbs(...links) {
    const nav = document.getElementById("crumbs");
    if (nav) nav.replaceChildren(...links);
    const home = document.getElementById("home");
    if (home && REPORT) home.setAttribute("href", "#/");
  }

  // -- the runs list ------------------------------------------------------------------------
  function sparkline(spark) {
    const canvas = el("canvas", { class: "sparkline", width: 120, height: 24, title: spark ? spark.key : "" });
    const values = spark ? spark.values : [];
    const finite = values.filter((v) => v !== null);
    if (finite.length < 2) return canvas;
    const ctx = canvas.getContext("2d");
    const lo = Math.min(...finite), hi = Math.max(...finite), span = hi - lo || 1;
    ctx.strokeStyle = COLORS[0];
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let started = false;
    values.forEach((v, i) => {
      if (v === null) return;
      const x = (i / (values.length - 1)) * 118 + 1, y = 22 - ((v - lo) / span) * 20;
      if (started) ctx.lineTo(x, y);
      else ctx.moveTo(x, y), (started = true);
    });
    ctx.stroke();
    return canvas;
  }
  function findingBadges(counts) {
    return ["critical", "warning", "info"].map((s) =>
      el("span", { class: `badge ${counts && counts[s] ? s : "zero"}`, title: s, text: `${(counts && counts[s]) || 0}` })
    );
  }
  async function viewRuns() {
    crumbs(el("span", { text: "runs" }));
    const { runs } = await api("runs");
    const params = new URLSearchParams(location.search);
    const projects = [...new Set(runs.map((r) => r.project))].sort();
    const project = el("select", { "aria-label": "project" }, el("option", { value: "", text: "all projects" }),
      projects.map((p) => el("option", { value: p, text: p, selected: p === params.get("project") })));
    const name = el("input", { type: "search", placeholder: "experiment name", value: params.get("q") || "", "aria-label": "name" });
    const body = el("tbody");
    const draw = () => {
      const q = name.value.trim().toLowerCase();
      const shown = runs.filter((r) => (!project.value || r.project === project.value) && (!q || r.experiment.toLowerCase().includes(q)));
      body.replaceChildren(
        ...shown.map((r) =>
          el("tr", { "data-testid": "run-row", "data-project": r.project, "data-experiment": r.experiment },
            el("td", { text: r.project }),
            el("td", {}, el("a", { href: runHref(r.project, r.experiment), text: r.experiment })),
            el("td", { text: r.step === null ? "–" : r.step }),
            el("td", { text: age(r.age_s) }),
            el("td", {}, el("span", { class: `badge ${r.state}`, text: r.state })),
            el("td", {}, findingBadges(r.findings)),
            el("td", {}, sparkline(r.sparkline)))
        )
      );
      const query = new URLSearchParams({ ...(project.value && { project: project.value }), ...(q && { q }) }).toString();
      history.replaceState(null, "", location.pathname + (query ? "?" + query : ""));
    };
    project.addEventListener("change", draw);
    name.addEventListener("input", draw);
    show(
      el("h1", { text: "Runs" }),
      el("div", { class: "controls" }, el("label", {}, "project", project), el("label", {}, "name", name)),
      runs.length
        ? el("table", {}, el("thead", {}, el("tr", {}, ["project", "experiment", "step", "age", "state", "findings", "score"].map((h) => el("th", { text: h })))), body)
        : el("p", { class: "muted", text: "No run has logged to this server yet." })
    );
    draw();
  }

  // -- the run page -------------------------------------------------------------------------
  function ema(values, alpha) {
    if (!alpha) return values;
    let state = null, weight = 0;
    return values.map((v) => {
      if (v === null || v === undefined) return null;
      state = state === null ? 0 : state;
      state = alpha * state + (1 - alpha) * v;
      weight = alpha * weight + (1 - alpha);
      return state / weight; // debiased, as TensorBoard's
    });
  }
  function bandsPlugin(bands, marks) {
    return {
      hooks: {
        drawClear: [
          (u) => {
            const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
            ctx.save();
            for (const band of bands) {
              const x0 = u.valToPos(band.first_step - 0.5, "x", true), x1 = u.valToPos(band.last_step + 0.5, "x", true);
              ctx.fillStyle = SEVERITY[band.severity] || SEVERITY.info;
              ctx.fillRect(Math.min(x0, x1), top, Math.max(Math.abs(x1 - x0), 2), height);
            }
            ctx.restore();
          },
        ],
        draw: [
          (u) => {
            const ctx = u.ctx;
            ctx.save();
            ctx.strokeStyle = "#7a5af8";
            ctx.setLineDash([4, 3]);
            ctx.fillStyle = "#7a5af8";
            ctx.font = `${Math.round(10 * devicePixelRatio)}px sans-serif`;
            for (const mark of marks) {
              const x = Math.round(u.valToPos(mark.step, "x", true));
              ctx.beginPath();
              ctx.moveTo(x, u.bbox.top);
              ctx.lineTo(x, u.bbox.top + u.bbox.height);
              ctx.stroke();
              ctx.fillText(mark.text.slice(0, 40), x + 3, u.bbox.top + 12 * devicePixelRatio);
            }
            ctx.restore();
          },
        ],
      },
    };
  }
  function chartPanel(ctx, index, title, keys) {
    const holder = el("div", { class: "chart" });
    const note = el("div", { class: "note" });
    const panel = el("section", { class: "panel", "data-testid": "panel", "data-title": title }, el("h3", { text: title }), holder, note);
    const tables = [];
    const series = [{ label: "step" }];
    const counts = {};
    const runs = [{ experiment: ctx.experiment, curves: ctx.curves, dash: null }, ...ctx.compared];
    runs.forEach((run, r) => {
      const present = keys.filter((k) => run.curves && k in run.curves.series);
      if (!present.length) return;
      const raw = present.map((k) => run.curves.series[k]);
      const smoothed = raw.map((values) => ema(values, ctx.alpha));
      tables.push([run.curves.steps, ...(ctx.alpha ? [...raw, ...smoothed] : raw)]);
      const line = (k, i, faint) => ({
        label: `${r ? run.experiment + " · " : ""}${k}${faint ? " (raw)" : ""}`,
        stroke: COLORS[keys.indexOf(k) % COLORS.length] + (faint ? "44" : ""),
        width: faint ? 1 : 1.5,
        dash: r ? [6, 4] : undefined,
        spanGaps: true,
        points: { show: false },
      });
      if (ctx.alpha) present.forEach((k, i) => series.push(line(k, i, true)));
      present.forEach((k, i) => series.push(line(k, i, false)));
      if (r === 0) present.forEach((k, i) => (counts[k] = raw[i].filter((v) => v !== null).length));
      for (const k of present) {
        const bad = (run.curves.nonfinite || {})[k];
        if (bad && bad.length) note.append(el("div", { text: `${run.experiment} · ${k}: ${bad.length} non-finite value(s), left out` }));
      }
    });
    const bands = ctx.findings.filter((f) => f.panel === index);
    for (const band of bands) page.bands.push({ panel: title, key: band.key, detector: band.detector, first_step: band.first_step, last_step: band.last_step, severity: band.severity });
    Object.assign(page.curves, counts);
    panel.setAttribute("data-points", JSON.stringify(counts));
    panel.setAttribute("data-bands", JSON.stringify(bands.map((b) => [b.first_step, b.last_step])));
    if (!tables.length) {
      holder.append(el("p", { class: "muted", text: "not logged in this run" }));
      return panel;
    }
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    ctx.pending.push(() => {
      const width = (ctx.width = ctx.width || Math.max(300, holder.clientWidth || 500)); // one layout read
      const chart = new uPlot(
        { width, height: 220, series, scales: { x: { time: false } }, legend: { live: true }, plugins: [bandsPlugin(bands, ctx.marks)], cursor: { drag: { x: true, y: false } } },
        data,
        holder
      );
      onPointClick(chart, ctx);
      ctx.charts.push(chart);
      ctx.byPanel[index] = chart;
    });
    return panel;
  }
  function onPointClick(chart, ctx) {
    let down = null;
    chart.over.addEventListener("mousedown", (e) => (down = [e.clientX, e.clientY]));
    chart.over.addEventListener("click", (e) => {
      if (down && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4) return; // a drag zooms
      const idx = chart.cursor.idx;
      if (idx === null || idx === undefined) return;
      const step = chart.data[0][idx];
      location.href = stepHref(ctx.project, ctx.experiment, step);
    });
  }
  function findingCard(f, project, experiment) {
    const evidence = Object.entries(f.evidence || {});
    return el("article", { class: `finding ${f.severity}`, "data-testid": "finding", "data-detector": f.detector },
      el("h3", {}, el("span", { class: `badge ${f.severity}`, text: f.severity }), f.title),
      el("div", {}, "steps ", el("a", { href: stepHref(project, experiment, f.first_step), text: f.first_step }),
        f.last_step !== f.first_step ? ["–", el("a", { href: stepHref(project, experiment, f.last_step), text: f.last_step })] : null,
        f.key ? ` · ${f.key}` : null),
      el("p", { text: f.summary }),
      evidence.length ? el("dl", {}, evidence.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: fmt(v, 6) })])) : null,
      f.where_to_look ? el("p", { class: "muted" }, "where to look: ", f.where_to_look) : null);
  }
  function flatten(value, prefix, out) {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
    } else out[prefix] = JSON.stringify(value);
    return out;
  }
  function cardSection(run, compared) {
    const section = el("section", { "data-testid": "run-card" }, el("h2", { text: "Run card" }));
    if (!run.card) {
      section.append(run.card_needs_token ? tokenBox("The run card (config, command, paths) needs the token.") : el("p", { class: "muted", text: "This run sent no card." }));
      return section;
    }
    const mine = flatten(run.card.config || {}, "", {});
    const others = compared.filter((c) => c.run && c.run.card).map((c) => [c.experiment, flatten(c.run.card.config || {}, "", {})]);
    if (others.length) {
      const keys = [...new Set([...Object.keys(mine), ...others.flatMap(([, o]) => Object.keys(o))])].sort();
      const differ = keys.filter((k) => others.some(([, o]) => o[k] !== mine[k]));
      section.append(
        el("h3", { text: `config that differs (${differ.length} of ${keys.length} keys)` }),
        el("table", { "data-testid": "config-diff" },
          el("thead", {}, el("tr", {}, el("th", { text: "key" }), el("th", { text: run.experiment }), others.map(([e]) => el("th", { text: e })))),
          el("tbody", {}, differ.map((k) => el("tr", {}, el("td", {}, el("code", { text: k })), el("td", { text: mine[k] ?? "–" }), others.map(([, o]) => el("td", { text: o[k] ?? "–" }))))))
      );
    }
    const { config, ...rest } = run.card;
    section.append(el("details", {}, el("summary", { text: "the card" }), el("pre", { text: JSON.stringify(rest, null, 2) })),
      el("details", {}, el("summary", { text: "config" }), el("pre", { text: JSON.stringify(config || {}, null, 2) })));
    return section;
  }
  function placeFindings(run, panels) {
    // a finding's band goes on the panel of its key; a key no panel shows gets a panel of its own
    return (run.findings || []).map((f) => {
      let index = f.key ? panels.findIndex((p) => p.keys.includes(f.key)) : 0;
      if (index < 0 && run.keys.includes(f.key)) index = panels.push({ title: f.key, keys: [f.key] }) - 1;
      return { ...f, panel: index };
    });
  }
  async function viewRun(where) {
    const { project, experiment } = where;
    const params = new URLSearchParams(location.search);
    crumbs(el("a", { href: REPORT ? "#/" : "/", text: "runs" }), el("span", { text: `${project} / ${experiment}` }));
    const run = await api("run", { project, experiment_name: experiment });
    const panels = (run.panels || []).map((p) => ({ ...p }));
    const extra = (params.get("keys") || "").split(",").filter((k) => k && run.keys.includes(k));
    for (const k of extra) if (!panels.some((p) => p.keys.includes(k))) panels.push({ title: k, keys: [k] });
    const findings = placeFindings(run, panels);
    const wanted = [...new Set(panels.flatMap((p) => p.keys))];
    const compareNames = (params.get("compare") || "").split(",").filter((e) => e && (run.others || []).includes(e) && e !== experiment);
    const [curves, ...compared] = await Promise.all([
      curvesOf(project, experiment, wanted),
      ...compareNames.map(async (e) => {
        const other = await api("run", { project, experiment_name: e });
        const keys = wanted.filter((k) => other.keys.includes(k));
        return { experiment: e, run: other, curves: await curvesOf(project, e, keys) };
      }),
    ]);
    page.dataAt = performance.now(); // the answers are in: from here on it is the page's own drawing
    const alpha = Math.min(Math.max(+(params.get("smooth") || 0), 0), 0.99);
    const ctx = { project, experiment, curves, compared, alpha, findings, marks: run.marks || [], pending: [], charts: [], byPanel: {} };
    // where on the screen panel i draws step n (what a click there opens): for people's scripts and the tests
    page.pointAt = (i, n) => {
      const chart = ctx.byPanel[i], box = chart.over.getBoundingClientRect();
      return { x: box.left + chart.valToPos(n, "x"), y: box.top + box.height / 2 };
    };
    page.marks = ctx.marks.map((m) => m.step);
    const setParam = (name, value) => {
      if (value) params.set(name, value);
      else params.delete(name);
      location.search = params.toString();
    };
    const smooth = el("input", { type: "range", min: 0, max: 0.99, step: 0.01, value: alpha, "aria-label": "smoothing" });
    const smoothValue = el("span", { text: alpha.toFixed(2) });
    smooth.addEventListener("input", () => (smoothValue.textContent = (+smooth.value).toFixed(2)));
    smooth.addEventListener("change", () => (REPORT ? redraw(+smooth.value) : setParam("smooth", +smooth.value ? smooth.value : "")));
    const compareBoxes = (run.others || []).filter((e) => e !== experiment).map((e) => el("label", {},
      el("input", { type: "checkbox", checked: compareNames.includes(e), disabled: !!REPORT && !(REPORT.compare || {})[e],
        onchange: (ev) => setParam("compare", (ev.target.checked ? [...compareNames, e] : compareNames.filter((x) => x !== e)).join(",")) }), e));
    const grid = el("div", { class: "panels" });
    const redraw = (a) => {
      ctx.alpha = a;
      ctx.width = 0;
      for (const chart of ctx.charts.splice(0)) chart.destroy();
      page.bands = [];
      grid.replaceChildren(...panels.map((p, i) => chartPanel(ctx, i, p.title, p.keys)));
      for (const draw of ctx.pending.splice(0)) draw();
    };
    const shown = new Set(wanted);
    const others = run.keys.filter((k) => !shown.has(k));
    const keyFilter = el("input", { type: "search", placeholder: "filter keys", "aria-label": "filter keys" });
    const keyList = el("div", { class: "keys" }, others.map((k) => el("button", { type: "button", "data-key": k, text: k,
      onclick: () => (REPORT ? null : setParam("keys", [...extra, k].join(","))) })));
    keyFilter.addEventListener("input", () => {
      for (const b of keyList.children) b.hidden = !b.dataset.key.includes(keyFilter.value.trim());
    });
    show(
      el("h1", {}, `${experiment} `, el("span", { class: `badge ${run.state}`, text: run.state }), el("span", { class: "muted", text: ` ${project} · step ${run.step ?? "–"}` })),
      el("div", { class: "controls" }, el("label", {}, "smoothing (EMA)", smooth, smoothValue),
        compareBoxes.length ? el("span", {}, "compare: ", compareBoxes) : null,
        el("span", { class: "muted", text: "click a point to open its step; drag to zoom, double-click to reset" })),
      grid,
      el("h2", { text: `Findings (${findings.length})` }),
      findings.length ? findings.map((f) => findingCard(f, project, experiment)) : el("p", { class: "muted", text: "No finding: the detectors saw nothing wrong." }),
      (run.marks || []).length ? [el("h2", { text: "Marks" }), el("ul", {}, run.marks.map((m) => el("li", {}, el("a", { href: stepHref(project, experiment, m.step), text: `step ${m.step}` }), ` ${m.text}${m.reset_baseline ? " (baseline reset)" : ""}`)))] : null,
      REPORT && !run.card ? null : cardSection(run, compared),
      el("h2", { text: `Every other logged key (${others.length})` }),
      keyFilter,
      keyList
    );
    redraw(alpha);
    window.addEventListener("resize", () => {
      for (const chart of ctx.charts) chart.setSize({ width: Math.max(300, chart.root.parentElement.clientWidth), height: 220 });
    });
  }

  // -- the step page ------------------------------------------------------------------------
  function nest(spans) {
    // depth of each span in its lane: a span that starts inside another sits a row below it
    const sorted = spans.map((s, i) => ({ ...s, i })).sort((a, b) => a.start - b.start || b.end - a.end);
    const ends = [];
    for (const span of sorted) {
      while (ends.length && ends[ends.length - 1] <= span.start) ends.pop();
      span.depth = ends.length;
      ends.push(span.end);
    }
    return sorted;
  }
  function colorOf(name) {
    let h = 0;
    for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return COLORS[h % COLORS.length];
  }
  function swimlane(step, holderWidth) {
    const label = 170, row = 16, gap = 6, width = Math.max(600, holderWidth), plot = width - label - 12;
    const t0 = step.start, t1 = Math.max(step.end, ...step.lanes.flatMap((l) => l.spans.map((s) => s.end)));
    const x = (t) => label + ((t - t0) / (t1 - t0 || 1)) * plot;
    const slowest = step.slowest_replica && step.slowest_replica.lane;
    const root = svg("svg", { class: "swimlane", "data-testid": "swimlane", role: "img" });
    let y = 18;
    for (let s = 0; s <= 4; s++) {
      const t = t0 + ((t1 - t0) * s) / 4;
      const tick = svg("text", { x: x(t), y: 12, "text-anchor": s === 0 ? "start" : s === 4 ? "end" : "middle" });
      tick.textContent = `${(t - t0).toFixed(2)} s`;
      root.append(tick);
    }
    page.step.lanes = [];
    for (const lane of step.lanes) {
      const spans = nest(lane.spans);
      const depth = Math.max(0, ...spans.map((s) => s.depth)) + 1;
      const g = svg("g", { "data-lane": lane.lane, "data-kind": lane.kind, "data-spans": lane.spans.length,
        "data-generate": lane.spans.filter((s) => /generate/.test(s.name)).length });
      g.append(svg("rect", { class: `lane-bg${lane.lane === slowest ? " slowest" : ""}`, x: 0, y, width, height: depth * row }));
      const name = svg("text", { class: `lane-label${lane.lane === slowest ? " slowest" : ""}`, x: 4, y: y + 12 });
      name.textContent = `${lane.lane}${lane.node ? " @" + lane.node : ""}`.slice(0, 28);
      g.append(name);
      for (const span of spans) {
        const rect = svg("rect", { class: "span", x: x(span.start), y: y + span.depth * row + 1, height: row - 2,
          width: Math.max(1, x(span.end) - x(span.start)), fill: colorOf(span.name), "data-name": span.name });
        const tip = svg("title", {});
        tip.textContent = `${span.name}: ${(span.end - span.start).toFixed(3)} s (from +${(span.start - t0).toFixed(3)} s)`;
        rect.append(tip);
        g.append(rect);
        if (x(span.end) - x(span.start) > 70) {
          const text = svg("text", { class: "span-label", x: x(span.start) + 3, y: y + span.depth * row + 12 });
          text.textContent = span.name.slice(0, Math.floor((x(span.end) - x(span.start)) / 7));
          g.append(text);
        }
      }
      root.append(g);
      page.step.lanes.push({ lane: lane.lane, kind: lane.kind, node: lane.node, spans: lane.spans.length,
        generate: lane.spans.filter((s) => /generate/.test(s.name)).length });
      y += depth * row + gap;
    }
    root.setAttribute("viewBox", `0 0 ${width} ${y}`);
    root.setAttribute("width", width);
    root.setAttribute("height", y);
    return root;
  }
  function bar(cls, share) {
    const span = el("span", { class: cls });
    span.style.width = `${Math.max(0, Math.min(share, 1)) * 100}%`; // CSSOM: the page's CSP allows no style attribute
    return span;
  }
  // the profiled step's ranks (rl-insight profile: the trainer sends the per-rank summary of verl's traces)
  function rankLanes(profile) {
    const box = el("div", { "data-testid": "rank-lanes" });
    page.step.ranks = [];
    if (!profile) {
      box.append(el("p", { class: "muted", text: "This step was not profiled (or its traces are still being read)." }));
      return box;
    }
    box.append(el("p", { class: "summary-line", "data-testid": "profile-answer" }, el("strong", { text: profile.answer })));
    for (const phase of profile.phases || []) {
      const longest = Math.max(...phase.ranks.map((r) => r.duration_s), 1e-9);
      const rows = phase.ranks.map((r) => {
        const slow = phase.slowest === r.rank;
        const work = Math.max(r.duration_s - r.waiting_s, 0);
        page.step.ranks.push({ phase: phase.phase, rank: r.rank, slowest: slow });
        return el("tr", { class: slow ? "slowest" : "", "data-rank": r.rank },
          el("td", { text: `rank ${r.rank}${r.node ? " @" + r.node : ""}` }),
          el("td", { text: `${fmt(r.duration_s)} s` }),
          el("td", { text: `${Math.round((r.waiting_s / Math.max(r.duration_s, 1e-9)) * 100)} % waiting${r.waiting_op ? " in " + r.waiting_op : ""}` }),
          el("td", { class: "rank-bar" }, bar("work", work / longest), bar("wait", r.waiting_s / longest)));
      });
      const spread = phase.spread !== undefined && phase.spread !== null ? ` · spread ${fmt(phase.spread)}x` : "";
      const some = phase.ranks_total ? ` · the busiest ${phase.ranks.length} of ${phase.ranks_total} ranks` : "";
      box.append(el("h3", { text: `${phase.phase}${phase.slowest ? " · slowest rank " + phase.slowest : " · balanced"}${spread}${some}` }),
        el("table", { class: "ranks" }, ...rows));
    }
    return box;
  }

  // the step's time left the run's level: the series that moved with it (rl-insight diagnose says the same)
  function movedWith(ranges) {
    const box = el("div", { "data-testid": "moved-with" });
    if (!ranges || !ranges.length) {
      box.append(el("p", { class: "muted", text: "The step's time is at the run's level." }));
      return box;
    }
    for (const r of ranges) {
      const steps = r.first_step === r.last_step ? `step ${r.first_step}` : `steps ${r.first_step}-${r.last_step}`;
      box.append(el("p", { class: "summary-line" }, el("strong", { text: `${r.series} ${steps}: ${fmt(r.level)} → ${fmt(r.during)}` }), " (the run's level → the range's mean)"));
      box.append(el("table", { class: "ranks" }, ...(r.moved_with.length ? r.moved_with.map((m) => el("tr", { "data-series": m.series },
        el("td", { text: m.series }), el("td", { text: `${m.direction} ${fmt(m.level)} → ${fmt(m.during)}` }),
        el("td", { text: `association ${m.association >= 0 ? "+" : ""}${m.association.toFixed(2)}${m.share_of_rise !== null && m.share_of_rise !== undefined ? `, ${Math.round(m.share_of_rise * 100)} % of the change` : ""}` })))
        : [el("tr", {}, el("td", { text: "nothing else left its own level with it" }))])));
    }
    return box;
  }

  function hardwareTable(hardware) {
    if (!hardware.length) return el("p", { class: "muted", "data-testid": "hardware", text: "No GPU fault or throttling on its nodes during the step." });
    const pairs = (o) => Object.entries(o || {}).filter(([, v]) => v).map(([k, v]) => `${k}=${fmt(v)}`).join(", ") || "–";
    return el("table", { "data-testid": "hardware" }, el("thead", {}, el("tr", {}, ["node", "GPU", "faults", "throttling"].map((h) => el("th", { text: h })))),
      el("tbody", {}, hardware.map((h) => el("tr", {}, el("td", { text: h.node }), el("td", { text: h.gpu }), el("td", { text: pairs(h.faults) }), el("td", { text: pairs(h.throttle) })))));
  }
  function samplesSection(answer) {
    const section = el("section", { "data-testid": "samples" });
    const text = (t) => el("pre", { text: t ?? "" });
    if (answer.samples.length)
      section.append(el("table", { class: "samples" }, el("thead", {}, el("tr", {}, ["kind", "rank", "score", "length", "source", "prompt", "response"].map((h) => el("th", { text: h })))),
        el("tbody", {}, answer.samples.map((s) => el("tr", { "data-testid": "sample", "data-kind": s.kind }, el("td", { text: s.kind }), el("td", { text: s.rank }), el("td", { text: fmt(s.score) }),
          el("td", { text: s.length ?? "–" }), el("td", { text: s.data_source ?? "–" }), el("td", {}, text(s.prompt)), el("td", {}, text(s.response)))))));
    for (const group of answer.groups || [])
      section.append(el("details", { "data-testid": "group" }, el("summary", { text: `group ${group.uid}: ${group.responses.length} responses${group.ground_truth ? ", ground truth " + group.ground_truth : ""}` }),
        el("table", {}, el("tbody", {}, group.responses.map((r) => el("tr", {}, el("td", { text: `score ${fmt(r.score)}` }), el("td", { text: `advantage ${fmt(r.advantage)}` }), el("td", {}, text(r.response))))))));
    if ((answer.validation || []).length)
      section.append(el("h3", { text: "validation generations" }), el("table", {}, el("tbody", {}, answer.validation.map((v) => el("tr", { "data-testid": "validation-sample" },
        el("td", { text: v.data_source ?? "–" }), el("td", { text: fmt(v.score) }), el("td", {}, text(v.input)), el("td", {}, text(v.output)))))));
    if (!section.children.length) section.append(el("p", { class: "muted", text: "No sample was kept for this step." }));
    return section;
  }
  async function loadSamples(where, runAnswer, into) {
    const run = await runAnswer;
    // no token here: ask the API only when it said this server needs none (card_needs_token false)
    if (!token() && !REPORT && !(run && run.card_needs_token === false)) {
      into.replaceChildren(tokenBox("The samples (prompts and responses) need the token."));
      return;
    }
    try {
      into.replaceChildren(samplesSection(await api("samples", { project: where.project, experiment_name: where.experiment, step: where.step })));
    } catch (err) {
      if (err.status === 401 && !REPORT) into.replaceChildren(el("p", { class: "error", text: "The token was refused." }), tokenBox("The samples need the token."));
      else into.replaceChildren(el("p", { class: "muted", text: err.message }));
    }
  }
  async function viewStep(where) {
    const { project, experiment } = where;
    crumbs(el("a", { href: REPORT ? "#/" : "/", text: "runs" }), el("a", { href: runHref(project, experiment), text: `${project} / ${experiment}` }), el("span", { text: `step ${where.step}` }));
    page.step = { lanes: [], slowest: null };
    // the run's answer only says whether samples need the token: asked alongside, awaited after the step is drawn
    const run = api("run", { project, experiment_name: experiment }).catch(() => null);
    const step = await api("step", { project, experiment_name: experiment, step: where.step });
    page.dataAt = performance.now();
    page.step.slowest = step.slowest_replica ? step.slowest_replica.lane : null;
    const lanes = el("div", { "data-testid": "lanes" });
    const samples = el("div", {}, el("p", { class: "muted", text: "loading samples…" }));
    const slow = step.slowest_replica;
    show(
      el("h1", {}, `Step ${step.step} `, step.validation ? el("span", { class: "badge info", text: "validation" }) : null,
        el("span", { class: "muted", text: ` ${experiment} · ${fmt(step.duration_s)} s · ${new Date(step.start * 1000).toLocaleString()}` })),
      el("div", { class: "controls" },
        step.step > 1 ? el("a", { href: stepHref(project, experiment, step.step - 1), text: `← step ${step.step - 1}` }) : null,
        el("a", { href: stepHref(project, experiment, step.step + 1), text: `step ${step.step + 1} →` })),
      el("h2", { text: "Swimlane: the trainer's phases and each replica's generate calls" }),
      el("p", { class: "summary-line", "data-testid": "slowest" }, slow ? ["slowest replica: ", el("strong", { text: slow.lane }), slow.node ? ` on node ${slow.node}` : " (node unknown)"] : "no replica's generate calls came with this step"),
      el("p", { class: "summary-line" }, step.long_tail_s !== null && step.long_tail_s !== undefined ? `long tail: ${fmt(step.long_tail_s)} s (the step waited this long after the median replica's last generate call)` : "",
        step.idle_share !== null && step.idle_share !== undefined ? ` · the trainer idle ${Math.round(step.idle_share * 100)} % of the step` : ""),
      lanes,
      el("h2", { text: "Ranks: verl's profiler traces of this step (work blue, waiting in collectives orange)" }),
      rankLanes(step.profile),
      el("h2", { text: "What moved with the step's time" }),
      movedWith(step.moved_with),
      el("h2", { text: "GPU faults and throttling of its nodes" }),
      hardwareTable(step.hardware || []),
      el("h2", { text: `Findings that cover step ${step.step} (${(step.findings || []).length})` }),
      (step.findings || []).length ? step.findings.map((f) => findingCard(f, project, experiment)) : el("p", { class: "muted", text: "None." }),
      el("h2", { text: "Profile a coming step" }),
      el("pre", { "data-testid": "profile", text: step.profile_command }),
      el("h2", { text: "Samples" }),
      samples
    );
    lanes.append(swimlane(step, lanes.clientWidth || 1000));
    // the step is drawn (data-ready); its samples follow (data-samples)
    loadSamples(where, run, samples).finally(() => document.body.setAttribute("data-samples", "shown"));
  }

  // -- start --------------------------------------------------------------------------------
  async function start() {
    const where = route();
    page.view = where.view;
    page.ready = false;
    document.body.removeAttribute("data-ready");
    document.body.removeAttribute("data-samples");
    showTokenState();
    try {
      if (where.view === "runs") await viewRuns();
      else if (where.view === "run") await viewRun(where);
      else await viewStep(where);
      document.title = `rl-insight · ${where.view === "runs" ? "runs" : where.experiment}${where.view === "step" ? " · step " + where.step : ""}`;
    } catch (err) {
      show(el("p", { class: "error", "data-testid": "error", text: `${err.status ? err.status + ": " : ""}${err.message}` }));
    }
    page.ready = true;
    page.readyAt = performance.now(); // ms since navigation start: what benchmarks/bench_explorer_page.py reads
    document.body.setAttribute("data-ready", where.view);
  }
  if (REPORT) window.addEventListener("hashchange", start);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
