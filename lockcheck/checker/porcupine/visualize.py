"""One self-contained HTML page showing a check: timelines and (partial) linearizations.

The page has no external resources (inline CSS, JS and JSON data) and reads offline.
Each partition gets a timeline, one row per client, each operation a bar over its
interval (time is compressed to the rank of the distinct timestamps, so that short and
long gaps look alike). A linearization (the complete one of an OK partition, or one of
the longest partial ones of an illegal partition) is drawn as a line through the chosen
linearization points; hovering an operation shows the states before and after it, and
clicking it selects the longest partial linearization that contains it. Operations that
the search could not place after the longest prefix are marked in red.

Big histories are cut: illegal partitions come first and each partition shows at most
`MAX_OPS_PER_PARTITION` operations around the point where the search got stuck; the
page says what was left out.
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any, TextIO

from .model import UNKNOWN, CheckResult, LinearizationInfo, Model, Operation, PartitionInfo

MAX_OPS_PER_PARTITION = 400
MAX_OPS_TOTAL = 2000
MAX_LINEARIZATIONS = 8
MAX_TEXT = 200  # characters per description


def _clip(s: str) -> str:
    return s if len(s) <= MAX_TEXT else s[: MAX_TEXT - 1] + "…"


def _output(op: Operation) -> Any:
    return UNKNOWN if op.return_time == math.inf else op.output


def _stuck(part: PartitionInfo, best: tuple[int, ...]) -> list[int]:
    """Ops not in `best` that could have come next in real time."""
    done = set(best)
    pending = [i for i in range(len(part.history)) if i not in done]
    if not pending:
        return []
    horizon = min(part.history[i].return_time for i in pending)
    return [i for i in pending if part.history[i].call <= horizon]


def _window(part: PartitionInfo, focus: list[int], limit: int) -> list[int]:
    """At most `limit` op indices, in call order, centred on the `focus` ops."""
    n = len(part.history)
    order = sorted(range(n), key=lambda i: (part.history[i].call, i))
    if n <= limit:
        return order
    rank = {i: r for r, i in enumerate(order)}
    centre = min((rank[i] for i in focus), default=n - 1)
    lo = max(0, min(centre - (2 * limit) // 3, n - limit))
    return order[lo : lo + limit]


def _partition_data(
    model: Model[Any, Any, Any], number: int, part: PartitionInfo, limit: int
) -> dict[str, Any]:
    hist = part.history
    lins = list(part.partial_linearizations[:MAX_LINEARIZATIONS])
    best = lins[0] if lins else ()
    stuck = _stuck(part, best) if part.result is CheckResult.ILLEGAL else []
    focus = stuck or list(best[-1:])
    shown = _window(part, focus, limit)
    shown_set = set(shown)

    # compressed time: rank of each distinct finite timestamp, in steps of 100
    stamps = sorted({t for i in shown for t in (hist[i].call, hist[i].return_time)} - {math.inf})
    rank = {t: 100 * (r + 1) for r, t in enumerate(stamps)}
    end = 100 * (len(stamps) + 2)
    local = {i: k for k, i in enumerate(shown)}
    ops = []
    for i in shown:
        op = hist[i]
        ops.append(
            {
                "i": i,
                "c": op.client_id,
                "s": rank[op.call],
                "e": end if op.return_time == math.inf else rank[op.return_time],
                "d": _clip(model.describe_operation(op.input, _output(op))),
                "t": f"{op.call!r} .. "
                + ("never (crashed)" if op.return_time == math.inf else repr(op.return_time)),
            }
        )

    lin_data = []
    for lin in lins:
        state = model.init()
        steps = []
        for i in lin:
            op = hist[i]
            ok, state = model.step(state, op.input, _output(op))
            if i in shown_set:
                steps.append([local[i], _clip(model.describe_state(state)) if ok else "?"])
        lin_data.append({"len": len(lin), "steps": steps})
    first_of: dict[int, int] = {}
    for j, lin in enumerate(lins):
        for i in lin:
            if i in shown_set:
                first_of.setdefault(local[i], j)

    notes = []
    if part.note:
        notes.append(part.note)
    if len(shown) < len(hist):
        notes.append(
            f"{len(hist) - len(shown)} of {len(hist)} operations not shown "
            f"(showing {len(shown)} around the point where the search got stuck)"
        )
    if len(part.partial_linearizations) > len(lins):
        notes.append(
            f"{len(part.partial_linearizations) - len(lins)} shorter partial "
            "linearizations not shown"
        )
    return {
        "n": number,
        "result": part.result.value,
        "size": len(hist),
        "init": _clip(model.describe_state(model.init())),
        "ops": ops,
        "lins": lin_data,
        "first": {str(k): v for k, v in first_of.items()},
        "stuck": [local[i] for i in stuck if i in shown_set],
        "end": end,
        "notes": notes,
    }


def _page_data(model: Model[Any, Any, Any], info: LinearizationInfo) -> dict[str, Any]:
    order = sorted(
        range(len(info.partitions)),
        key=lambda j: (info.partitions[j].result is not CheckResult.ILLEGAL, j),
    )
    parts: list[dict[str, Any]] = []
    skipped: list[str] = []
    budget = MAX_OPS_TOTAL
    for j in order:
        part = info.partitions[j]
        limit = min(MAX_OPS_PER_PARTITION, budget)
        if limit <= 0 or (parts and part.result is CheckResult.OK and limit < len(part.history)):
            skipped.append(f"partition {j} ({part.result.value}, {len(part.history)} ops)")
            continue
        data = _partition_data(model, j, part, limit)
        budget -= len(data["ops"])
        parts.append(data)
    results = {p.result for p in info.partitions}
    overall = (
        "illegal"
        if CheckResult.ILLEGAL in results
        else ("unknown" if CheckResult.UNKNOWN in results or not info.partitions else "ok")
    )
    return {
        "result": overall,
        "note": info.note,
        "elapsed": round(info.elapsed_s, 3),
        "partitions": parts,
        "skipped": skipped,
    }


def visualize(
    model: Model[Any, Any, Any], info: LinearizationInfo, out: TextIO | str | os.PathLike[str]
) -> None:
    """Write the HTML page for `info` (from a ``*_verbose`` check) to a stream or a path."""
    data = json.dumps(_page_data(model, info), separators=(",", ":"))
    data = data.replace("</", "<\\/")  # cannot close the script element early
    page = (
        _PAGE.replace("%TITLE%", html.escape(f"lockcheck linearizability: {_page_title(info)}"))
        .replace("%CSS%", _CSS)
        .replace("%JS%", _JS)
        .replace("%DATA%", data)
    )
    if isinstance(out, str | os.PathLike):
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    else:
        out.write(page)


def _page_title(info: LinearizationInfo) -> str:
    n = sum(p.result is CheckResult.ILLEGAL for p in info.partitions)
    return f"{n} illegal partition(s) of {len(info.partitions)}"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%TITLE%</title>
<style>%CSS%</style></head>
<body><div id="head"></div><div id="parts"></div><div id="tip"></div>
<script type="application/json" id="data">%DATA%</script>
<script>%JS%</script>
</body></html>
"""

_CSS = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222 }
h1 { font-size: 18px; margin: 0 0 4px }
h2 { font-size: 15px; margin: 18px 0 4px }
.ok { color: #1a7f37 } .illegal { color: #c62828 } .unknown { color: #8a6d00 }
.note { color: #555; margin: 2px 0 }
.box { overflow-x: auto; border: 1px solid #ddd; padding: 4px }
svg text { font-size: 11px }
.bar { fill: #cfd8dc; stroke: #78909c }
.bar.lin { fill: #c8e6c9; stroke: #388e3c }
.bar.stuck { fill: #ffcdd2; stroke: #c62828 }
.bar.sel { stroke-width: 2.5px }
.bar.crash { stroke-dasharray: 4 3 }
.lp { fill: #1565c0 }
.lpline { fill: none; stroke: #1565c0; stroke-width: 1.2 }
table { border-collapse: collapse; margin-top: 6px }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top;
  font-family: ui-monospace, monospace; font-size: 12px }
tr.hl { background: #fff3c4 }
#tip { position: fixed; display: none; background: #263238; color: #fff; padding: 6px 8px;
  border-radius: 4px; max-width: 520px; font-family: ui-monospace, monospace; font-size: 12px;
  pointer-events: none; white-space: pre-wrap }
select { margin: 4px 0 }
"""

_JS = r"""
(function () {
const D = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";  // a namespace name, nothing is fetched
const tip = document.getElementById("tip");
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function sv(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
const head = document.getElementById("head");
const h1 = el("h1", {}, "Linearizability check: ");
h1.appendChild(el("span", {class: D.result}, D.result.toUpperCase()));
head.appendChild(h1);
if (D.note) head.appendChild(el("div", {class: "note"}, D.note));
head.appendChild(el("div", {class: "note"},
  "checked in " + D.elapsed + " s; " + D.partitions.length + " partition(s) shown"));
if (D.skipped.length) {
  head.appendChild(el("div", {class: "note"}, "not shown: " + D.skipped.join(", ")));
}
const root = document.getElementById("parts");
D.partitions.forEach(drawPartition);

function drawPartition(P) {
  const sec = el("div");
  root.appendChild(sec);
  const h = el("h2", {}, "Partition " + P.n + " (" + P.size + " ops): ");
  h.appendChild(el("span", {class: P.result}, P.result));
  sec.appendChild(h);
  P.notes.forEach(n => sec.appendChild(el("div", {class: "note"}, n)));
  const clients = [...new Set(P.ops.map(o => o.c))].sort((a, b) => a - b);
  const row = {};
  clients.forEach((c, k) => { row[c] = k; });
  const xmin = Math.min(...P.ops.map(o => o.s), P.end) - 100;
  const W = Math.max(600, (P.end - xmin) / 100 * 44 + 120), RH = 22, LM = 70;
  const X = t => LM + (t - xmin) / (P.end - xmin) * (W - LM - 20);
  const svg = sv("svg", {width: W, height: clients.length * RH + 30});
  const box = el("div", {class: "box"});
  box.appendChild(svg);
  let sel = null;
  if (P.lins.length) {
    sel = el("select");
    P.lins.forEach((l, j) => {
      const what = P.result === "ok" ? "linearization" : "partial linearization " + (j + 1);
      sel.appendChild(el("option", {value: j}, what + " (" + l.len + " ops)"));
    });
    sec.appendChild(sel);
  } else {
    sec.appendChild(el("div", {class: "note"}, P.result === "unknown"
      ? "no linearization recorded (search unfinished)"
      : "no operation could be linearized first"));
  }
  sec.appendChild(box);
  const table = el("table");
  sec.appendChild(table);
  clients.forEach((c, k) => {
    const t = sv("text", {x: 4, y: k * RH + RH + 4});
    t.textContent = "client " + c;
    svg.appendChild(t);
  });
  const barClass = k => "bar" + (P.ops[k].e === P.end ? " crash" : "")
    + (P.stuck.includes(k) ? " stuck" : "");
  const bars = P.ops.map((o, k) => {
    const y = row[o.c] * RH + RH / 2 + 4;
    const r = sv("rect", {x: X(o.s), y: y, width: Math.max(3, X(o.e) - X(o.s)),
                          height: RH - 6, rx: 3, class: barClass(k)});
    r.addEventListener("mousemove", ev => showTip(ev, k));
    r.addEventListener("mouseleave", () => { tip.style.display = "none"; });
    r.addEventListener("click", () => {
      const j = P.first[k];
      if (j !== undefined && sel) { sel.value = j; draw(j, k); }
    });
    svg.appendChild(r);
    // the label stays inside its bar (about 6.2 px a character); the tooltip has it all
    const room = Math.floor((X(o.e) - X(o.s) - 6) / 6.2);
    if (room >= 3) {
      const tx = sv("text", {x: X(o.s) + 3, y: y + RH - 10});
      tx.textContent = o.d.length > room ? o.d.slice(0, room - 1) + "\u2026" : o.d;
      tx.style.pointerEvents = "none";
      svg.appendChild(tx);
    }
    return r;
  });
  const layer = sv("g", {});
  svg.appendChild(layer);
  let before = {}, after = {};
  function showTip(ev, k) {
    const o = P.ops[k];
    let s = "client " + o.c + ": " + o.d + "\ntime " + o.t;
    if (k in after) s += "\nstate before: " + before[k] + "\nstate after:  " + after[k];
    else if (P.stuck.includes(k)) s += "\ncould not be linearized after the prefix shown";
    tip.textContent = s;
    tip.style.display = "block";
    tip.style.left = (ev.clientX + 12) + "px";
    tip.style.top = (ev.clientY + 12) + "px";
  }
  function draw(j, hl) {
    layer.textContent = "";
    table.textContent = "";
    before = {};
    after = {};
    bars.forEach((b, k) => b.setAttribute("class", barClass(k)));
    const hdr = el("tr");
    ["step", "client", "operation", "state after"].forEach(t => hdr.appendChild(el("th", {}, t)));
    table.appendChild(hdr);
    if (j === null) return;
    const L = P.lins[j];
    let prev = -1e18, prevState = P.init;
    const pts = [];
    L.steps.forEach(([k, st], n) => {
      const o = P.ops[k];
      const x = Math.min(Math.max(o.s, prev + 4), o.e);  // a point inside the interval
      prev = x;
      before[k] = prevState;
      after[k] = st;
      prevState = st;
      bars[k].classList.add("lin");
      if (k === hl) bars[k].classList.add("sel");
      const y = row[o.c] * RH + RH / 2 + 4 + (RH - 6) / 2;
      pts.push(X(x) + "," + y);
      layer.appendChild(sv("circle", {cx: X(x), cy: y, r: 3, class: "lp"}));
      const tr = el("tr", k === hl ? {class: "hl"} : {});
      [String(n + 1), String(o.c), o.d, st].forEach(t => tr.appendChild(el("td", {}, t)));
      table.appendChild(tr);
    });
    layer.insertBefore(sv("polyline", {points: pts.join(" "), class: "lpline"}), layer.firstChild);
    if (P.stuck.length) {
      const tr = el("tr");
      const names = P.stuck.map(k => "client " + P.ops[k].c + " " + P.ops[k].d);
      tr.appendChild(el("td", {colspan: 4, class: "illegal"},
        "then none of these could be linearized: " + names.join("; ")));
      table.appendChild(tr);
    }
  }
  if (sel) sel.addEventListener("change", () => draw(+sel.value, -1));
  draw(P.lins.length ? 0 : null, -1);
}
})();
"""
