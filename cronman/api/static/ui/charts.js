// Small SVG charts drawn by hand (no chart library, nothing to fetch):
// lines for rates and percentiles, bars for counts, over a time axis in UTC,
// with a hover band per step naming its values.

const SVG = "http://www.w3.org/2000/svg";
const PAD = { left: 46, right: 10, top: 10, bottom: 22 };

function s(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/** The smallest "nice" number (1, 2, 2.5, 5 x 10^k) at or above x. */
export function niceCeil(x) {
  if (!(x > 0)) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * exp >= x) return m * exp;
  return 10 * exp;
}

function label(value, unit) {
  if (unit === "ms" && value >= 1000) return `${+(value / 1000).toFixed(2)} s`;
  const text = Math.abs(value) >= 1000 ? `${+(value / 1000).toFixed(2)}k`
    : `${+value.toFixed(value < 10 ? 3 : 0)}`;
  return unit ? `${text} ${unit}` : text;
}

const MINUTE = 60000;
const TICK_STEPS = [MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 30 * MINUTE,
  60 * MINUTE, 120 * MINUTE, 180 * MINUTE, 240 * MINUTE, 360 * MINUTE, 720 * MINUTE,
  1440 * MINUTE];

/** Tick times on whole UTC minutes/hours, at most ``most`` of them in [x0, x1]. */
export function timeTicks(x0, x1, most) {
  const span = x1 - x0;
  const step = TICK_STEPS.find((s) => span / s <= most) || Math.ceil(span / most);
  const out = [];
  for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) out.push(t);
  return out;
}

function clock(ms, spanMs) {
  const d = new Date(ms);
  const hhmm = `${String(d.getUTCHours()).padStart(2, "0")}:${String(d.getUTCMinutes()).padStart(2, "0")}`;
  if (spanMs > 2 * 86400000) return `${d.getUTCMonth() + 1}/${d.getUTCDate()} ${hhmm}`;
  return hhmm;
}

/**
 * An SVG chart of series over [x0, x1) (Unix ms), ``step`` ms per bucket.
 * series: [{name, cls, kind: "line" | "bar", points: [[t_ms, value | null], ...]}]
 */
export function chart({ series, x0, x1, step, unit, width, height = 180, title }) {
  const w = Math.max(240, Math.round(width || 600));
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${w} ${height}`, role: "img",
                         "aria-label": title || "chart" });
  const plotW = w - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const values = series.flatMap((one) => one.points.map((p) => p[1]).filter((v) => v !== null));
  const yMax = 4 * niceCeil(Math.max(0, ...values) / 4);
  const span = Math.max(1, x1 - x0);
  const x = (t) => PAD.left + ((t - x0) / span) * plotW;
  const y = (v) => PAD.top + plotH - (v / yMax) * plotH;

  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    svg.append(s("line", { class: i ? "grid" : "axis", x1: PAD.left, x2: w - PAD.right,
                           y1: y(v), y2: y(v) }));
    svg.append(s("text", { x: PAD.left - 4, y: y(v) + 3, "text-anchor": "end" }, label(v, unit)));
  }
  for (const t of timeTicks(x0, x1, Math.max(2, Math.min(6, Math.floor(plotW / 80))))) {
    const px = x(t);
    const anchor = px < PAD.left + 20 ? "start" : px > w - PAD.right - 20 ? "end" : "middle";
    svg.append(s("line", { class: "grid", x1: px, x2: px, y1: PAD.top, y2: PAD.top + plotH }));
    svg.append(s("text", { x: px, y: height - 6, "text-anchor": anchor }, clock(t, span)));
  }
  const slot = plotW * (step / span);
  for (const one of series) {
    if (one.kind === "bar") {
      for (const [t, v] of one.points) {
        if (!v) continue;
        const bar = s("rect", { class: "bar " + (one.cls || ""), x: x(t) + slot * 0.1,
                                y: y(v), width: Math.max(1, slot * 0.8), height: y(0) - y(v) });
        bar.append(s("title", {}, `${new Date(t).toISOString()}: ${v} ${one.name}`));
        svg.append(bar);
      }
      continue;
    }
    let d = "";
    const pts = one.points;
    const has = (i) => i >= 0 && i < pts.length && pts[i][1] !== null && pts[i][1] !== undefined;
    for (let i = 0; i < pts.length; i++) {
      if (!has(i)) continue;
      const [t, v] = pts[i];
      const px = x(t + step / 2).toFixed(1);
      d += `${has(i - 1) ? "L" : "M"}${px},${y(v).toFixed(1)}`;
      if (!has(i - 1) && !has(i + 1)) {
        // A lone value has no segment to draw: a dot shows it.
        const dot = s("circle", { class: "dot " + (one.cls || ""), cx: px, cy: y(v).toFixed(1),
                                  r: 2.5 });
        dot.append(s("title", {}, `${new Date(t).toISOString()}: ${v} ${unit || ""}`.trim()));
        svg.append(dot);
      }
    }
    const path = s("path", { class: "line " + (one.cls || ""), d: d || "M0,0" });
    path.append(s("title", {}, one.name));
    svg.append(path);
  }
  // One hover band per step: its time and every series' value there.
  const byTime = new Map();
  for (const one of series) {
    for (const [t, v] of one.points) {
      if (t < x0 || t >= x1) continue;
      if (!byTime.has(t)) byTime.set(t, []);
      byTime.get(t).push(`${one.name} ${v === null || v === undefined ? "—" : label(v, unit)}`);
    }
  }
  for (const [t, values] of byTime) {
    const text = `${clock(t, span)}–${clock(t + step, span)} UTC: ${values.join(", ")}`;
    const band = s("rect", { class: "hover", x: x(t), y: PAD.top, width: Math.max(1, slot),
                             height: plotH, "data-values": text });
    band.append(s("title", {}, text));
    svg.append(band);
  }
  return svg;
}

/** The first step holding data (a value other than null or 0), or null. */
export function firstData(buckets, keys) {
  const hit = buckets.find((b) => keys.some((k) => b[k] !== null && b[k] !== undefined && b[k] !== 0));
  return hit ? Date.parse(hit.t) : null;
}
