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

// A y range at least 0.1% of the values wide: uPlot draws ticks by adding the increment to the
// minimum, which never ends when the range is below float precision (ratios of exactly 1 and
// 1 + 2e-16 on an on-policy step).
function yRange(u, min, max) {
  if (min == null || max == null) return [0, 1];
  const floor = Math.max(Math.abs(min), Math.abs(max)) * 1e-3 || 1e-3;
  const span = max - min;
  if (span < floor) return [(min + max) / 2 - floor, (min + max) / 2 + floor];
  return [min - span * 0.05, max + span * 0.05];
}

function xRange(u, min, max) {
  if (min == null || max == null) return [0, 1];
  return max - min < 1 ? [min - 1, max + 1] : [min, max];
}

function makePlot(el, title, labels) {
  const div = document.createElement("div");
  div.className = "plot";
  div.dataset.plot = title;
  el.appendChild(div);
  const opts = {
    title, width: Math.max(div.clientWidth - 14, 300), height: 200,
    scales: { x: { time: false, range: xRange }, y: { range: yRange } },
    series: [{ label: "step" }].concat(labels.map((label, i) => ({
      label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
    }))),
  };
  return new uPlot(opts, [[]].concat(labels.map(() => [])), div);
}

// A run with several policies (data-policies: their names) has a series per policy in each
// plot, labelled by the policy (and the key, where a plot has several); each policy's steps are
// read on their own (?policy=NAME), and a step that a policy has not taken yet is a gap.
async function runPlots(el) {
  const url = el.dataset.steps;
  const policies = el.dataset.policies ? el.dataset.policies.split(" ") : [""];
  const charts = PLOTS.map((spec) => {
    const lines = policies.flatMap((policy) => spec.keys.map((key) => ({
      policy, key,
      label: !policy ? key : spec.keys.length === 1 ? policy : policy + ": " + key,
    })));
    return { lines, chart: makePlot(el, spec.title, lines.map((l) => l.label)) };
  });
  const steps = new Map();  // step -> { policy: that policy's step }
  const after = new Map(policies.map((p) => [p, -1]));
  async function pullPolicy(policy) {
    let fetched = 0;
    const query = policy ? "&policy=" + encodeURIComponent(policy) : "";
    for (;;) {
      const page = await getJSON(url + "?after=" + after.get(policy) + "&limit=5000" + query);
      for (const step of page.items) {
        if (step.step <= after.get(policy)) continue;  // a slow answer must not count twice
        after.set(policy, step.step);
        if (step.step === 0) continue;  // the warm-up checkpoint: no RL metrics
        if (!steps.has(step.step)) steps.set(step.step, {});
        steps.get(step.step)[policy] = step;
        fetched += 1;
      }
      if (page.next === null) break;
    }
    return fetched;
  }
  async function pull() {
    let fetched = 0;
    for (const policy of policies) fetched += await pullPolicy(policy);
    // x must grow strictly, or uPlot loops forever: the steps, sorted.
    const xs = [...steps.keys()].sort((a, b) => a - b);
    if (fetched) {
      charts.forEach(({ lines, chart }) => chart.setData([xs].concat(lines.map((l) => xs.map((x) => {
        const step = steps.get(x)[l.policy];
        return step === undefined ? null : value(step, l.key);
      })))));
    }
    el.dataset.steps_loaded = String(xs.length);
  }
  await pull();
  let busy = false;  // one pull at a time: a slow answer must not be appended twice
  setInterval(() => {
    if (busy || document.hidden) return;
    busy = true;
    pull().catch(console.error).finally(() => { busy = false; });
  }, 3000);
}

async function evalPlot(el) {
  const page = await getJSON(el.dataset.evals);
  const label = (r) => r.suite + "@" + r.suite_version + " · " + r.environment +
    (r.policy && r.policy !== "main" ? " · " + r.policy : "");
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
    title: "eval score per checkpoint (version -1: base model)",
    width: Math.max(div.clientWidth - 14, 300), height: 240,
    scales: { x: { time: false, range: xRange }, y: { range: yRange } },
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
