// rollout monitor: live per-step plots (uPlot) on a run's page, eval plots, control errors.
// Data comes from the JSON API, page by page; new steps are fetched every few seconds.
"use strict";

const PLOTS = [
  { title: "reward", keys: ["reward"] },
  { title: "loss", keys: ["loss"] },
  { title: "importance ratio", keys: ["is/ratio_mean", "is/ratio_min", "is/ratio_max"] },
  { title: "importance: KL (k3), truncated / masked", keys: ["is/kl_k3", "is/truncated_frac", "is/masked_frac"] },
  { title: "lag (versions behind)", keys: ["lag_mean", "lag_max"] },
  { title: "episodes/s", keys: ["episodes_per_s"] },
  { title: "tokens/s (trained)", keys: ["tokens_per_s"] },
];
const COLORS = ["#3056d3", "#12b76a", "#f04438", "#f79009", "#9e77ed"];

function value(step, key) {
  const v = key in step ? step[key] : step.metrics[key];
  return typeof v === "number" && isFinite(v) ? v : null;
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(url + ": " + response.status);
  return response.json();
}

function makePlot(el, spec, width) {
  const div = document.createElement("div");
  div.className = "plot";
  div.dataset.plot = spec.title;
  el.appendChild(div);
  const opts = {
    title: spec.title, width: width, height: 200,
    scales: { x: { time: false } },
    series: [{ label: "step" }].concat(spec.keys.map((k, i) => ({
      label: k, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
      points: { show: false },
    }))),
  };
  return new uPlot(opts, [[]].concat(spec.keys.map(() => [])), div);
}

async function runPlots(el) {
  const url = el.dataset.steps;
  const width = Math.max(Math.min(el.clientWidth / 2 - 20, 640), 380);
  const charts = PLOTS.map((spec) => ({ spec, chart: makePlot(el, spec, width) }));
  const data = charts.map(({ spec }) => [[]].concat(spec.keys.map(() => [])));
  let after = -1;
  async function pull() {
    let fetched = 0;
    for (;;) {
      const page = await getJSON(url + "?after=" + after + "&limit=5000");
      for (const step of page.items) {
        if (step.step === 0) { after = 0; continue; }  // the warm-up checkpoint: no RL metrics
        charts.forEach(({ spec }, c) => {
          data[c][0].push(step.step);
          spec.keys.forEach((k, i) => data[c][i + 1].push(value(step, k)));
        });
        after = step.step;
        fetched += 1;
      }
      if (page.next === null) break;
    }
    if (fetched) charts.forEach(({ chart }, c) => chart.setData(data[c]));
    el.dataset.steps_loaded = String(data[0][0].length);
  }
  await pull();
  setInterval(() => { if (!document.hidden) pull().catch(console.error); }, 3000);
}

async function evalPlot(el) {
  const page = await getJSON(el.dataset.evals);
  const label = (r) => r.suite + "@" + r.suite_version + " · " + r.environment;
  const suites = [...new Set(page.items.map(label))];
  const versions = [...new Set(page.items.map((r) => r.version))].sort((a, b) => a - b);
  const rows = suites.map((s) => versions.map((v) => {
    const hit = page.items.find((r) => r.version === v && label(r) === s);
    return hit ? hit.score : null;
  }));
  const div = document.createElement("div");
  div.className = "plot";
  el.appendChild(div);
  new uPlot({
    title: "eval score per checkpoint (version -1: base model)", width: 640, height: 240, scales: { x: { time: false } },
    series: [{ label: "version" }].concat(suites.map((s, i) => ({
      label: s, stroke: COLORS[i % COLORS.length], spanGaps: true,
    }))),
  }, [versions].concat(rows), div);
}

document.addEventListener("DOMContentLoaded", () => {
  const plots = document.querySelector("[data-steps]");
  if (plots) runPlots(plots).catch(console.error);
  const evals = document.querySelector("[data-evals]");
  if (evals) evalPlot(evals).catch(console.error);
});

// Show a refused control (for example a bad max_lag) instead of failing silently.
document.addEventListener("htmx:responseError", (event) => {
  const line = document.getElementById("error-line");
  if (!line) return;
  let message = event.detail.xhr.responseText;
  try { message = JSON.parse(message).error; } catch (e) { /* plain text */ }
  line.textContent = message;
});
document.addEventListener("htmx:afterRequest", (event) => {
  const line = document.getElementById("error-line");
  if (line && event.detail.successful && event.detail.requestConfig.verb === "post") line.textContent = "";
});
