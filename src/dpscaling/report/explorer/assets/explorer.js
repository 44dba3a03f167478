// The explorer page: every number comes from the grid of answers dpscaling wrote into this page
// (`dpscaling explore`, one `ScalingLaw.query` per node); nothing is computed from the law here.
"use strict";

(async function () {
  const encoded = document.getElementById("explorer-data").textContent.trim();
  const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const data = JSON.parse(await new Response(stream).text());
  const axes = data.axes;
  const order = axes.order; // slowest first; compute fastest
  const sizes = order.map((name) => axes[name].length);
  const state = { privacy_unit: 0, seq_len: 0, epsilon: 0, data: 0, compute: 0 };

  // ------------------------------------------------------------------ formatting
  const int = (v) => Math.round(v).toLocaleString("en-US");
  const sig = (v, digits = 4) => (v === null || v === undefined ? "–" : Number(v.toPrecision(digits)).toString());
  const sci = (v) => (v === null || v === undefined ? "–" : v.toExponential(3).replace("e+", "e"));
  const axisValue = (name, value) => {
    if (name === "seq_len") return value === null ? "best S" : `S = ${value}`;
    if (name === "privacy_unit") return value;
    if (name === "epsilon") return `ε = ${sig(value, 4)}`;
    return sci(value);
  };
  const labels = {
    epsilon: "privacy budget ε", data: "data budget N (privacy units)", compute: "compute C (FLOPs)",
    seq_len: "sequence length S", privacy_unit: "privacy unit",
  };
  const unitOf = (at) => axes.privacy_unit[at.privacy_unit];
  // The query's data budget: N users, or the tokens of N sequences at the law's own length.
  const budgetOf = (at) => (unitOf(at) === "user"
    ? { flag: "--users", arg: "users", value: axes.data[at.data] }
    : { flag: "--tokens", arg: "tokens", value: axes.data[at.data] * data.primary_seq_len });

  function nodeIndex(at) {
    let index = 0;
    order.forEach((name, i) => { index = index * sizes[i] + at[name]; });
    return index;
  }
  const nodeAt = (at) => data.nodes[nodeIndex(at)];

  // ------------------------------------------------------------------ controls
  const controls = document.getElementById("controls");
  const snapped = document.getElementById("snapped");
  const sliders = {};
  const typed = {};
  const shown = {};
  for (const name of ["privacy_unit", "seq_len", "epsilon", "data", "compute"]) {
    if (axes[name].length < 2 && (name === "privacy_unit" || name === "seq_len")) continue;
    const label = document.createElement("label");
    label.id = `${name}-label`;
    label.textContent = labels[name];
    label.htmlFor = name;
    const numeric = name === "epsilon" || name === "data" || name === "compute";
    // Numeric axes are log-spaced sliders; the length and the privacy unit are choices.
    const slider = document.createElement(numeric ? "input" : "select");
    if (numeric) {
      Object.assign(slider, { type: "range", id: name, min: 0, max: axes[name].length - 1, step: 1 });
    } else {
      slider.id = name;
      axes[name].forEach((value, i) => slider.append(new Option(axisValue(name, value), String(i))));
    }
    const value = document.createElement("span");
    value.className = "grid-value";
    value.id = `${name}-shown`;
    const entry = document.createElement("input");
    Object.assign(entry, { type: numeric ? "number" : "text", id: `${name}-value`, step: "any", min: 0 });
    entry.title = "type any value: the page answers at the nearest grid point";
    if (!numeric) entry.hidden = true;
    controls.append(label, slider, value, numeric ? entry : document.createElement("span"));
    sliders[name] = slider;
    typed[name] = entry;
    shown[name] = value;
    slider.addEventListener(numeric ? "input" : "change", () => {
      state[name] = Number(slider.value); snapped.textContent = ""; update();
    });
    entry.addEventListener("change", () => snap(name, Number(entry.value)));
  }

  function nearest(name, value) {
    // Nearest grid value in log space (all numeric axes are log-spaced).
    let best = 0;
    axes[name].forEach((v, i) => {
      if (Math.abs(Math.log(v / value)) < Math.abs(Math.log(axes[name][best] / value))) best = i;
    });
    return best;
  }

  function snap(name, value) {
    if (!(value > 0)) return;
    state[name] = nearest(name, value);
    const grid = axes[name][state[name]];
    snapped.textContent = Math.abs(grid / value - 1) > 1e-9
      ? `Snapped ${labels[name]} ${sig(value, 6)} to the nearest grid point ${sig(grid, 6)}: the page answers only at ` +
        "its grid's points (no interpolation); for this exact budget run the command below."
      : "";
    update();
  }

  // ------------------------------------------------------------------ the answer
  const text = (id, value) => { const el = document.getElementById(id); el.textContent = value; return el; };

  function commandFor(at) {
    const unit = unitOf(at);
    const budget = budgetOf(at);
    const node = nodeAt(at);
    // Budgets in full (the shortest text that reads back as the same number): the command answers at
    // exactly this grid point.
    const parts = [`dpscaling query --law ${data.bundle_argument}`, `--compute ${String(axes.compute[at.compute])}`,
      `--epsilon ${axes.epsilon[at.epsilon]}`, `${budget.flag} ${String(budget.value)}`];
    if (data.multiple_lengths) parts.push(`--privacy-unit ${unit}`);
    const seqLen = axes.seq_len[at.seq_len];
    if (seqLen !== null) parts.push(`--seq-len ${seqLen}`);
    const extrapolating = node && node.refusal;
    if (extrapolating) parts.push("--allow-extrapolation");
    const args = [`compute=${String(axes.compute[at.compute])}`, `epsilon=${axes.epsilon[at.epsilon]}`,
      `${budget.arg}=${String(budget.value)}`];
    if (data.multiple_lengths) args.push(`privacy_unit="${unit}"`);
    if (seqLen !== null) args.push(`seq_len=${seqLen}`);
    if (extrapolating) args.push("allow_extrapolation=True");
    return {
      cli: parts.join(" ") + " --json",
      python: `import dpscaling\nlaw = dpscaling.load_law("${data.bundle_argument}")\n` +
        `answer = law.query(${args.join(", ")})\nprint(answer.runnable, answer.predicted_loss, answer.flags)`,
    };
  }

  function showAnswer(node) {
    const answer = document.getElementById("answer");
    const none = document.getElementById("none");
    const refusal = document.getElementById("refusal");
    const flags = document.getElementById("flags");
    flags.replaceChildren();
    if (node.none !== undefined) {
      answer.hidden = true; refusal.hidden = true; none.hidden = false;
      none.textContent = `No answer at this budget: ${node.none}`;
      document.getElementById("near").replaceChildren();
      text("near-summary", "");
      return;
    }
    answer.hidden = false; none.hidden = true;
    refusal.hidden = !node.refusal;
    refusal.textContent = node.refusal
      ? `Beyond the validated range: \`dpscaling query\` refuses this budget without --allow-extrapolation (${node.refusal}). ` +
        "The answer below is the law's extrapolation; do not rely on it."
      : "";
    text("answer-loss", node.loss.toFixed(4)).dataset.value = node.loss;
    text("answer-loss-units", data.law.loss_units_short);
    text("answer-interval", node.ci
      ? `calibrated 90% interval [${node.ci[0].toFixed(4)}, ${node.ci[1].toFixed(4)}]`
      : "no calibrated interval at this answer");
    text("answer-M", int(node.M)).dataset.value = node.M;
    text("answer-shape", node.shape
      ? `${node.shape[0]}: ${node.shape[1]} layers, ${node.shape[2]} heads, hidden ${node.shape[3]}` +
        (node.shape[4] ? " (trained in the grid)" : " (not trained in the grid)")
      : node.model_note || "–");
    text("answer-B", `${int(node.B)} (microbatches of ${node.mb})`).dataset.value = node.B;
    text("answer-T", int(node.T)).dataset.value = node.T;
    text("answer-sigma", sig(node.sigma, 5));
    text("answer-nbr", sig(node.nbr, 4));
    text("answer-tpp", sig(node.tpp, 3));
    text("answer-lr", node.lr === null ? "–" : sig(node.lr, 3));
    text("answer-C", `${sci(node.C)} FLOPs`);
    text("answer-S", `${node.S}` + (data.multiple_lengths ? "" : " (the law's only length)"));
    text("answer-units", !data.multiple_lengths ? `${sig(node.units, 6)} privacy units`
      : unitOf(state) === "user" ? `${sig(node.units, 6)} users`
      : `${sig(node.units, 6)} sequences of S = ${node.S} (${sci(budgetOf(state).value)} tokens)`);
    text("answer-seed", node.seed ? `[${node.seed[0].toFixed(4)}, ${node.seed[1].toFixed(4)}]` : "–");
    if (node.flags.length === 0) {
      const li = document.createElement("li");
      li.className = "ok";
      li.textContent = "none: inside the measured and calibrated range";
      flags.append(li);
    }
    for (const [code, message] of node.flags) {
      const li = document.createElement("li");
      li.dataset.code = code;
      if (code === "iterations_beyond_validated") li.className = "severe";
      const name = document.createElement("code");
      name.textContent = code;
      li.append(name, `: ${message}`);
      flags.append(li);
    }
    const vsRows = [["rule", "margin", "90% interval", "verdict"],
      ...node.vs.map(([rule, margin, interval, verdict]) => [rule, margin === null ? "–" : sig(margin, 3),
        interval ? `[${sig(interval[0], 3)}, ${sig(interval[1], 3)}]` : "–", verdict])];
    document.getElementById("vs").replaceChildren(...vsRows.map((cells, r) => {
      const tr = document.createElement("tr");
      if (r) tr.dataset.rule = cells[0];
      cells.forEach((cell) => { const td = document.createElement(r ? "td" : "th"); td.textContent = cell; tr.append(td); });
      return tr;
    }));
    const near = node.near;
    text("near-summary", `${near.count} candidate configurations within ${near.tolerance * 100}% of the law's ` +
      `optimum loss ${sig(node.opt.loss, 5)}; their range:`);
    const rows = [["", "optimum", "min", "max"]];
    for (const [key, label] of [["M", "M"], ["B", "B"], ["T", "T"], ["nbr", "σ̄"], ["tpp", "tokens / parameter"]]) {
      if (near[key]) rows.push([label, sig(node.opt[key], 4), sig(near[key][0], 4), sig(near[key][1], 4)]);
    }
    const table = document.getElementById("near");
    table.replaceChildren(...rows.map((cells, r) => {
      const tr = document.createElement("tr");
      cells.forEach((cell) => { const td = document.createElement(r ? "td" : "th"); td.textContent = cell; tr.append(td); });
      return tr;
    }));
  }

  // ------------------------------------------------------------------ charts
  let charts = [];
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b"];

  function column(at, field) {
    return axes.compute.map((_, c) => {
      const node = nodeAt({ ...at, compute: c });
      if (!node || node.none !== undefined) return null;
      return typeof field === "function" ? field(node) : node[field];
    });
  }

  function comparisonEpsilons() {
    // Two other ε of the grid: a factor 4 below and above where the grid has them, else the nearest others.
    const here = axes.epsilon[state.epsilon];
    const others = axes.epsilon.map((e, i) => i).filter((i) => i !== state.epsilon);
    others.sort((a, b) => Math.abs(Math.log(axes.epsilon[a] / here) - (axes.epsilon[a] < here ? -1 : 1) * Math.log(4)) -
      Math.abs(Math.log(axes.epsilon[b] / here) - (axes.epsilon[b] < here ? -1 : 1) * Math.log(4)));
    const lower = others.filter((i) => axes.epsilon[i] < here)[0];
    const upper = others.filter((i) => axes.epsilon[i] > here)[0];
    const picked = [lower, upper].filter((i) => i !== undefined);
    for (const i of others) if (picked.length < 2 && !picked.includes(i)) picked.push(i);
    return picked.sort((a, b) => a - b);
  }

  function chart(target, series, values, yLog, yLabel, bands) {
    const width = Math.max(320, target.clientWidth || 520);
    return new uPlot({
      width, height: 300,
      scales: { x: { time: false, distr: 3 }, y: yLog ? { distr: 3 } : { auto: true } },
      axes: [{ label: "compute C (FLOPs)", values: (u, ticks) => ticks.map((t) => (t === null ? "" : t.toExponential(0))) },
        { label: yLabel, size: 60,
          values: (u, ticks) => ticks.map((t) => (t === null ? "" : yLog ? t.toExponential(0) : t.toFixed(2))) }],
      series: [{ label: "C", value: (u, v) => (v === null ? "–" : sci(v)) }, ...series],
      bands: bands || [],
      legend: { live: true },
    }, [axes.compute, ...values], target);
  }

  function drawCharts() {
    charts.forEach((c) => c.destroy());
    charts = [];
    const at = { ...state };
    const here = axes.epsilon[state.epsilon];
    const marker = axes.compute.map((c, i) => (i === state.compute ? nodeAt(at)?.loss ?? null : null));
    const lossSeries = [
      { label: `ε = ${here} (answer)`, stroke: palette[0], width: 2.5 },
      { label: "90% calibrated, high", stroke: "rgba(31,119,180,0.35)", width: 1 },
      { label: "90% calibrated, low", stroke: "rgba(31,119,180,0.35)", width: 1 },
      { label: "beyond the validated range", stroke: palette[0], width: 1, dash: [2, 3] },
    ];
    const answers = column(at, (n) => n);
    // The line is solid where `dpscaling query` answers, dotted (and joined to it) where it refuses.
    const inside = answers.map((n) => (n && !n.refusal ? n.loss : null));
    const beyond = answers.map((n, i) => (n && (n.refusal || (answers[i + 1] && answers[i + 1].refusal)) ? n.loss : null));
    const lossValues = [inside, column(at, (n) => (n.ci ? n.ci[1] : null)),
      column(at, (n) => (n.ci ? n.ci[0] : null)), beyond];
    comparisonEpsilons().forEach((index, k) => {
      lossSeries.push({ label: `ε = ${axes.epsilon[index]}`, stroke: palette[k + 1], width: 1.5 });
      lossValues.push(column({ ...at, epsilon: index }, "loss"));
    });
    const seqLen = axes.seq_len[state.seq_len];
    if (data.nonprivate && (!data.multiple_lengths || seqLen === data.primary_seq_len)) {
      lossSeries.push({ label: "non-private (σ̄ = 0)", stroke: "#000", width: 1.5, dash: [6, 4] });
      lossValues.push(data.nonprivate.loss);
    }
    lossSeries.push({ label: "your budget", stroke: "#000", fill: "#000", paths: () => null,
      points: { show: true, size: 11, fill: "#ffbf00", stroke: "#000" } });
    lossValues.push(marker);
    charts.push(chart(document.getElementById("chart-loss"), lossSeries, lossValues, false, "predicted loss (nats)",
      [{ series: [2, 3], fill: "rgba(31,119,180,0.15)" }]));
    const alloc = [["M", "model size M", palette[0]], ["B", "batch size B", palette[1]], ["T", "iterations T", palette[2]]];
    const allocSeries = alloc.map(([, label, colour]) => ({ label, stroke: colour, width: 2 }));
    const allocValues = alloc.map(([key]) => column(at, key));
    const node = nodeAt(at);
    alloc.forEach(([key], k) => {
      allocSeries.push({ label: `your ${key}`, stroke: alloc[k][2], paths: () => null,
        points: { show: true, size: 10, fill: "#ffbf00", stroke: alloc[k][2] } });
      allocValues.push(axes.compute.map((c, i) => (i === state.compute && node && node.none === undefined ? node[key] : null)));
    });
    charts.push(chart(document.getElementById("chart-allocation"), allocSeries, allocValues, true, "M, B, T"));
  }

  // ------------------------------------------------------------------ one update
  function update() {
    if (shown.privacy_unit) {
      document.getElementById("data-label").textContent = unitOf(state) === "user"
        ? "data budget N (users)" : `data budget N (sequences of S = ${data.primary_seq_len}; N·S tokens)`;
    }
    for (const name of Object.keys(sliders)) {
      sliders[name].value = state[name];
      shown[name].textContent = axisValue(name, axes[name][state[name]]);
      if (typed[name].type === "number" && document.activeElement !== typed[name]) typed[name].value = axes[name][state[name]];
    }
    const node = nodeAt(state);
    showAnswer(node);
    const command = commandFor(state);
    text("command", command.cli);
    text("python", command.python);
    document.body.dataset.node = nodeIndex(state);
    drawCharts();
  }

  for (const [id, source] of [["copy-command", "command"], ["copy-python", "python"]]) {
    document.getElementById(id).addEventListener("click", () => {
      navigator.clipboard?.writeText(document.getElementById(source).textContent).catch(() => {});
    });
  }

  // ------------------------------------------------------------------ start
  text("law-summary", data.law.summary);
  text("grid-summary", data.grid_summary);
  text("provenance", data.provenance);
  text("chart-loss-note", data.loss_note);
  for (const [name, value] of Object.entries(data.start)) state[name] = value;
  update();
  window.explorer = { data, state, nodeAt, select: (at) => { Object.assign(state, at); update(); } };
  document.body.dataset.ready = "true";
})();
