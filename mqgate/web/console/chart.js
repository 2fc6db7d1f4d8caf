// A small line chart on a canvas: a few series over the last N readings, the axis
// scaled to the largest value shown, a legend. Enough for the overview; no library.
"use strict";

class LineChart {
  // series: [{name, color}], keep: how many readings the chart shows.
  constructor(canvas, series, keep = 300) {
    this.canvas = canvas;
    this.series = series.map((s) => ({...s, values: []}));
    this.keep = keep;
  }

  // values: one number (or null) per series, in the order given to the constructor.
  add(values) {
    this.series.forEach((s, i) => {
      s.values.push(values[i]);
      if (s.values.length > this.keep) s.values.shift();
    });
    this.draw();
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (canvas.width !== width * ratio) {
      canvas.width = width * ratio;
      canvas.height = height * ratio;
    }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const left = 56, right = 8, top = 22, bottom = 16;
    const plotW = width - left - right, plotH = height - top - bottom;
    let max = 0;
    for (const s of this.series) for (const v of s.values) if (v > max) max = v;
    max = niceCeiling(max);

    g.font = "11px sans-serif";
    g.fillStyle = "#666";
    g.strokeStyle = "#ddd";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = top + plotH - (plotH * i) / 4;
      g.beginPath(); g.moveTo(left, y); g.lineTo(left + plotW, y); g.stroke();
      g.textAlign = "right";
      g.fillText(formatNumber((max * i) / 4), left - 6, y + 4);
    }
    g.textAlign = "left";
    g.fillText(`last ${this.keep} readings`, left, height - 3);

    let legendX = left;
    for (const s of this.series) {
      g.fillStyle = s.color;
      g.fillRect(legendX, 6, 10, 10);
      g.fillStyle = "#333";
      const latest = s.values.length ? s.values[s.values.length - 1] : null;
      const label = `${s.name}: ${latest === null ? "-" : formatNumber(latest)}`;
      g.fillText(label, legendX + 14, 15);
      legendX += g.measureText(label).width + 30;

      g.strokeStyle = s.color;
      g.lineWidth = 2;
      g.beginPath();
      let drawing = false;
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) { drawing = false; return; }
        const x = left + (plotW * (i + this.keep - s.values.length)) / (this.keep - 1);
        const y = top + plotH - (max ? (plotH * v) / max : 0);
        if (drawing) g.lineTo(x, y); else g.moveTo(x, y);
        drawing = true;
      });
      g.stroke();
    }
  }
}

function niceCeiling(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

function formatNumber(value) {
  if (value === null || value === undefined) return "-";
  if (Math.abs(value) >= 1e9) return (value / 1e9).toFixed(1) + "G";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e4) return (value / 1e3).toFixed(1) + "k";
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) < 1 ? value.toFixed(2) : value.toFixed(1);
}
