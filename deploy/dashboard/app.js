/*
 * LLM cache mesh -- operator dashboard, browser side.
 *
 * Polls GET /api/series (served by the Rust dashboard server, which scrapes the
 * regional nodes, core cluster and inference pod) every ?interval= ms
 * (default 2000) and draws one Chart.js line chart per panel, grouped under an
 * <h2> per panel.group in first-seen order. Charts are created once and updated
 * in place. Plain ES2020, no build step; Chart.js comes from /chart.umd.js.
 *
 * After each successful render <body> carries data-charts, data-nonzero-charts
 * and data-updates; data-error holds the last fetch error (absent when ok).
 */
'use strict';

const INTERVAL_MS = Math.max(200, Number(new URLSearchParams(location.search).get('interval')) || 2000);
const PALETTE = ['#4e9af1', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#76b7b2',
  '#edc948', '#ff9da7', '#9c755f', '#bab0ac', '#17becf', '#bcbd22'];

const charts = new Map();   // panel id -> { chart, title, colours }
const sections = new Map(); // group name -> grid element
let updates = 0;

Chart.defaults.animation = false;
Chart.defaults.color = '#8a96a6';
Chart.defaults.borderColor = '#263040';
Chart.defaults.font.size = 11;

// ---- formatting -------------------------------------------------------------

const pad2 = (n) => String(n).padStart(2, '0');
function hms(ms) {
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

// Up to three significant digits, no exponent for ordinary magnitudes.
function sig3(x) {
  if (x === 0) return '0';
  if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString('en-US');
  return String(Number(x.toPrecision(3)));
}

function formatValue(v, unit) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  switch (unit) {
    case 'seconds':
      return Math.abs(v) < 1 ? `${sig3(v * 1000)} ms` : `${sig3(v)} s`;
    case 'ratio': return `${sig3(v * 100)}%`;
    case 'per_second': return `${sig3(v)}/s`;
    case 'count': return Number.isInteger(v) ? v.toLocaleString('en-US') : sig3(v);
    case 'bytes': {
      const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
      let i = 0;
      while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
      return `${sig3(v)} ${units[i]}`;
    }
    default: return sig3(v);
  }
}

const isNonZero = (v) => typeof v === 'number' && Number.isFinite(v) && v !== 0;

// ---- DOM --------------------------------------------------------------------

function sectionFor(group) {
  const key = group || '';
  let grid = sections.get(key);
  if (!grid) {
    const main = document.getElementById('panels');
    if (key) {
      const h2 = document.createElement('h2');
      h2.textContent = key;
      main.appendChild(h2);
    }
    grid = document.createElement('div');
    grid.className = 'grid';
    main.appendChild(grid);
    sections.set(key, grid);
  }
  return grid;
}

function createChart(panel) {
  const card = document.createElement('section');
  card.className = 'card';
  card.dataset.panel = panel.id;
  const title = document.createElement('h3');
  const plot = document.createElement('div');
  plot.className = 'plot';
  const canvas = document.createElement('canvas');
  plot.appendChild(canvas);
  card.append(title, plot);
  sectionFor(panel.group).appendChild(card);

  const unit = panel.unit;
  const chart = new Chart(canvas, {
    type: 'line',
    data: { labels: [], datasets: [] },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: 'index', intersect: false },
      elements: { point: { radius: 0, hitRadius: 6 }, line: { borderWidth: 1.5, tension: 0 } },
      scales: {
        x: { ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 7 }, grid: { display: false } },
        y: {
          stacked: !!panel.stacked,
          beginAtZero: true,
          ticks: { maxTicksLimit: 6, callback: (v) => formatValue(v, unit) },
        },
      },
      plugins: {
        legend: { position: 'bottom', labels: { boxWidth: 10, boxHeight: 10, padding: 8 } },
        tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${formatValue(c.parsed.y, unit)}` } },
      },
    },
  });
  const entry = { chart, title, colours: 0 };
  charts.set(panel.id, entry);
  return entry;
}

function updateChart(entry, panel) {
  const { chart } = entry;
  entry.title.textContent = panel.title || panel.id;
  const series = panel.series || [];
  chart.data.labels = series.length ? series[0].points.map((p) => hms(p[0])) : [];

  const byName = new Map(chart.data.datasets.map((d) => [d.label, d]));
  chart.data.datasets = series.map((s) => {
    let ds = byName.get(s.name);
    if (!ds) {
      const colour = PALETTE[entry.colours++ % PALETTE.length];
      ds = { label: s.name, borderColor: colour, backgroundColor: colour + (panel.stacked ? '99' : '33'),
        fill: panel.stacked ? 'stack' : false, spanGaps: false, data: [] };
    }
    ds.data = s.points.map((p) => (typeof p[1] === 'number' ? p[1] : null));
    return ds;
  });
  chart.update('none');
  return series.some((s) => s.points.some((p) => isNonZero(p[1])));
}

function renderHeader(data) {
  const box = document.getElementById('targets');
  box.replaceChildren(...(data.targets || []).map((t) => {
    const span = document.createElement('span');
    span.className = `target ${t.up ? 'up' : 'down'}`;
    span.textContent = t.name;
    span.title = t.error ? `${t.url}\n${t.error}` : t.url;
    return span;
  }));
  const when = data.updated_unix_ms ? hms(data.updated_unix_ms) : hms(Date.now());
  document.getElementById('updated').textContent =
    `updated ${when} · every ${(data.interval_ms || INTERVAL_MS) / 1000} s`;
}

function render(data) {
  renderHeader(data);
  const panels = data.panels || [];
  const seen = new Set();
  let nonzero = 0;
  for (const panel of panels) {
    seen.add(panel.id);
    const entry = charts.get(panel.id) || createChart(panel);
    if (updateChart(entry, panel)) nonzero++;
  }
  for (const [id, entry] of charts) { // panels the server no longer sends
    if (!seen.has(id)) {
      entry.chart.canvas.closest('.card').remove();
      entry.chart.destroy();
      charts.delete(id);
    }
  }
  updates++;
  const body = document.body.dataset;
  body.charts = String(panels.length);
  body.nonzeroCharts = String(nonzero);
  body.updates = String(updates);
}

// ---- polling ----------------------------------------------------------------

function showError(text) {
  document.getElementById('error').textContent = text ? `fetch failed: ${text}` : '';
  if (text) document.body.dataset.error = text;
  else delete document.body.dataset.error;
}

async function poll() {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), Math.max(5000, 2 * INTERVAL_MS));
  try {
    const resp = await fetch('/api/series', { cache: 'no-store', signal: abort.signal });
    if (!resp.ok) throw new Error(`HTTP ${resp.status} ${resp.statusText}`.trim());
    render(await resp.json());
    showError(null);
  } catch (err) {
    showError(err.name === 'AbortError' ? 'timed out' : String(err.message || err));
  } finally {
    clearTimeout(timer);
    setTimeout(poll, INTERVAL_MS);
  }
}

poll();
