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
  const INCIDENT = { critical: "rgba(198,40,40,0.85)", warning: "rgba(224,138,0,0.85)", info: "rgba(47,111,202,0.6)" };
  const page = (window.RL_INSIGHT_PAGE = { view: null, ready: false, curves: {}, bands: [], marks: [], incidents: [], step: null, panels: {} });

  // -- small helpers -----------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name === "color") node.style.background = value; // CSSOM: the policy allows no style attribute
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
    const values = spark ? spark.values : [];
    const canvas = el("canvas", { class: "sparkline", width: 120, height: 24, title: spark ? spark.key : "", "data-points": values.filter((v) => v !== null).length });
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
      if (v === null || v === undefined) return v; // a NaN stays a break, a step not logged stays skipped
      state = state === null ? 0 : state;
      state = alpha * state + (1 - alpha) * v;
      weight = alpha * weight + (1 - alpha);
      return state / weight; // debiased, as TensorBoard's
    });
  }
  // the own run's steps drawn where its x lies (xOf: step -> x; by samples seen, step x sequences a step)
  function bandsPlugin(bands, marks, incidents, xOf) {
    return {
      hooks: {
        drawClear: [
          (u) => {
            const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
            ctx.save();
            for (const band of bands) {
              const x0 = u.valToPos(xOf(band.first_step - 0.5), "x", true), x1 = u.valToPos(xOf(band.last_step + 0.5), "x", true);
              ctx.fillStyle = SEVERITY[band.severity] || SEVERITY.info;
              ctx.fillRect(Math.min(x0, x1), top, Math.max(Math.abs(x1 - x0), 2), height);
            }
            // an incident: a strip along the top of every panel, over all the steps of its findings
            for (const incident of incidents || []) {
              const x0 = u.valToPos(xOf(incident.first_step - 0.5), "x", true), x1 = u.valToPos(xOf(incident.last_step + 0.5), "x", true);
              ctx.fillStyle = INCIDENT[incident.severity] || INCIDENT.info;
              ctx.fillRect(Math.min(x0, x1), top, Math.max(Math.abs(x1 - x0), 2), Math.round(6 * devicePixelRatio));
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
              const x = Math.round(u.valToPos(xOf(mark.step), "x", true));
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
  // a panel's keys told apart by their dash (a run is told by its colour: see runColor)
  const DASHES = [undefined, [6, 4], [2, 3], [10, 3, 2, 3]];
  const runColor = (r) => COLORS[r % COLORS.length];
  // one run alone: a colour per key, as a reader expects; two runs or more: a colour per run, a dash per key
  const lineStyle = (ctx, r, k) => (ctx.compared.length ? { stroke: runColor(r), dash: DASHES[k % DASHES.length] } : { stroke: COLORS[k % COLORS.length], dash: undefined });
  // the x of every run of the panel (its step, or by samples seen its step x its sequences a step: factor),
  // and each series on them: undefined where a key was not logged at that x (the line goes on), null where
  // the trainer logged NaN or an infinity (the line breaks there)
  function aligned(runs, keys, factor) {
    const steps = [...new Set(runs.flatMap((run) => run.curves.steps.map((s) => s * factor(run))))].sort((a, b) => a - b);
    const at = new Map(steps.map((s, i) => [s, i]));
    const columns = [];
    for (const run of runs)
      for (const k of keys) {
        const column = new Array(steps.length).fill(undefined), values = run.curves.series[k] || [], f = factor(run);
        const bad = new Set((run.curves.nonfinite || {})[k] || []);
        run.curves.steps.forEach((s, i) => (column[at.get(s * f)] = bad.has(i) ? null : values[i] === null ? undefined : values[i]));
        columns.push(column);
      }
    return { steps, columns };
  }
  // by step, or by samples seen (?x=samples) where every run drawn knows its sequences a step
  function xAxis(run, compared, wanted) {
    const runs = [{ experiment: run.experiment, run }, ...compared];
    const missing = runs.filter((r) => !(r.run.samples_seen || {}).per_step);
    const by = wanted === "samples" && !missing.length ? "samples" : "step";
    const per = Object.fromEntries(runs.map((r) => [r.experiment, (r.run.samples_seen || {}).per_step || null]));
    const why = missing.map((r) => `${r.experiment}: ${(r.run.samples_seen || {}).from || "no batch size known"}`).join("; ");
    return { by, per, why, factor: (r) => (by === "samples" ? per[r.experiment] : 1), label: by === "samples" ? "samples seen" : "step" };
  }
  function thresholdsPlugin(lines) {
    return { hooks: { draw: [(u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.font = `${Math.round(10 * devicePixelRatio)}px sans-serif`;
      for (const line of lines) {
        const y = Math.round(u.valToPos(line.value, "y", true));
        ctx.strokeStyle = ctx.fillStyle = line.severity === "critical" ? "#c62828" : "#e08a00";
        ctx.setLineDash([5, 4]);
        ctx.beginPath();
        ctx.moveTo(u.bbox.left, y);
        ctx.lineTo(u.bbox.left + u.bbox.width, y);
        ctx.stroke();
        ctx.textAlign = "right";
        ctx.fillText(`${line.severity} ${line.value}`, u.bbox.left + u.bbox.width - 4 * devicePixelRatio, y - 3 * devicePixelRatio);
      }
      ctx.restore();
    }] } };
  }
  // y ticks with as many decimals as their spacing needs (0.9996 0.9998 1, not 1 1 1)
  function yTicks(splits) {
    const gap = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : 1;
    const digits = Math.min(12, Math.max(0, -Math.floor(Math.log10(gap || 1)) + 1));
    return splits.map((v) => (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-4) ? v.toExponential(2) : String(+v.toFixed(digits))));
  }
  const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 1e10, 1e11, 1e12];
  function chartPanel(ctx, index, panelSpec) {
    const { title, keys } = panelSpec, lines = panelSpec.thresholds || [];
    const holder = el("div", { class: "chart" });
    const note = el("div", { class: "note" });
    const readout = el("div", { class: "readout", "data-testid": "readout" });
    const runs = [{ experiment: ctx.experiment, curves: ctx.curves }, ...ctx.compared].filter((run) => run.curves);
    const present = keys.filter((k) => runs.some((run) => k in run.curves.series));
    // the panel's keys, each with its dash or colour: one row, the runs' colours are the page's legend
    const keyLegend = el("div", { class: "key-legend" }, present.map((k, i) => {
      const style = lineStyle(ctx, 0, i);
      return el("span", { class: "key", "data-key": k }, el("i", { class: `swatch ${ctx.compared.length ? "dash-" + (i % DASHES.length) : ""}`, color: ctx.compared.length ? null : style.stroke }), k);
    }));
    const panel = el("section", { class: "panel", "data-testid": "panel", "data-title": title }, el("h3", { text: title }), keyLegend, holder, readout, note);
    const counts = {};
    const own = runs[0].experiment === ctx.experiment ? runs[0] : null;
    if (own) for (const k of present) if (own.curves.series[k]) counts[k] = own.curves.series[k].filter((v) => v !== null).length;
    for (const run of runs)
      for (const k of present) {
        const bad = (run.curves.nonfinite || {})[k];
        if (bad && bad.length) note.append(el("div", { text: `${run.experiment} · ${k}: ${bad.length} non-finite value(s): the line breaks there` }));
      }
    const bands = ctx.findings.filter((f) => f.panel === index);
    for (const band of bands) page.bands.push({ panel: title, key: band.key, detector: band.detector, first_step: band.first_step, last_step: band.last_step, severity: band.severity });
    Object.assign(page.curves, counts);
    panel.setAttribute("data-points", JSON.stringify(counts));
    panel.setAttribute("data-bands", JSON.stringify(bands.map((b) => [b.first_step, b.last_step])));
    if (!present.length) {
      holder.append(el("p", { class: "muted", text: "not logged in this run" }));
      return panel;
    }
    const { steps, columns } = aligned(runs, present, ctx.x.factor);
    const series = [{ label: ctx.x.label }], data = [steps], drawn = [];
    runs.forEach((run, r) => present.forEach((k, i) => {
      // a baseline imported from a file: dashed, and named so in the readout
      const imported = !!(run.run && run.run.imported), name = imported ? `${run.experiment} (imported)` : run.experiment;
      const raw = columns[r * present.length + i], style = lineStyle(ctx, r, imported ? i + 1 : i);
      if (ctx.alpha) { // the raw values faint behind the smoothed line: not in any legend
        series.push({ label: `${name} · ${k} (raw)`, stroke: style.stroke + "40", width: 1, dash: style.dash, points: { show: false } });
        data.push(raw);
      }
      series.push({ label: `${name} · ${k}`, stroke: style.stroke, width: 1.6, dash: style.dash, points: { show: false } });
      data.push(ctx.alpha ? ema(raw, ctx.alpha) : raw);
      drawn.push({ run: run.experiment, key: k, color: style.stroke, index: data.length - 1, imported, dash: style.dash || null, factor: ctx.x.factor(run) });
    }));
    const info = (page.panels[title] = { keys: present, runs: Object.fromEntries(runs.map((run, r) => [run.experiment, lineStyle(ctx, r, 0).stroke])),
      colors: drawn.map((d) => [d.run, d.key, d.color]), dashes: drawn.map((d) => [d.run, d.key, d.dash, d.imported]), thresholds: lines.map((l) => l.value), xticks: [], x: ctx.x.by, xs: steps, yrange: null });
    const tops = lines.map((l) => l.value);
    ctx.pending.push(() => {
      const width = (ctx.width = ctx.width || Math.max(300, holder.clientWidth || 500)); // one layout read
      const options = {
        width, height: 200, series, legend: { show: false },
        scales: { x: { time: false }, y: tops.length ? { range: (u, lo, hi) => { const top = Math.max(hi ?? 0, ...tops) * 1.15; info.yrange = [Math.min(lo ?? 0, 0), top]; return info.yrange; } } : {} },
        axes: [{ incrs: STEP_INCRS, values: (u, splits) => ((info.xticks = splits), splits.map((s) => String(s))) }, { size: 60, values: (u, splits) => yTicks(splits) }],
        plugins: [bandsPlugin(bands, ctx.marks, ctx.incidents, (s) => s * ctx.x.factor(runs[0])), thresholdsPlugin(lines)],
        cursor: { y: false, drag: { x: true, y: false }, sync: { key: ctx.syncKey, setSeries: false }, points: { size: 6 } },
        hooks: { setCursor: [(u) => showValues(u, readout, drawn)] },
      };
      const chart = new uPlot(options, data, holder);
      onPointClick(chart, ctx);
      ctx.charts.push(chart);
      ctx.byPanel[index] = chart;
      ctx.byTitle[title] = chart;
    });
    return panel;
  }
  // the values at the cursor's step, every run's, under the panel (as W&B's hover box)
  function showValues(u, readout, drawn) {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined) return void readout.replaceChildren(el("span", { class: "muted", text: "hover a curve for its values" }));
    // a line per run: its colour, then each key's value (the keys' common prefix left out)
    const keys = [...new Set(drawn.map((d) => d.key))];
    const cut = keys.length > 1 ? commonPrefix(keys).lastIndexOf("/") + 1 : 0;
    const runs = [...new Set(drawn.map((d) => d.run))];
    const x = u.data[0][idx], bySamples = drawn.some((d) => d.factor !== 1);
    readout.replaceChildren(el("strong", { text: bySamples ? `${x} samples seen` : `step ${x}` }), ...runs.map((run) => {
      const mine = drawn.filter((d) => d.run === run), at = x / mine[0].factor;
      const name = `${mine[0].imported ? `${run} (imported)` : run}${bySamples && Number.isInteger(at) ? ` · step ${at}` : ""}`;
      return el("div", { class: "value", "data-run": run }, el("i", { class: "swatch", color: mine[0].color }), el("span", { text: name }),
        ...mine.map((d) => { const v = u.data[d.index][idx]; return el("span", {}, `${d.key.slice(cut)} `, el("b", { text: v === null ? "NaN" : v === undefined ? "–" : fmt(v) })); }));
    }));
  }
  function commonPrefix(texts) {
    let prefix = texts[0];
    for (const t of texts) while (!t.startsWith(prefix)) prefix = prefix.slice(0, -1);
    return prefix;
  }
  // one legend for the page: a row per run (its colour), not a row per run x key x raw/smoothed
  function runLegend(ctx) {
    if (!ctx.compared.length) return null;
    const runs = [{ experiment: ctx.experiment }, ...ctx.compared];
    return el("div", { class: "run-legend", "data-testid": "legend" }, runs.map((c, r) =>
      el("span", { class: "run", "data-run": c.experiment }, el("i", { class: "swatch", color: runColor(r) }), c.experiment,
        c.run && c.run.imported ? el("span", { class: "badge imported", text: "imported: dashed" }) : null)),
      el("span", { class: "muted", text: "line style: the panel's keys (named above each panel)" }));
  }
  function onPointClick(chart, ctx) {
    let down = null;
    chart.over.addEventListener("mousedown", (e) => (down = [e.clientX, e.clientY]));
    chart.over.addEventListener("click", (e) => {
      if (down && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4) return; // a drag zooms
      const idx = chart.cursor.idx;
      if (idx === null || idx === undefined) return;
      const step = Math.round(chart.data[0][idx] / ctx.x.factor({ experiment: ctx.experiment }));
      location.href = stepHref(ctx.project, ctx.experiment, step);
    });
  }
  // findings of one cause: the headline, the signals in the order they moved, one recommendation, its parts
  function incidentCard(incident, findings, project, experiment) {
    const chain = (incident.chain || []).map((link) => `${link.signal} (${link.first_step})`).join(" → ");
    const parts = (incident.findings || []).map((i) => findings[i]).filter(Boolean);
    return el("article", { class: `finding incident ${incident.severity}`, "data-testid": "incident", "data-kind": incident.kind },
      el("h3", {}, el("span", { class: `badge ${incident.severity}`, text: incident.severity }), incident.headline),
      el("div", {}, "steps ", el("a", { href: stepHref(project, experiment, incident.first_step), text: incident.first_step }),
        incident.last_step !== incident.first_step ? ["–", el("a", { href: stepHref(project, experiment, incident.last_step), text: incident.last_step })] : null),
      parts.length > 1 ? el("p", { "data-testid": "incident-chain" }, "in the order it moved: ", chain) : null,
      el("p", { "data-testid": "incident-recommendation" }, el("strong", { text: "recommendation: " }), incident.recommendation),
      el("p", { class: "muted", text: `its findings: ${parts.map((f) => f.title).join(", ")}` }));
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
  // a number as Python prints it (1e-06, not 0.000001): the CLI's runs diff shows the same text
  function pyNumber(v) {
    const e = v === 0 || !Number.isFinite(v) ? 0 : Math.floor(Math.log10(Math.abs(v)));
    if (Number.isInteger(v) && e < 16) return String(v);
    return e < -4 || e >= 16 ? v.toExponential().replace(/e([+-])(\d)$/, "e$10$2") : String(v);
  }
  const shownValue = (v) => (v === null || v === undefined ? "(absent)" : typeof v === "string" ? v : typeof v === "number" ? pyNumber(v) : JSON.stringify(v));
  function cardSection(run, compared) {
    const section = el("section", { "data-testid": "run-card" }, el("h2", { text: "Run card" }));
    const card = run.card && run.card.card; // the server keeps {card, received}
    if (!card) {
      // a token kept in this tab, and still no card: the server refused it (say so, not only ask again)
      if (run.card_needs_token && token()) section.append(el("p", { class: "error", "data-testid": "token-refused", text: "The token kept in this tab was refused by the server: give the right one (rl-insight server status --secrets shows it)." }));
      section.append(run.card_needs_token ? tokenBox("The run card (config, command, paths) needs the token.") : el("p", { class: "muted", text: "This run sent no card." }));
      return section;
    }
    // the keys in which the cards differ, as `rl-insight runs diff P/THIS P/OTHER` lists them (the server's diff)
    for (const other of compared) {
      const diff = other.run && other.run.card_diff;
      if (!diff) {
        section.append(el("p", { class: "muted", text: `${other.experiment} sent no card: nothing to compare` }));
        continue;
      }
      const rows = diff.differences;
      section.append(
        el("h3", { text: `config that differs from ${other.experiment} (${rows.length} key${rows.length === 1 ? "" : "s"})` }),
        rows.length ? el("table", { "data-testid": "config-diff", "data-with": other.experiment },
          el("thead", {}, el("tr", {}, el("th", { text: "key" }), el("th", { text: diff.first }), el("th", { text: diff.second }))),
          el("tbody", {}, rows.map(([k, a, b]) => el("tr", { "data-key": k }, el("td", {}, el("code", { text: k })), el("td", { text: shownValue(a) }), el("td", { text: shownValue(b) })))))
          : el("p", { class: "muted", text: "started alike: no key differs" }),
        diff.by_nature ? el("p", { class: "muted", text: `(${diff.by_nature} more differ by nature: they hold the runs' own names, or copy a key above)` }) : null
      );
    }
    const { config, ...rest } = card;
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
    // a report shows the runs it was written with (--compare) until a box is unticked
    const picked = REPORT && !params.has("compare") ? Object.keys(REPORT.compare || {}).join(",") : params.get("compare") || "";
    const compareNames = picked.split(",").filter((e) => e && (run.others || []).includes(e) && e !== experiment);
    const [curves, ...compared] = await Promise.all([
      curvesOf(project, experiment, wanted),
      ...compareNames.map(async (e) => {
        const other = await api("run", { project, experiment_name: e, diff_from: experiment });
        const keys = wanted.filter((k) => other.keys.includes(k));
        return { experiment: e, run: other, curves: await curvesOf(project, e, keys) };
      }),
    ]);
    page.dataAt = performance.now(); // the answers are in: from here on it is the page's own drawing
    const alpha = Math.min(Math.max(+(params.get("smooth") || 0), 0), 0.99);
    const incidents = run.incidents || [];
    page.incidents = incidents.map((i) => ({ kind: i.kind, severity: i.severity, first_step: i.first_step, last_step: i.last_step, chain: (i.chain || []).map((l) => l.signal) }));
    const x = xAxis(run, compared, params.get("x"));
    page.xAxis = { by: x.by, per_step: x.per, why: x.why };
    const ctx = { project, experiment, curves, compared, alpha, x, findings, incidents: incidents.filter((i) => i.severity !== "info"), marks: run.marks || [], pending: [], charts: [], byPanel: {}, byTitle: {}, syncKey: `run-${Math.random()}` };
    // where on the screen panel i draws step n (what a click there opens): for people's scripts and the tests
    page.pointAt = (i, n) => {
      const chart = ctx.byPanel[i], box = chart.over.getBoundingClientRect();
      return { x: box.left + chart.valToPos(n * ctx.x.factor({ experiment }), "x"), y: box.top + box.height / 2 };
    };
    page.marks = ctx.marks.map((m) => m.step);
    // the steps where the line of this run's key breaks (a NaN the trainer logged), in the panel titled so
    page.gapsOf = (title, key) => {
      const chart = ctx.byTitle[title], at = chart.series.findIndex((s) => s.label === `${experiment} · ${key}`);
      return chart.data[0].filter((_, j) => chart.data[at][j] === null).map((s) => s / ctx.x.factor({ experiment }));
    };
    page.cursorSteps = () => ctx.charts.map((c) => (c.cursor.idx === null || c.cursor.idx === undefined ? null : c.data[0][c.cursor.idx]));
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
        onchange: (ev) => setParam("compare", (ev.target.checked ? [...compareNames, e] : compareNames.filter((x) => x !== e)).join(",")) }), e,
      (run.others_imported || []).includes(e) ? el("span", { class: "badge imported", text: "imported" }) : null));
    // the x axis: by step, or by samples seen when the runs' batch sizes differ (each run's from its card or its logged tokens)
    const xPick = el("select", { "aria-label": "x axis", disabled: !compared.length,
      onchange: (ev) => (REPORT ? ((ctx.x = xAxis(run, compared, ev.target.value)), (page.xAxis.by = ctx.x.by), redraw(ctx.alpha)) : setParam("x", ev.target.value === "samples" ? "samples" : "")) },
      el("option", { value: "step", text: "by step", selected: x.by === "step" }),
      el("option", { value: "samples", text: "by samples seen", selected: x.by === "samples", disabled: !!x.why }));
    const xNote = compared.length ? el("span", { class: "muted x-note", "data-testid": "x-note",
      text: x.why ? `by samples seen needs each run's batch size (${x.why})` : Object.entries(x.per).map(([e, n]) => `${e}: ${n} a step`).join(", ") }) : null;
    const grid = el("div", { class: "panels" });
    const redraw = (a) => {
      ctx.alpha = a;
      ctx.width = 0;
      for (const chart of ctx.charts.splice(0)) chart.destroy();
      page.bands = [];
      page.panels = {};
      grid.replaceChildren(...panels.map((p, i) => chartPanel(ctx, i, p)));
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
      run.imported ? el("p", { class: "muted imported-from", text: `imported from ${run.imported.source} (${run.imported.format}), times ${run.imported.times}: a finished run, never watched live (no stall, no alerts)` }) : null,
      el("div", { class: "controls" }, el("label", {}, "smoothing (EMA)", smooth, smoothValue),
        compareBoxes.length ? el("span", {}, "compare: ", compareBoxes) : null,
        compared.length ? el("label", {}, "x ", xPick, xNote) : null,
        el("span", { class: "muted", text: "click a point to open its step; drag to zoom, double-click to reset" })),
      runLegend(ctx),
      grid,
      el("h2", { text: `Incidents (${incidents.length})` }),
      incidents.length ? incidents.map((i) => incidentCard(i, findings, project, experiment)) : el("p", { class: "muted", text: "No incident: the detectors saw nothing wrong." }),
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
  function rankLanes(profile, analyze) {
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
          el("td", { class: "gpu", "data-testid": "rank-gpu", text: gpuCell(r) }),
          el("td", { class: "rank-bar" }, bar("work", work / longest), bar("wait", r.waiting_s / longest)));
      });
      const spread = phase.spread !== undefined && phase.spread !== null ? ` · spread ${fmt(phase.spread)}x` : "";
      const some = phase.ranks_total ? ` · the busiest ${phase.ranks.length} of ${phase.ranks_total} ranks` : "";
      const by = phase.slowest && phase.judged_by ? ` (by its ${phase.judged_by})` : "";
      box.append(el("h3", { text: `${phase.phase}${phase.slowest ? " · slowest rank " + phase.slowest + by : " · balanced"}${spread}${some}` }),
        el("table", { class: "ranks" }, ...rows));
    }
    if (analyze) box.append(el("p", { class: "muted", text: "The whole analysis of the step (its kernels, memory and the GPU lanes of every rank), where its traces are:" }),
      el("pre", { "data-testid": "profile-analyze", text: analyze }));
    return box;
  }
  // a rank's GPU in a phase: its verdict, how busy the GPU was, its kernels and peak memory (CUDA traces)
  function gpuCell(r) {
    if (!r.verdict) return "no GPU events";
    const share = (s) => `${Math.round((s / Math.max(r.duration_s, 1e-9)) * 100)} %`;
    const memory = r.peak_allocated_bytes ? ` · peak ${fmt(r.peak_allocated_bytes / 2 ** 30)} GiB` : "";
    return `${r.verdict} · GPU busy ${share(r.gpu_busy_s)}, host ${share(r.gpu_host_s)} · ${r.kernels} kernels${memory}`;
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

  // every phase's colour and its time in the step: a bar too short for its name is named here (and on hover)
  function phaseLegend(step) {
    const total = {};
    for (const lane of step.lanes) for (const span of lane.spans) total[span.name] = (total[span.name] || 0) + (span.end - span.start);
    const names = Object.keys(total).sort((a, b) => total[b] - total[a]);
    page.step.legend = names;
    return el("div", { class: "phase-legend", "data-testid": "phase-legend" }, names.map((name) =>
      el("span", { class: "phase", "data-name": name }, el("i", { class: "box", color: colorOf(name) }), `${name} ${fmt(total[name], 3)} s`)));
  }
  function hardwareTable(hardware) {
    if (!hardware.length) return el("p", { class: "muted", "data-testid": "hardware", text: "No GPU fault or throttling on its nodes during the step." });
    const pairs = (o) => Object.entries(o || {}).filter(([, v]) => v).map(([k, v]) => `${k}=${fmt(v)}`).join(", ") || "–";
    return el("table", { "data-testid": "hardware" }, el("thead", {}, el("tr", {}, ["node", "GPU", "faults", "throttling"].map((h) => el("th", { text: h })))),
      el("tbody", {}, hardware.map((h) => el("tr", { "data-node": h.node }, el("td", { text: h.node }), el("td", { text: h.gpu }),
        // in nvidia-smi's words (SW Power Cap, XID error 79); the raw figures on hover
        el("td", { text: (h.fault_words || []).join(", ") || (h.fault_words ? "–" : pairs(h.faults)), title: pairs(h.faults) }),
        el("td", { "data-testid": "throttle", text: (h.throttle_reasons || []).join(", ") || (h.throttle_reasons ? "–" : pairs(h.throttle)), title: pairs(h.throttle) })))));
  }
  function samplesSection(answer) {
    const section = el("section", { "data-testid": "samples" });
    const text = (t) => el("pre", { text: t ?? "" });
    if (answer.samples.length)
      section.append(el("table", { class: "samples" }, el("thead", {}, el("tr", {}, ["kind", "rank", "score", "mismatch", "length", "source", "prompt", "response"].map((h) => el("th", { text: h })))),
        el("tbody", {}, answer.samples.map((s) => el("tr", { "data-testid": "sample", "data-kind": s.kind }, el("td", { text: s.kind }), el("td", { text: s.rank }), el("td", { text: fmt(s.score) }),
          // the train/inference log-prob mismatch the rollout was picked for (mean |p_rollout - p_actor|)
          el("td", { "data-testid": "mismatch", text: s.mismatch === null || s.mismatch === undefined ? "–" : fmt(s.mismatch) }),
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
  // a report file holds the pages of its findings' steps only: a click elsewhere says so, with those
  function showMissingStep(step) {
    const held = Object.keys(REPORT.steps || {}).map(Number).sort((a, b) => a - b);
    show(el("h1", { text: `Step ${step}` }),
      el("p", { "data-testid": "no-step-page" }, `This report holds no page of step ${step}: it holds the pages of its findings' steps`,
        held.length ? [" (", held.map((n, i) => [i ? ", " : "", el("a", { href: `#/steps/${n}`, text: n })]), ")."] : " (none: no finding).",
        " The server's explorer shows every step."),
      el("p", {}, el("a", { href: "#/", text: "← back to the run" })));
  }
  async function viewStep(where) {
    const { project, experiment } = where;
    crumbs(el("a", { href: REPORT ? "#/" : "/", text: "runs" }), el("a", { href: runHref(project, experiment), text: `${project} / ${experiment}` }), el("span", { text: `step ${where.step}` }));
    page.step = { lanes: [], slowest: null };
    if (REPORT && !(REPORT.steps || {})[where.step]) return showMissingStep(where.step);
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
      rankLanes(step.profile, step.profile_analyze),
      el("h2", { text: "What moved with the step's time" }),
      movedWith(step.moved_with),
      el("h2", { text: "GPU faults and throttling of its nodes" }),
      hardwareTable(step.hardware || []),
      el("h2", { text: `Findings that cover step ${step.step} (${(step.findings || []).length})` }),
      (step.findings || []).length ? step.findings.map((f) => findingCard(f, project, experiment)) : el("p", { class: "muted", text: "None." }),
      step.profile_command ? [el("h2", { text: "Profile a coming step" }), el("pre", { "data-testid": "profile", text: step.profile_command })]
        : el("p", { class: "muted", "data-testid": "profile", text: "The run has finished: it has no coming step to profile." }),
      el("h2", { text: "Samples" }),
      samples
    );
    lanes.append(swimlane(step, lanes.clientWidth || 1000), phaseLegend(step));
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
