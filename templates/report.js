(function () {
  "use strict";
  var t0 = performance.now();
  var SVG = "http://www.w3.org/2000/svg";
  document.documentElement.classList.add("js");

  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) { if (Object.prototype.hasOwnProperty.call(attrs, k)) { e.setAttribute(k, attrs[k]); } }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function text(parent, x, y, s, anchor, cls) {
    var t = el("text", { x: x, y: y, "text-anchor": anchor || "start" }, parent);
    if (cls) { t.setAttribute("class", cls); }
    t.textContent = s;
    return t;
  }
  function data(node) {
    var src = document.getElementById(node.getAttribute("data-src"));
    return src ? JSON.parse(src.textContent) : null;
  }
  function sig(v) {
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function fmtTime(us) {
    if (us === 0) { return "0"; }
    if (Math.abs(us) >= 1e6) { return sig(us / 1e6) + " s"; }
    if (Math.abs(us) >= 1e3) { return sig(us / 1e3) + " ms"; }
    return sig(us) + " µs";
  }
  function tickStep(range, n) {  // a round step (1, 2 or 5 × 10^k µs) giving about n ticks over range
    var raw = range / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * p;
  }
  function fmtAt(us, step) {  // a time with as many decimals as `step` needs, so neighbouring ticks differ
    var unit = Math.abs(us) >= 1e6 || step >= 1e5 ? [1e6, " s"] : Math.abs(us) >= 1e3 || step >= 100 ? [1e3, " ms"] : [1, " µs"];
    var dec = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / unit[0]) + 1e-9)));
    return (us / unit[0]).toFixed(dec) + unit[1];
  }
  function decodeDetail(det) {  // starts are deltas; durations and delays (-1: none); all in det.unit_us
    if (det._t) { return det; }
    var u = det.unit_us;
    function cum(a) { var out = new Float64Array(a.length), s = 0; for (var i = 0; i < a.length; i++) { s += a[i]; out[i] = s * u; } return out; }
    function all(a, n) { if (Array.isArray(a)) { return a; } var out = new Array(n); for (var i = 0; i < n; i++) { out[i] = a; } return out; }
    function us(a) { return a.map(function (v) { return v < 0 ? -1 : v * u; }); }
    var ng = det.gpu.t.length, nl = det.launch.t.length, no = det.ops.t.length;
    ["d", "r", "n", "o", "s", "q"].forEach(function (k) { det.gpu[k] = all(det.gpu[k], ng); });  // one value: every row has it
    ["d", "n"].forEach(function (k) { det.launch[k] = all(det.launch[k], nl); det.ops[k] = all(det.ops[k], no); });
    det._t = cum(det.gpu.t); det._lt = cum(det.launch.t); det._ot = cum(det.ops.t);
    det.gpu.d = us(det.gpu.d); det.gpu.q = us(det.gpu.q); det.launch.d = us(det.launch.d); det.ops.d = us(det.ops.d);
    var m = 0; det.gpu.d.forEach(function (x) { if (x > m) { m = x; } }); det._maxd = m;
    return det;
  }
  function firstFrom(arr, us) { var lo = 0, hi = arr.length; while (lo < hi) { var mid = (lo + hi) >> 1; if (arr[mid] < us) { lo = mid + 1; } else { hi = mid; } } return lo; }
  var DETAIL_US = 4000;  // views narrower than this (4 ms) draw each kernel, copy and CPU span as a box
  var SUP = { "-": "\u207b", "0": "\u2070", "1": "\u00b9", "2": "\u00b2", "3": "\u00b3", "4": "\u2074",
    "5": "\u2075", "6": "\u2076", "7": "\u2077", "8": "\u2078", "9": "\u2079" };
  function fmtDecade(e) {  // label of 10^e on a log axis
    if (e >= 0 && e <= 5) { return e >= 3 ? Math.pow(10, e - 3) + "k" : String(Math.pow(10, e)); }
    if (e < 0 && e >= -3) { return Math.pow(10, e).toFixed(-e); }
    return "10" + String(e).split("").map(function (c) { return SUP[c]; }).join("");
  }

  // ---- tooltip: text only, never HTML ----
  var tip = document.getElementById("tip");
  function showTip(ev, title, lines) {
    while (tip.firstChild) { tip.removeChild(tip.firstChild); }
    var b = document.createElement("b");
    b.textContent = title;
    tip.appendChild(b);
    lines.forEach(function (line) {
      var d = document.createElement("div");
      d.textContent = line;
      tip.appendChild(d);
    });
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 8) { x = ev.clientX - w - 14; }
    if (y + h > window.innerHeight - 8) { y = ev.clientY - h - 14; }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() { tip.hidden = true; }

  // ---- rank selector ----
  var rankButtons = document.querySelectorAll(".rank-btn");
  var rankRows = document.querySelectorAll(".rank-row");
  var rankSelect = document.querySelector(".rank-select");
  if (rankSelect) { rankSelect.addEventListener("change", function () { selectRank(rankSelect.value); }); }
  function selectRank(id) {
    document.querySelectorAll("section.rank").forEach(function (s) {
      if (s.getAttribute("data-rank") === id) { s.removeAttribute("data-hidden"); } else { s.setAttribute("data-hidden", ""); }
    });
    rankButtons.forEach(function (b) { b.classList.toggle("on", b.getAttribute("data-rank") === id); });
    rankRows.forEach(function (b) { b.classList.toggle("on", b.getAttribute("data-rank") === id); });
    if (rankSelect) { rankSelect.value = id; }
    drawCharts();
  }
  rankButtons.forEach(function (b) {
    b.addEventListener("click", function () { selectRank(b.getAttribute("data-rank")); });
  });
  document.querySelectorAll(".rank-link").forEach(function (a) {  // cross-rank section: show that rank
    a.addEventListener("click", function () { selectRank(a.getAttribute("data-rank")); });
  });
  rankRows.forEach(function (b) {
    b.addEventListener("click", function () { selectRank(b.getAttribute("data-rank")); });
    b.addEventListener("keydown", function (e) { if (e.key === "Enter") { selectRank(b.getAttribute("data-rank")); } });
  });

  // ---- kernel table: sort and filter ----
  function setupTable(table) {
    var tbody = table.tBodies[0];
    var rows = Array.prototype.slice.call(tbody.rows);
    var haystack = rows.map(function (r) { return r.textContent.toLowerCase(); });
    var heads = table.tHead.rows[0].cells;
    function sortBy(i) {
      var th = heads[i];
      var numeric = th.hasAttribute("data-num");
      var cur = th.getAttribute("aria-sort");
      var dir = cur === "none" ? (numeric ? "descending" : "ascending") : (cur === "ascending" ? "descending" : "ascending");
      for (var j = 0; j < heads.length; j++) { heads[j].setAttribute("aria-sort", "none"); }
      th.setAttribute("aria-sort", dir);
      var sign = dir === "ascending" ? 1 : -1;
      var keyed = rows.map(function (r, k) {
        var c = r.cells[i];
        return { r: r, k: k, v: numeric ? parseFloat(c.getAttribute("data-v")) : c.textContent.toLowerCase() };
      });
      keyed.sort(function (a, b) {
        if (a.v < b.v) { return -sign; }
        if (a.v > b.v) { return sign; }
        return a.k - b.k;
      });
      var frag = document.createDocumentFragment();
      keyed.forEach(function (o) { frag.appendChild(o.r); });
      tbody.appendChild(frag);
    }
    for (var i = 0; i < heads.length; i++) {
      (function (k) {
        heads[k].addEventListener("click", function () { sortBy(k); });
        heads[k].addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(k); } });
      })(i);
    }
    var card = table.closest(".card");
    var input = card.querySelector(".k-filter");
    if (!input) { return { highlight: function () {} }; }  // a sortable table without filters (operators)
    var select = card.querySelector(".k-class");
    var count = card.querySelector(".k-count");
    function filter() {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var cls = select.value;
      var shown = 0;
      rows.forEach(function (r, k) {
        var ok = (!cls || r.getAttribute("data-class") === cls) &&
          words.every(function (w) { return haystack[k].indexOf(w) >= 0; });
        r.hidden = !ok;
        if (ok) { shown++; }
      });
      count.textContent = shown === rows.length ? rows.length + (rows.length === 1 ? " row" : " rows") : shown + " of " + rows.length + " rows";
    }
    input.addEventListener("input", filter);
    select.addEventListener("change", filter);
    function highlight(k) {
      input.value = ""; select.value = ""; filter();
      rows.forEach(function (r) { r.classList.remove("hl"); });
      var row = tbody.querySelector('tr[data-k="' + k + '"]');
      if (row) { row.classList.add("hl"); row.scrollIntoView({ block: "center" }); }
    }
    return { highlight: highlight };
  }
  var tables = {};
  document.querySelectorAll("table.sortable").forEach(function (t) {
    var made = setupTable(t);
    if (t.classList.contains("kernels")) { tables[t.closest("section.rank").id] = made; }
  });

  // ---- GPU timeline: fine bins merged to columns at the current zoom; brush to zoom, shift-drag to pan ----
  var KIND_COLOR = { gpu: "#3b6fb6", stream: "#5b7fa8", cpu: "#e0913a" };
  function drawTimeline(node, d) {
    var W = Math.max(480, node.clientWidth), L = 150, R = 64, rowH = 16, gap = 5, top = 24;
    var card = node.closest(".card");
    var cp = d.critical && d.critical.steps && d.critical.steps.length ? d.critical : null;
    var toggle = card.querySelector(".tl-path-toggle");
    var showPath = !!cp && (!toggle || toggle.checked), bandH = 7, bandGap = 6;
    var rowsEnd = top + d.rows.length * (rowH + gap);
    var H = rowsEnd + (showPath ? bandH + bandGap : 0) + 26;
    var cw = W - L - R, nb = d.bins, binUs = d.span_us / nb;
    var view = node._view || [0, d.span_us];
    var ncol = Math.max(1, Math.floor(cw / 2));
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, "class": "tl-svg",
      "data-left": L, "data-width": cw, "data-columns": ncol });
    var colUs = (view[1] - view[0]) / ncol;
    var x = function (us) { return L + cw * (us - view[0]) / (view[1] - view[0]); };
    // steps: shaded bands, labels that fit (full, number only, or none), excluded steps marked
    d.steps.forEach(function (s, i) {
      if (s.end < view[0] || s.start > view[1]) { return; }
      var x0 = Math.max(L, x(s.start)), x1 = Math.min(L + cw, x(s.end)), w = x1 - x0;
      var excl = s.phase !== "steady";
      el("rect", { x: x0, y: top - 4, width: Math.max(1, w), height: H - top - 22,
        fill: excl ? "#fbeee0" : (i % 2 ? "#f4f6f9" : "#e9eef6"), "class": excl ? "tl-step excl" : "tl-step" }, svg);
      var label = s.label + (excl ? " · " + s.phase_text : "");
      var t = null;
      if (w > label.length * 6.2 + 6) { t = text(svg, (x0 + x1) / 2, 14, label, "middle", "tl-step-label"); }
      else if (w > 18) { t = text(svg, (x0 + x1) / 2, 14, s.label.replace("step ", ""), "middle", "tl-step-label"); }
      if (t && excl) { t.setAttribute("fill", "#a35a12"); }
    });
    var drawn = 0;
    var det = d.detail && (view[1] - view[0]) <= DETAIL_US && view[1] > d.detail.start && view[0] < d.detail.end
      ? decodeDetail(d.detail) : null;
    node.setAttribute("data-detail", det ? "1" : "0");
    var boxes = 0;
    d.rows.forEach(function (row, i) {
      var y = top + i * (rowH + gap);
      text(svg, 0, y + rowH - 4, row.label, "start");
      text(svg, W, y + rowH - 4, row.busy_text, "end");
      el("rect", { x: L, y: y, width: cw, height: rowH, fill: "#f1f3f6", "fill-opacity": 0.6 }, svg);
      var color = KIND_COLOR[row.kind] || "#5b7fa8";
      var g = el("g", { "class": "tl-row", "data-kind": row.kind }, svg);
      if (det) { boxes += drawBoxes(g, det, row, i, y, view, x, L, cw, rowH, color); if (i === 0) { drawn += boxes; } return; }
      for (var c = 0; c < ncol; c++) {
        var a = view[0] + c * colUs, b = a + colUs;
        var b0 = Math.max(0, Math.floor(a / binUs)), b1 = Math.min(nb, Math.max(b0 + 1, Math.ceil(b / binUs)));
        var sum = 0, any = false;
        for (var k = b0; k < b1; k++) { sum += row.busy[k]; if (row.busy[k] > 0) { any = true; } }
        if (!any) { continue; }
        var share = sum / (b1 - b0) / 1000;
        el("rect", { x: L + c * cw / ncol, y: y, width: cw / ncol + 0.3, height: rowH, fill: color,
          "fill-opacity": (0.12 + 0.88 * Math.min(1, share)).toFixed(2), "class": "tl-bin", "data-col": c }, g);
        if (i === 0) { drawn++; }
      }
    });
    node.setAttribute("data-view", view[0].toFixed(3) + "," + view[1].toFixed(3));
    node.setAttribute("data-drawn", String(drawn));
    if (showPath) { node.setAttribute("data-path-drawn", String(drawPath(svg, cp, view, x, L, cw, rowsEnd, bandH))); }
    else { node.removeAttribute("data-path-drawn"); }
    var axisY = rowsEnd + (showPath ? bandH + bandGap : 0) + 4;
    el("line", { x1: L, x2: L + cw, y1: axisY, y2: axisY, stroke: "#c9ced6" }, svg);
    var tstep = tickStep(view[1] - view[0], 5);
    for (var tv = Math.ceil(view[0] / tstep) * tstep; tv <= view[1] + 1e-9; tv += tstep) {
      var tx = x(tv);
      el("line", { x1: tx, x2: tx, y1: axisY, y2: axisY + 4, stroke: "#c9ced6", "class": "tl-tick" }, svg);
      text(svg, tx, axisY + 16, fmtAt(tv, tstep), tx < L + 30 ? "start" : tx > L + cw - 30 ? "end" : "middle", "tl-tick-label");
    }
    var brush = el("rect", { x: 0, y: top - 4, width: 0, height: H - top - 22, "class": "tl-brush" }, svg);
    brush.style.display = "none";
    var zoomed = view[0] > 0 || view[1] < d.span_us;
    var reset = card.querySelector(".tl-reset"), range = card.querySelector(".tl-range");
    reset.disabled = !zoomed;
    range.textContent = zoomed ? "showing " + fmtTime(view[0]) + " – " + fmtTime(view[1]) + " of " + fmtTime(d.span_us) : "whole trace, " + fmtTime(d.span_us);
    function svgX(ev) { var box = svg.getBoundingClientRect(); return (ev.clientX - box.left) * W / box.width; }
    function svgY(ev) { var box = svg.getBoundingClientRect(); return (ev.clientY - box.top) * H / box.height; }
    function usAt(px) { return view[0] + (Math.min(L + cw, Math.max(L, px)) - L) / cw * (view[1] - view[0]); }
    function setView(a, b) {
      var w = Math.max(b - a, binUs * 2);
      a = Math.max(0, Math.min(a, d.span_us - w));
      node._view = [a, Math.min(d.span_us, a + w)];
      redraw(node, d);
    }
    var drag = null;
    svg.addEventListener("mousedown", function (ev) {
      var px = svgX(ev);
      if (px < L || px > L + cw) { return; }
      ev.preventDefault();
      drag = { x: px, pan: ev.shiftKey, view: view.slice() };
    });
    svg.addEventListener("mousemove", function (ev) {
      var sx = svgX(ev), sy = svgY(ev);
      if (drag) {
        hideTip();
        if (drag.pan) {
          var shift = (drag.x - sx) / cw * (drag.view[1] - drag.view[0]);
          node._view = [drag.view[0] + shift, drag.view[1] + shift];
          var w = drag.view[1] - drag.view[0];
          if (node._view[0] < 0) { node._view = [0, w]; }
          if (node._view[1] > d.span_us) { node._view = [d.span_us - w, d.span_us]; }
          return;
        }
        brush.style.display = "";
        brush.setAttribute("x", Math.max(L, Math.min(drag.x, sx)));
        brush.setAttribute("width", Math.abs(Math.min(L + cw, Math.max(L, sx)) - drag.x));
        return;
      }
      if (showPath && sy >= rowsEnd - 1 && sy <= rowsEnd + bandH + 1 && sx >= L && sx <= L + cw) {
        var pc = Math.floor((sx - L) / (cw / ncol)), pa = view[0] + pc * colUs;
        showTip(ev, "critical path", pathLines(cp, pa, pa + colUs));
        return;
      }
      if (det) { if (!(ev.target && ev.target.classList && ev.target.classList.contains("tl-box"))) { hideTip(); } return; }
      var col = Math.floor((sx - L) / (cw / ncol)), ri = Math.floor((sy - top) / (rowH + gap));
      if (col < 0 || col >= ncol || ri < 0 || ri >= d.rows.length) { hideTip(); return; }
      var row = d.rows[ri], a = view[0] + col * colUs, b = a + colUs;
      var b0 = Math.max(0, Math.floor(a / binUs)), b1 = Math.min(nb, Math.max(b0 + 1, Math.ceil(b / binUs)));
      var sum = 0, best = -1, bestBusy = 0;
      for (var k = b0; k < b1; k++) { sum += row.busy[k]; if (row.top[k] >= 0 && row.busy[k] >= bestBusy) { best = row.top[k]; bestBusy = row.busy[k]; } }
      var lines = [fmtAt(a, colUs) + " – " + fmtAt(b, colUs), "busy " + (sum / (b1 - b0) / 10).toFixed(1) + "%"];
      if (best >= 0) { lines.push("mostly " + d.names[best] + (d.classes[best] ? " (" + d.classes[best] + ")" : "")); }
      var st = d.steps.filter(function (s) { return s.start <= b && s.end >= a; })[0];
      if (st) { lines.push(st.label + (st.phase !== "steady" ? " · " + st.phase_text + ", left out of the headline" : "")); }
      showTip(ev, row.label, lines);
    });
    svg.addEventListener("mouseleave", hideTip);
    function end(ev) {
      if (!drag) { return; }
      var d0 = drag;
      drag = null;
      if (d0.pan) { redraw(node, d); return; }
      var px = svgX(ev);
      brush.style.display = "none";
      if (Math.abs(px - d0.x) < 4) { return; }
      setView(usAt(Math.min(px, d0.x)), usAt(Math.max(px, d0.x)));
      node.focus({ preventScroll: true });  // arrow keys, +/- and Escape work right after a drag
    }
    svg.addEventListener("mouseup", end);
    window.addEventListener("mouseup", function (ev) { if (drag && drag.pan) { end(ev); } });
    if (!node._wired) {
      node._wired = true;
      reset.addEventListener("click", function () { node._view = null; redraw(node, d); });
      if (toggle) { toggle.addEventListener("change", function () { redraw(node, d); }); }
      node.addEventListener("keydown", function (ev) {
        var v = node._view || [0, d.span_us], w = v[1] - v[0];
        if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") {
          ev.preventDefault();
          var step = (ev.key === "ArrowLeft" ? -1 : 1) * w / 4;
          node._view = [Math.max(0, Math.min(d.span_us - w, v[0] + step)), 0];
          node._view[1] = node._view[0] + w;
          redraw(node, d);
          node.focus({ preventScroll: true });
        } else if (ev.key === "+" || ev.key === "=" || ev.key === "-" || ev.key === "_") {
          ev.preventDefault();
          var f = ev.key === "+" || ev.key === "=" ? 0.5 : 2, mid = (v[0] + v[1]) / 2, nw = Math.min(d.span_us, Math.max(w * f, binUs * 2));
          var a0 = Math.max(0, Math.min(d.span_us - nw, mid - nw / 2));
          node._view = [a0, a0 + nw];
          redraw(node, d);
          node.focus({ preventScroll: true });
        } else if (ev.key === "Escape") { node._view = null; redraw(node, d); }
      });
    }
    return svg;
  }
  // zoomed below DETAIL_US: each activity of the row as a box (GPU rows), launch calls and top-level ops (CPU row)
  function drawBoxes(g, det, row, i, y, view, x, L, cw, rowH, color) {
    var n = 0, lo = view[0] - det._maxd;
    function box(x0, x1, yy, hh, fill, cls, tipHead, tipLines) {
      var a = Math.max(L, x0), b = Math.min(L + cw, x1);
      if (b < L || a > L + cw) { return; }
      var r = el("rect", { x: a, y: yy, width: Math.max(1, b - a), height: hh, fill: fill, "class": "tl-box " + cls }, g);
      r.addEventListener("mousemove", function (ev) { showTip(ev, tipHead, tipLines()); });
      n++;
    }
    if (row.kind === "cpu") {
      var ot = det._ot, ol = firstFrom(ot, view[0] - 1e5);
      for (var k = ol; k < ot.length && ot[k] <= view[1]; k++) {
        var oe = ot[k] + det.ops.d[k];
        if (oe < view[0]) { continue; }
        (function (k, oe) {
          box(x(ot[k]), x(oe), y, rowH / 2 - 1, "#f3c892", "tl-op", det.names[det.ops.n[k]], function () {
            return ["CPU op", fmtTime(det.ops.d[k])]; });
        })(k, oe);
      }
      var lt = det._lt, ll = firstFrom(lt, view[0] - 1e4);
      for (k = ll; k < lt.length && lt[k] <= view[1]; k++) {
        var le = lt[k] + det.launch.d[k];
        if (le < view[0]) { continue; }
        (function (k, le) {
          box(x(lt[k]), x(le), y + rowH / 2, rowH / 2, color, "tl-launch", det.names[det.launch.n[k]], function () {
            return ["launch call", fmtTime(det.launch.d[k])]; });
        })(k, le);
      }
      return n;
    }
    var t = det._t, gd = det.gpu;
    for (var j = firstFrom(t, lo); j < t.length && t[j] <= view[1]; j++) {
      if (i !== 0 && gd.r[j] !== i) { continue; }
      var e = t[j] + gd.d[j];
      if (e < view[0]) { continue; }
      (function (j, e) {
        box(x(t[j]), x(e), y, rowH, color, "tl-kernel", det.names[gd.n[j]], function () {
          var out = [];
          if (gd.o[j] >= 0) { out.push("op " + det.names[gd.o[j]]); }
          if (gd.s[j] >= 0) { out.push("shapes " + det.shapes[gd.s[j]]); }
          out.push("duration " + fmtTime(gd.d[j]));
          out.push(gd.q[j] >= 0 ? "launch delay " + fmtTime(gd.q[j]) + " (start − end of its launch call)" : "no launch call linked");
          out.push("at " + fmtTime(t[j]));
          return out;
        });
      })(j, e);
    }
    return n;
  }
  // the critical-path band: per steady step, boundaries t (µs after the timeline start) and a kind digit per segment
  function drawPath(svg, cp, view, x, L, cw, y, h) {
    text(svg, 0, y + h, "critical path", "start", "tl-path-label");
    el("rect", { x: L, y: y, width: cw, height: h, fill: "#f1f3f6" }, svg);
    var g = el("g", { "class": "tl-path-band" }, svg), n = 0;
    cp.steps.forEach(function (st) {
      var t = st.t;
      if (!t.length || t[t.length - 1] < view[0] || t[0] > view[1]) { return; }
      for (var i = 0; i + 1 < t.length; i++) {
        if (t[i + 1] < view[0] || t[i] > view[1]) { continue; }
        var x0 = Math.max(L, x(t[i])), x1 = Math.min(L + cw, x(t[i + 1])), k = +st.k.charAt(i);
        el("rect", { x: x0, y: y, width: Math.max(0.6, x1 - x0), height: h, fill: cp.colors[k],
          "class": "tl-path-seg", "data-kind": cp.kinds[k] }, g);
        n++;
      }
    });
    return n;
  }
  function pathLines(cp, a, b) {  // time per kind of the path inside [a, b]
    var per = cp.kinds.map(function () { return 0; }), steps = [];
    cp.steps.forEach(function (st) {
      var t = st.t;
      if (!t.length || t[t.length - 1] <= a || t[0] >= b) { return; }
      steps.push(st.step);
      for (var i = 0; i + 1 < t.length; i++) {
        var lo = Math.max(a, t[i]), hi = Math.min(b, t[i + 1]);
        if (hi > lo) { per[+st.k.charAt(i)] += hi - lo; }
      }
    });
    var total = per.reduce(function (x, y) { return x + y; }, 0);
    if (!total) { return [fmtTime(a) + " – " + fmtTime(b), "no steady step drawn here"]; }
    var lines = [fmtTime(a) + " – " + fmtTime(b) + " · step " + steps.join(", ")];
    per.forEach(function (v, k) { if (v > 0) { lines.push(cp.labels[k] + ": " + fmtTime(v) + " (" + (100 * v / total).toFixed(0) + "%)"); } });
    return lines;
  }
  function redraw(node, d) {
    while (node.firstChild) { node.removeChild(node.firstChild); }
    node.appendChild(drawTimeline(node, d));
  }

  // ---- roofline (log-log) ----
  var ROOF_COLORS = ["#1d2330", "#4a5261", "#7a8291", "#9aa3b2", "#b8bcc4"];
  function drawRoofline(node, d) {
    var W = Math.max(480, node.clientWidth), H = 420, L = 64, R = 96, T = 14, B = 46;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H });
    var pts = d.points, roofs = d.roofs, bwG = d.bandwidth_gbps;
    var xs = pts.map(function (p) { return p.x; }), ys = pts.map(function (p) { return p.y; });
    var top = roofs.length ? roofs[0].tflops : Math.max.apply(null, ys.concat([1]));
    if (bwG) { roofs.forEach(function (r) { xs.push(r.tflops * 1000 / bwG); }); }
    ys = ys.concat(roofs.map(function (r) { return r.tflops; }));
    var lx0 = Math.floor(Math.log10(Math.min.apply(null, xs))), lx1 = Math.ceil(Math.log10(Math.max.apply(null, xs) * 1.5));
    var pmin = Math.min.apply(null, pts.map(function (p) { return p.y; }));
    var ly1 = Math.ceil(Math.log10(Math.max.apply(null, ys) * 1.6));
    var ly0 = Math.max(Math.floor(Math.log10(pmin)), ly1 - 7);  // at most seven decades: tinier points sit on the floor, hollow
    if (lx1 - lx0 < 2) { lx1 = lx0 + 2; }
    if (ly1 - ly0 < 2) { ly0 = ly1 - 2; }
    var cw = W - L - R, ch = H - T - B;
    var X = function (v) { return L + cw * (Math.log10(v) - lx0) / (lx1 - lx0); };
    var Y = function (v) { return T + ch * (1 - (Math.log10(v) - ly0) / (ly1 - ly0)); };
    var grid = el("g", { "class": "grid" }, svg), axis = el("g", { "class": "axis" }, svg);
    for (var e = lx0; e <= lx1; e++) {
      el("line", { x1: X(Math.pow(10, e)), x2: X(Math.pow(10, e)), y1: T, y2: T + ch }, grid);
      text(axis, X(Math.pow(10, e)), T + ch + 16, fmtDecade(e), "middle");
    }
    for (e = ly0; e <= ly1; e++) {
      el("line", { x1: L, x2: L + cw, y1: Y(Math.pow(10, e)), y2: Y(Math.pow(10, e)) }, grid);
      text(axis, L - 8, Y(Math.pow(10, e)) + 4, fmtDecade(e), "end");
    }
    el("rect", { x: L, y: T, width: cw, height: ch, fill: "none", stroke: "#c9ced6" }, axis);
    text(axis, L + cw / 2, H - 8, "arithmetic intensity (FLOP / byte)", "middle");
    var yl = text(axis, 14, T + ch / 2, "achieved TFLOP/s", "middle");
    yl.setAttribute("transform", "rotate(-90 14 " + (T + ch / 2) + ")");
    var xmin = Math.pow(10, lx0), xmax = Math.pow(10, lx1);
    roofs.forEach(function (r, i) {
      var color = ROOF_COLORS[Math.min(i, ROOF_COLORS.length - 1)];
      var ridge = bwG ? r.tflops * 1000 / bwG : xmin;
      var x0 = Math.max(xmin, ridge);
      var line = el("line", { x1: X(x0), x2: X(xmax), y1: Y(r.tflops), y2: Y(r.tflops), stroke: color, "class": "roof" }, svg);
      if (i > 0) { line.setAttribute("stroke-dasharray", "5 4"); }
      text(svg, X(xmax) + 6, Y(r.tflops) + 4, r.dtype + " " + r.text.replace(" TFLOP/s", ""), "start");
    });
    if (bwG && roofs.length) {
      var ridge0 = roofs[0].tflops * 1000 / bwG;
      var xa = Math.max(xmin, Math.pow(10, ly0) * 1000 / bwG);
      el("line", { x1: X(xa), y1: Y(bwG * xa / 1000), x2: X(ridge0), y2: Y(roofs[0].tflops), stroke: "#1d2330", "class": "roof" }, svg);
      var mx = Math.sqrt(xa * ridge0), my = bwG * mx / 1000;
      var ang = Math.atan2(Y(roofs[0].tflops) - Y(bwG * xa / 1000), X(ridge0) - X(xa)) * 180 / Math.PI;
      var lab = text(svg, X(mx), Y(my) - 6, "memory " + d.bandwidth_text, "middle");
      lab.setAttribute("transform", "rotate(" + ang.toFixed(1) + " " + X(mx) + " " + (Y(my) - 6) + ")");
    }
    var tmax = Math.max.apply(null, pts.map(function (p) { return p.t; }).concat([1e-9]));
    var g = el("g", {}, svg);
    pts.slice().reverse().forEach(function (p) {
      var below = p.y < Math.pow(10, ly0);
      var c = el("circle", { cx: X(p.x), cy: Y(Math.max(p.y, Math.pow(10, ly0))), "data-row": p.row, r: (2.5 + 9 * Math.sqrt(p.t / tmax)).toFixed(1), fill: below ? "none" : p.color, color: p.color, "class": below ? "pt below" : "pt" }, g);
      var title = el("title", {}, c);
      title.textContent = p.name + "\n" + p.label;
      c.addEventListener("mousemove", function (ev) { showTip(ev, p.name, [p.label, p.cls + " · " + sig(p.x) + " FLOP/B"]); });
      c.addEventListener("mousemove", function (ev) { showTip(ev, p.name, [p.label, p.cls + " · " + sig(p.x) + " FLOP/B" + (below ? " · below the chart floor" : "")]); });
      c.addEventListener("click", function () {
        var t = tables[node.closest("section.rank").id];
        if (t) { t.highlight(p.row); }
      });
    });
    var seen = {}, lx = L + 10, ly = T + 14;
    pts.forEach(function (p) {
      if (seen[p.cls]) { return; }
      seen[p.cls] = true;
      el("circle", { cx: lx, cy: ly - 4, r: 4, fill: p.color }, svg);
      text(svg, lx + 8, ly, p.cls, "start");
      ly += 15;
    });
    return svg;
  }

  var DRAW = { timeline: drawTimeline, roofline: drawRoofline };
  function drawCharts() {
    document.querySelectorAll("[data-chart]").forEach(function (node) {
      if (node.offsetParent === null) { return; }
      var w = node.clientWidth;
      if (node.getAttribute("data-w") === String(w)) { return; }
      var d = data(node);
      if (!d) { return; }
      while (node.firstChild) { node.removeChild(node.firstChild); }
      node.appendChild(DRAW[node.getAttribute("data-chart")](node, d));
      node.setAttribute("data-w", String(w));
    });
  }
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(drawCharts, 120);
  });
  drawCharts();
  window.tracekitReport = { renderMs: performance.now() - t0 };
})();
