// relay console: the fleet page's live cells and charts, the runs page's progress, auto-submitting pickers.
// Our own code, served from the package (no library, nothing loaded from elsewhere). Every text from the
// server is set with textContent, never as HTML, so a name like <script> stays text.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";

  function show(value) {
    if (value === null || value === undefined || value === "") return "-";
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "number") {
      return Number.isInteger(value) ? value.toLocaleString("en-US")
        : value.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
    }
    return String(value);
  }

  function span(seconds) {
    if (seconds >= 3600) return `${(seconds / 3600).toFixed(1)} h`;
    if (seconds >= 60) return `${(seconds / 60).toFixed(1)} min`;
    return `${Math.round(seconds)} s`;
  }

  function drawChart(svg, samples) {
    const series = Number(svg.dataset.series);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const points = samples.filter((s) => s[series] !== null && s[series] !== undefined);
    svg.dataset.points = String(points.length);
    const last = points.length ? points[points.length - 1][series] : null;
    svg.dataset.last = last === null ? "" : String(last);
    if (points.length === 0) return;
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const peak = Math.max(...points.map((s) => s[series]));
    svg.dataset.max = String(peak);
    const top = Math.max(peak, 1e-9);
    const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * 396 + 2 : 200);
    const y = (v) => 110 - (v / top) * 100;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.map((s) => `${x(s[0]).toFixed(1)},${y(s[series]).toFixed(1)}`).join(" "));
    line.setAttribute("class", "line");
    svg.appendChild(line);
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "4");
    label.setAttribute("y", "12");
    label.setAttribute("class", "label");
    label.textContent = `max ${show(peak)} · now ${show(last)} · over ${span(t1 - t0)}`;
    svg.appendChild(label);
  }

  // Each instance's samples, kept here: the server sends only those taken after the newest one held.
  const held = {};
  let newest = 0;

  function keep(data) {
    for (const [name, fresh] of Object.entries(data.samples)) {
      const all = (held[name] || []).concat(fresh);
      const last = all.length ? all[all.length - 1][0] : 0;
      held[name] = all.filter((s) => s[0] >= last - data.window);
      for (const s of fresh) newest = Math.max(newest, s[0]);
    }
    for (const name of Object.keys(held)) if (!(name in data.samples)) delete held[name];
  }

  function refreshFleet(data) {
    keep(data);
    for (const [name, fields] of Object.entries(data.instances)) {
      const row = document.querySelector(`tr[data-instance="${CSS.escape(name)}"]`);
      if (row) {
        for (const [field, value] of Object.entries(fields)) {
          const cell = row.querySelector(`td[data-field="${field}"]`);
          if (cell) cell.textContent = show(value);
        }
        row.className = fields.running ? "running" : "stopped";
        const where = data.placement[name] || {};
        for (const key of ["node", "running_on"]) {
          const cell = row.querySelector(`td[data-place="${key}"]`);
          if (cell) cell.textContent = show(where[key]) + (key === "node" && where.pinned_to ? ` (pinned ${where.pinned_to})` : "");
        }
      }
      for (const svg of document.querySelectorAll(`svg.chart[data-instance="${CSS.escape(name)}"]`)) {
        drawChart(svg, held[name] || []);
      }
      const count = document.querySelector(`span.sample-count[data-instance="${CSS.escape(name)}"]`);
      if (count) count.textContent = String((held[name] || []).length);
    }
    const stamp = document.getElementById("updated");
    if (stamp) {
      stamp.textContent = `sampled every ${stamp.dataset.interval} s · updated ${new Date().toLocaleTimeString()}`;
      stamp.dataset.passes = String(data.passes);
    }
  }

  async function poll(where, apply, every) {
    for (;;) {
      try {
        const url = typeof where === "function" ? where() : where;
        const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (answer.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(location.pathname)); return; }
        if (answer.ok) apply(await answer.json());
      } catch (e) { /* the console restarting: try again */ }
      await new Promise((r) => setTimeout(r, every));
    }
  }

  function refreshJobs(jobs) {
    for (const job of jobs) {
      const row = document.querySelector(`tr[data-job="${CSS.escape(job.id)}"]`);
      if (!row) continue;
      row.querySelector('[data-field="state"]').textContent = job.state;
      row.querySelector('[data-field="state"]').className = `state-${job.state}`;
      row.querySelector('[data-field="progress"]').textContent = job.error || job.progress || "";
      row.querySelector("progress").value = job.percent || 0;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-autosubmit]")) {
      select.addEventListener("change", () => select.form.submit());
    }
    const stamp = document.getElementById("updated");
    if (stamp) poll(() => `/api/fleet?since=${newest}`, refreshFleet, Math.max(1000, Number(stamp.dataset.interval) * 1000));
    const jobs = document.getElementById("jobs");
    if (jobs && jobs.dataset.live) poll(jobs.dataset.live, refreshJobs, 1000);
  });
})();
