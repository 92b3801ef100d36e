// The run report's timeline: holders per key and worker, fault bands, writes and
// violations, drawn on a canvas (fast for 100,000-op runs: only what is in view is
// drawn). Data: the JSON in <script id="lc-data">, built by results/timeline.py.
(function () {
  "use strict";
  var t0 = performance.now();
  var D = JSON.parse(document.getElementById("lc-data").textContent);
  var T = D.timeline;
  var REASON_COLORS = D.reason_colors;
  var KIND_COLORS = {"overlap": "#c0392b", "lease": "#d35400", "stale-write": "#8e0000",
                     "interleaved": "#a93226", "duplicate-fence": "#7f3c8d",
                     "superseded-renewal": "#b9770e", "deposed-leader": "#6e2c00"};
  var KIND_NAMES = {"overlap": "overlapping holders", "lease": "granted while a lease was valid",
                    "stale-write": "stale write accepted", "interleaved": "older holder overwrote newer",
                    "duplicate-fence": "duplicate fence",
                    "superseded-renewal": "renewal after another's grant",
                    "deposed-leader": "deposed leader's action accepted"};
  var LEFT = 86, AXIS = 22, KEY_H = 17, GAP = 5, RIGHT = 10;
  var nLanes = T.lanes.reduce(function (a, l) { return a + l.length; }, 0);
  var LANE_H = nLanes > 60 ? 8 : (nLanes > 30 ? 10 : 13);

  var main = document.getElementById("tl-main");
  var over = document.getElementById("tl-overview");
  var tip = document.getElementById("tl-tip");
  var rangeEl = document.getElementById("tl-range");
  var ctx = main.getContext("2d"), octx = over.getContext("2d");
  var S = T.secs, W = T.writes;
  var tEnd = Math.max(T.t_end, 1);
  var v0 = 0, v1 = tEnd, width = 800, height = 100;
  var selected = -1;
  var enabled = {};
  Object.keys(KIND_COLORS).forEach(function (k) { enabled[k] = true; });
  document.querySelectorAll("input[data-kind]").forEach(function (box) {
    enabled[box.getAttribute("data-kind")] = box.checked;
  });

  // rows: a header per key, then one lane per worker
  var keyTop = [], lanesTop = [], y = AXIS;
  T.keys.forEach(function (k, i) {
    keyTop.push(y);
    lanesTop.push(y + KEY_H);
    y += KEY_H + T.lanes[i].length * LANE_H + GAP;
  });
  height = y + 4;

  // sections grouped per lane, sorted by start; the longest per lane bounds the search
  var laneSecs = T.keys.map(function (_, k) { return T.lanes[k].map(function () { return []; }); });
  var laneMax = T.keys.map(function (_, k) { return T.lanes[k].map(function () { return 0; }); });
  for (var i = 0; i < S.s.length; i++) {
    laneSecs[S.k[i]][S.l[i]].push(i);
    laneMax[S.k[i]][S.l[i]] = Math.max(laneMax[S.k[i]][S.l[i]], S.e[i] - S.s[i]);
  }
  laneSecs.forEach(function (ls) { ls.forEach(function (a) { a.sort(function (x, y) { return S.s[x] - S.s[y]; }); }); });
  var flagged = {};  // section -> kinds of the violations it is part of
  T.viols.forEach(function (v) {
    v.secs.forEach(function (s) { (flagged[s] = flagged[s] || []).push(v.kind); });
  });
  function isFlagged(n) {
    var ks = flagged[n];
    return !!ks && ks.some(function (k) { return enabled[k]; });
  }
  var laneWrites = T.keys.map(function (_, k) { return T.lanes[k].map(function () { return []; }); });
  for (i = 0; i < W.t.length; i++) { laneWrites[W.k[i]][W.l[i]].push(i); }

  function X(t) { return LEFT + (t - v0) / (v1 - v0) * (width - LEFT - RIGHT); }
  function Tm(x) { return v0 + (x - LEFT) / (width - LEFT - RIGHT) * (v1 - v0); }
  function fmt(us) {
    var a = Math.abs(us);
    if (a === 0) { return "0 s"; }
    if (a >= 1e6) { return (us / 1e6).toFixed(a >= 1e8 ? 1 : 3) + " s"; }
    if (a >= 1e3) { return (us / 1e3).toFixed(1) + " ms"; }
    return us.toFixed(0) + " µs";
  }
  function tickLabel(us, step) {
    if (step >= 1e5) { return (us / 1e6).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e6) + 1e-9))) + " s"; }
    return (us / 1e3).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e3) + 1e-9))) + " ms";
  }
  function lowerBound(arr, key, val) {
    var lo = 0, hi = arr.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (key[arr[m]] < val) { lo = m + 1; } else { hi = m; } }
    return lo;
  }
  function setup(canvas, c, w, h) {
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
  }
  function resize() {
    width = Math.max(400, main.parentNode.clientWidth);
    setup(main, ctx, width, height);
    setup(over, octx, width, 34);
    draw();
  }

  function ticks() {
    var span = v1 - v0, target = (width - LEFT) / 110, raw = span / target;
    var p = Math.pow(10, Math.floor(Math.log10(raw))), step = p;
    [1, 2, 5, 10].some(function (m) { step = m * p; return step >= raw; });
    var out = [];
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) { out.push(t); }
    return {ts: out, step: step};
  }

  var drawn = 0;
  function draw() {
    var c = ctx;
    c.clearRect(0, 0, width, height);
    c.save();
    c.beginPath(); c.rect(LEFT, 0, width - LEFT, height); c.clip();
    // fault bands
    T.faults.forEach(function (f) {
      var a = X(f[0]), b = X(f[1]);
      if (b < LEFT || a > width) { return; }
      c.fillStyle = T.fault_colors[f[2]];
      c.globalAlpha = 0.17;
      c.fillRect(a, AXIS, Math.max(2, b - a), height - AXIS);
      c.globalAlpha = 0.9;
      c.fillRect(a, AXIS, Math.max(2, b - a), 3);
      c.globalAlpha = 1;
      if (b - a > 60) {
        c.fillStyle = "#39424e"; c.font = "10px system-ui, sans-serif";
        c.fillText(T.fault_names[f[2]] + (f[3] ? ": " + f[3] : ""), Math.max(a, LEFT) + 3, AXIS + 12, Math.min(b, width) - Math.max(a, LEFT) - 6);
      }
    });
    c.restore();
    // key rows and labels
    c.font = "11px system-ui, sans-serif";
    T.keys.forEach(function (k, ki) {
      var top = keyTop[ki], h = KEY_H + T.lanes[ki].length * LANE_H;
      c.fillStyle = "#1d2330"; c.font = "bold 12px system-ui, sans-serif";
      c.fillText(k, 6, top + 12, LEFT - 10);
      c.strokeStyle = "#e3e7ee"; c.beginPath(); c.moveTo(0, top + h + GAP / 2); c.lineTo(width, top + h + GAP / 2); c.stroke();
      c.font = "10px system-ui, sans-serif"; c.fillStyle = "#5f6b7a";
      T.lanes[ki].forEach(function (w, li) {
        var ly = lanesTop[ki] + li * LANE_H;
        if (LANE_H >= 10) { c.fillText("w" + w, 14, ly + LANE_H - 3); }
        if (li % 2) { c.fillStyle = "rgba(0,0,0,0.025)"; c.fillRect(LEFT, ly, width - LEFT, LANE_H); c.fillStyle = "#5f6b7a"; }
      });
    });
    c.save();
    c.beginPath(); c.rect(LEFT, AXIS, width - LEFT, height - AXIS); c.clip();
    // holders
    drawn = 0;
    var px = (v1 - v0) / (width - LEFT - RIGHT);
    for (var ki = 0; ki < T.keys.length; ki++) {
      for (var li = 0; li < T.lanes[ki].length; li++) {
        var arr = laneSecs[ki][li], ly = lanesTop[ki] + li * LANE_H;
        var j = lowerBound(arr, S.s, v0 - laneMax[ki][li]);
        for (; j < arr.length; j++) {
          var n = arr[j];
          if (S.s[n] > v1) { break; }
          if (S.e[n] < v0) { continue; }
          var a = X(S.s[n]), w = Math.max(1, (S.e[n] - S.s[n]) / px);
          c.fillStyle = REASON_COLORS[T.reasons[S.r[n]]];
          c.fillRect(a, ly + 2, w, LANE_H - 3);
          if (isFlagged(n)) {
            c.strokeStyle = "#c0392b"; c.lineWidth = 2;
            c.strokeRect(a - 1, ly + 1, w + 2, LANE_H - 1); c.lineWidth = 1;
          }
          if (w > 36 && LANE_H >= 10 && S.f[n] !== null) {
            c.fillStyle = "#fff"; c.font = "9px system-ui, sans-serif";
            c.fillText("f" + S.f[n], a + 3, ly + LANE_H - 3, w - 5);
          }
          drawn++;
        }
        // writes: accepted = tick, save = green triangle (a short green tick when zoomed
        // out, so thousands of them do not hide the holders), stale accepted = red cross
        var ws = laneWrites[ki][li], dense = px > 2000;
        for (var q = 0; q < ws.length; q++) {
          var m = ws[q], t = W.t[m];
          if (t < v0 || t > v1) { continue; }
          var wx = X(t);
          if (W.st[m] === 0) {
            c.fillStyle = "#0b1a2e"; c.fillRect(wx - 0.5, ly + 1, 1.5, LANE_H - 1);
          } else if (W.st[m] === 1 && dense) {
            c.fillStyle = "#1f9d55"; c.fillRect(wx - 0.5, ly, 1.5, 3);
          } else if (W.st[m] === 1) {
            c.fillStyle = "#1f9d55"; c.beginPath();
            c.moveTo(wx - 4, ly); c.lineTo(wx + 4, ly); c.lineTo(wx, ly + LANE_H - 2); c.closePath(); c.fill();
          } else {
            c.strokeStyle = "#8e0000"; c.lineWidth = 2.5; c.beginPath();
            c.moveTo(wx - 5, ly - 1); c.lineTo(wx + 5, ly + LANE_H + 1);
            c.moveTo(wx + 5, ly - 1); c.lineTo(wx - 5, ly + LANE_H + 1); c.stroke(); c.lineWidth = 1;
          }
        }
      }
    }
    // violations over their key's rows; numbers only where there is room for them
    var lastLabel = T.keys.map(function () { return -1e9; });
    T.viols.forEach(function (v, vi) {
      if (!enabled[v.kind]) { return; }
      var ki = T.keys.indexOf(v.key);
      if (ki < 0) { return; }
      var top = keyTop[ki] + 2, h = KEY_H + T.lanes[ki].length * LANE_H - 2;
      var col = KIND_COLORS[v.kind] || "#c0392b";
      c.strokeStyle = col; c.fillStyle = col;
      if (v.band) {
        var a = X(v.band[0]), b = X(v.band[1]);
        if (b >= LEFT && a <= width) {
          c.globalAlpha = vi === selected ? 0.38 : 0.2;
          c.fillRect(a, top, Math.max(3, b - a), h);
          c.globalAlpha = 1;
          c.lineWidth = vi === selected ? 2 : 1;
          c.strokeRect(a, top, Math.max(3, b - a), h);
          c.lineWidth = 1;
        }
      }
      v.marks.forEach(function (t) {
        var x = X(t);
        if (x < LEFT || x > width) { return; }
        c.fillRect(x - 1, top, 2, h);
      });
      var lx = v.band ? X(v.band[0]) : X(v.marks[0]);
      if (lx >= LEFT - 20 && lx <= width && (lx - lastLabel[ki] > 26 || vi === selected)) {
        c.font = "bold 10px system-ui, sans-serif";
        c.fillText("#" + (vi + 1), Math.max(lx, LEFT) + 3, top + 10);
        lastLabel[ki] = lx;
      }
    });
    c.restore();
    // axis
    c.fillStyle = "#fff"; c.fillRect(0, 0, width, AXIS);
    c.fillStyle = "#5f6b7a"; c.strokeStyle = "#d0d6de"; c.font = "10px system-ui, sans-serif";
    var tk = ticks();
    tk.ts.forEach(function (t) {
      var x = X(t);
      c.beginPath(); c.moveTo(x, AXIS - 5); c.lineTo(x, height); c.globalAlpha = 0.35; c.stroke(); c.globalAlpha = 1;
      c.fillText(tickLabel(t, tk.step), x + 2, AXIS - 8);
    });
    drawOverview();
    rangeEl.textContent = fmt(v0) + " – " + fmt(v1) + "  (" + fmt(v1 - v0) + " shown of " + fmt(tEnd) + ")";
  }

  function drawOverview() {
    var c = octx, w = width - LEFT - RIGHT;
    function OX(t) { return LEFT + t / tEnd * w; }
    c.clearRect(0, 0, width, 34);
    c.fillStyle = "#5f6b7a"; c.font = "10px system-ui, sans-serif";
    c.fillText("whole run", 6, 20);
    T.faults.forEach(function (f) {
      c.fillStyle = T.fault_colors[f[2]]; c.globalAlpha = 0.35;
      c.fillRect(OX(f[0]), 4, Math.max(1.5, OX(f[1]) - OX(f[0])), 26); c.globalAlpha = 1;
    });
    c.fillStyle = "#1f9d55";
    for (var m = 0; m < W.t.length; m++) { if (W.st[m] === 1) { c.fillRect(OX(W.t[m]), 24, 1, 6); } }
    T.viols.forEach(function (v) {
      if (!enabled[v.kind]) { return; }
      c.fillStyle = KIND_COLORS[v.kind] || "#c0392b";
      var t = v.band ? v.band[0] : v.marks[0];
      c.fillRect(OX(t) - 0.5, 4, 2, 18);
    });
    c.strokeStyle = "#1f5fa8"; c.lineWidth = 2;
    c.strokeRect(OX(Math.max(0, v0)), 2, Math.max(3, OX(Math.min(tEnd, v1)) - OX(Math.max(0, v0))), 30);
    c.lineWidth = 1;
  }

  var pending = false;
  function redraw() { if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; draw(); }); } }
  function setView(a, b) {
    var span = Math.max(b - a, 20);  // 20 µs: the deepest zoom
    var pad = tEnd * 0.02;
    if (span > tEnd + 2 * pad) { span = tEnd + 2 * pad; }
    if (a < -pad) { a = -pad; } if (a + span > tEnd + pad) { a = tEnd + pad - span; }
    v0 = a; v1 = a + span; redraw();
  }
  function zoom(f, at) { var c = at === undefined ? (v0 + v1) / 2 : at; setView(c - (c - v0) * f, c + (v1 - c) * f); }
  function focus(vi) {
    var v = T.viols[vi], ts = v.marks.slice();
    if (v.band) { ts.push(v.band[0], v.band[1]); }
    var a = Math.min.apply(null, ts), b = Math.max.apply(null, ts);
    var pad = Math.max((b - a) * 1.5, 100000);  // at least 100 ms each side
    selected = vi;
    setView(a - pad, b + pad);
    document.getElementById("timeline").scrollIntoView({behavior: "smooth", block: "start"});
  }

  // interaction
  var drag = null;
  main.addEventListener("mousedown", function (e) { drag = {x: e.clientX, v0: v0, v1: v1}; main.style.cursor = "grabbing"; });
  window.addEventListener("mouseup", function () { drag = null; main.style.cursor = "grab"; });
  window.addEventListener("mousemove", function (e) {
    if (!drag) { return; }
    var dt = (e.clientX - drag.x) / (width - LEFT - RIGHT) * (drag.v1 - drag.v0);
    setView(drag.v0 - dt, drag.v1 - dt);
  });
  main.addEventListener("wheel", function (e) {
    var r = main.getBoundingClientRect();
    if (e.ctrlKey || e.altKey || e.metaKey) {
      e.preventDefault();
      zoom(e.deltaY > 0 ? 1.25 : 0.8, Tm(e.clientX - r.left));
    } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      e.preventDefault();
      var d = (e.deltaX || e.deltaY) / (width - LEFT) * (v1 - v0);
      setView(v0 + d, v1 + d);
    }
  }, {passive: false});
  main.addEventListener("dblclick", function (e) {
    var r = main.getBoundingClientRect();
    zoom(e.shiftKey ? 2 : 0.5, Tm(e.clientX - r.left));
  });
  function overviewAt(e) {
    var r = over.getBoundingClientRect();
    var t = (e.clientX - r.left - LEFT) / (width - LEFT - RIGHT) * tEnd, half = (v1 - v0) / 2;
    setView(t - half, t + half);
  }
  var odrag = false;
  over.addEventListener("mousedown", function (e) { odrag = true; overviewAt(e); });
  window.addEventListener("mouseup", function () { odrag = false; });
  over.addEventListener("mousemove", function (e) { if (odrag) { overviewAt(e); } });

  main.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  main.addEventListener("mousemove", function (e) {
    if (drag) { tip.style.display = "none"; return; }
    var r = main.getBoundingClientRect(), x = e.clientX - r.left, yy = e.clientY - r.top;
    var lines = describe(x, yy);
    if (!lines.length) { tip.style.display = "none"; return; }
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    var left = x + 14, wrapW = main.parentNode.clientWidth;
    if (left + tip.offsetWidth > wrapW) { left = x - tip.offsetWidth - 10; }
    tip.style.left = left + "px"; tip.style.top = (yy + over.offsetHeight + 12) + "px";
  });
  function describe(x, yy) {
    if (x < LEFT) { return []; }
    var t = Tm(x), px = (v1 - v0) / (width - LEFT - RIGHT), out = [];
    for (var ki = 0; ki < T.keys.length; ki++) {
      var top = keyTop[ki], bottom = lanesTop[ki] + T.lanes[ki].length * LANE_H;
      if (yy < top || yy > bottom) { continue; }
      out.push(T.keys[ki] + " at " + fmt(t));
      var li = Math.floor((yy - lanesTop[ki]) / LANE_H);
      if (li >= 0 && li < T.lanes[ki].length) {
        var arr = laneSecs[ki][li];
        for (var j = lowerBound(arr, S.s, t - laneMax[ki][li] - 2 * px); j < arr.length && S.s[arr[j]] <= t + 2 * px; j++) {
          var n = arr[j];
          if (S.e[n] + 2 * px >= t) {
            out.push("worker " + T.lanes[ki][li] + ", process " + S.p[n] + ", fence " + S.f[n]);
            out.push("held " + fmt(S.s[n]) + " → " + fmt(S.e[n]) + " (" + fmt(S.e[n] - S.s[n]) + "), exit: " + T.reasons[S.r[n]]);
          }
        }
        laneWrites[ki][li].forEach(function (m) {
          if (Math.abs(W.t[m] - t) <= 4 * px) {
            out.push(["write accepted", "write REJECTED by the fence (a save)", "STALE write ACCEPTED"][W.st[m]] + ": fence " + W.f[m] + " at " + fmt(W.t[m]));
          }
        });
      }
      T.viols.forEach(function (v, vi) {
        if (v.key !== T.keys[ki] || !enabled[v.kind]) { return; }
        var hit = v.band && t >= v.band[0] - 3 * px && t <= v.band[1] + 3 * px;
        v.marks.forEach(function (m) { if (Math.abs(m - t) <= 4 * px) { hit = true; } });
        if (hit) { out.push("#" + (vi + 1) + " " + KIND_NAMES[v.kind] + ": " + v.text); }
      });
    }
    T.faults.forEach(function (f) {
      if (t >= f[0] && t <= f[1]) { out.push("fault " + T.fault_names[f[2]] + (f[3] ? ": " + f[3] : "") + " (" + fmt(f[0]) + " – " + fmt(f[1]) + ")"); }
    });
    return out;
  }

  function button(id, fn) { var b = document.getElementById(id); if (b) { b.addEventListener("click", fn); } }
  button("tl-fit", function () { selected = -1; setView(0, tEnd); });
  button("tl-in", function () { zoom(0.5); });
  button("tl-out", function () { zoom(2); });
  button("tl-prev", function () { var s = v1 - v0; setView(v0 - s * 0.9, v1 - s * 0.9); });
  button("tl-next", function () { var s = v1 - v0; setView(v0 + s * 0.9, v1 + s * 0.9); });
  button("tl-next-viol", function () {
    if (!T.viols.length) { return; }
    for (var k = 1; k <= T.viols.length; k++) {
      var vi = (selected + k) % T.viols.length;
      if (enabled[T.viols[vi].kind]) { focus(vi); return; }
    }
  });
  document.querySelectorAll("input[data-kind]").forEach(function (box) {
    box.addEventListener("change", function () { enabled[box.getAttribute("data-kind")] = box.checked; redraw(); });
  });
  document.querySelectorAll("ol.viols li[data-v]").forEach(function (li) {
    li.addEventListener("click", function () { focus(+li.getAttribute("data-v")); });
  });
  window.addEventListener("resize", resize);

  resize();
  // #t=12.1-12.6 (seconds) opens that window; #v=3 opens violation 3
  var h = /t=([0-9.]+)-([0-9.]+)/.exec(location.hash), hv = /v=([0-9]+)/.exec(location.hash);
  if (h) { setView(parseFloat(h[1]) * 1e6, parseFloat(h[2]) * 1e6); draw(); }
  else if (hv && T.viols[+hv[1] - 1]) { focus(+hv[1] - 1); draw(); }
  var root = document.documentElement;
  if (/bench/.test(location.hash)) {
    // #bench: time redraws while zooming in from the whole run (benchmarks/bench_report.py)
    var times = [];
    for (var z = 0; z < 20; z++) {
      zoom(0.7);
      var tz = performance.now(); draw(); times.push(performance.now() - tz);
    }
    setView(0, tEnd);
    var tz0 = performance.now(); draw(); times.push(performance.now() - tz0);
    root.setAttribute("data-redraw-ms-max", String(Math.round(Math.max.apply(null, times))));
    root.setAttribute("data-redraw-ms-mean", String(Math.round(times.reduce(function (a, b) { return a + b; }, 0) / times.length)));
  }
  root.setAttribute("data-timeline-bars", String(S.s.length));
  root.setAttribute("data-timeline-drawn", String(drawn));
  root.setAttribute("data-timeline-ms", String(Math.round(performance.now() - t0)));
  root.setAttribute("data-timeline-ready", "1");
})();
