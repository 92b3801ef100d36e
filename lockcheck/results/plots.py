"""The report's plots (matplotlib, PNG, embedded as base64), fault windows shaded.

Figures are built with `matplotlib.figure.Figure` directly, not pyplot: no global
state, no GUI backend, safe to call from any thread.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from lockcheck.checker.intervals import Section
from lockcheck.results.faults import FaultWindow

MS = 1_000_000
# known faults keep their colour across runs; a new fault takes the next spare one
KNOWN_COLORS = {"partition": "#4e79a7", "kill": "#e15759", "pause": "#f28e2b",
                "client-pause": "#b07aa1", "clock": "#59a14f", "loss": "#76b7b2",
                "delay": "#edc948", "failover": "#9c755f"}
SPARE_COLORS = ("#ff9da7", "#86bcb6", "#d37295", "#a0cbe8", "#8cd17d", "#bab0ac")
OUTCOME_COLORS = {"granted": "#1f5fa8", "busy": "#b8b8b8", "error": "#e8a33d",
                  "timeout": "#c0392b"}
# exits stay clear of red, which marks violations
REASON_COLORS = {"done": "#1f5fa8", "lease-expired": "#e8a33d", "not-owner": "#8e5bb5",
                 "error": "#5d6d7e", "open": "#a9b4bd", "other": "#3d4650"}


@dataclass(frozen=True)
class Plot:
    id: str
    title: str
    caption: str
    png_base64: str


def fault_colors(names: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    spare = iter(SPARE_COLORS * (1 + len(names) // len(SPARE_COLORS)))
    for n in sorted(names):
        family = next((c for k, c in KNOWN_COLORS.items() if n == k or n.startswith(k + "-")),
                      None)
        if family is None or family in out.values():
            family = next(spare)
        out[n] = family
    return out


WIDTH_IN = 12.4


def _figure(height: float = 3.0, left_in: float = 0.75) -> tuple[Figure, Any]:
    # fixed margins in inches (room for the labels, the legend on the right): a
    # constrained layout would cost half of each plot's drawing time
    fig = Figure(figsize=(WIDTH_IN, height), dpi=96)
    fig.subplots_adjust(left=left_in / WIDTH_IN, right=1 - 2.1 / WIDTH_IN,
                        bottom=0.5 / height, top=1 - 0.15 / height)
    ax = fig.subplots()
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(True, color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _shade(ax: Any, windows: Sequence[FaultWindow], colors: Mapping[str, str]) -> list[Any]:
    """Fault windows as bands; returns legend handles, one per fault name."""
    for w in windows:
        s, e = w.start / 1e9, w.end / 1e9
        if e > s:
            ax.axvspan(s, e, color=colors.get(w.fault, "#999"), alpha=0.16, lw=0, zorder=0)
        else:
            ax.axvline(s, color=colors.get(w.fault, "#999"), alpha=0.6, lw=1, zorder=0)
    return [Patch(color=colors[n], alpha=0.35, label=n)
            for n in sorted({w.fault for w in windows}) if n in colors]


def _outcome(acq: pd.DataFrame) -> pd.Series:
    out = pd.Series("error", index=acq.index)
    out[acq["type"] == "ok"] = "granted"
    out[(acq["type"] == "fail") & (acq["error"] == "busy")] = "busy"
    out[acq["type"].isin(["info", "unfinished"])] = "timeout"
    return out


def _legend(ax: Any, handles: list[Any]) -> None:
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  frameon=False)


def latency_over_time(acq: pd.DataFrame, windows: Sequence[FaultWindow],
                      colors: Mapping[str, str]) -> Plot:
    fig, ax = _figure()
    done = acq[acq["type"] != "unfinished"]
    kinds = _outcome(done)
    handles = _shade(ax, windows, colors)
    for kind in ("busy", "error", "timeout", "granted"):
        sub = done[kinds == kind]
        if len(sub):
            ax.plot(sub["t0"] / 1e9, ((sub["t1"] - sub["t0"]) / MS).clip(lower=1e-3), ".",
                    ms=2.5, alpha=0.6, color=OUTCOME_COLORS[kind], rasterized=True,
                    label=f"{kind} ({len(sub):,})")
    ax.set_yscale("log")
    ax.set_xlabel("test time (s)", fontsize=8)
    ax.set_ylabel("acquire latency (ms)", fontsize=8)
    _legend(ax, [*ax.get_legend_handles_labels()[0], *handles])
    return Plot("latency-time", "Acquire latency over time",
                "Every acquire attempt, by outcome; shaded: fault windows.", _png(fig))


def latency_distribution(acq: pd.DataFrame) -> Plot:
    fig, ax = _figure(2.6)
    done = acq[acq["type"] != "unfinished"]
    lat = ((done["t1"] - done["t0"]) / MS).clip(lower=1e-3)
    kinds = _outcome(done)
    if len(lat):
        lo, hi = max(lat.min(), 1e-3), max(lat.max(), 1e-2)
        bins = np.geomspace(lo, hi * 1.01, 60)
        for kind in ("granted", "busy", "error", "timeout"):
            sub = lat[kinds == kind]
            if len(sub):
                ax.hist(sub, bins=bins, histtype="step", lw=1.4, color=OUTCOME_COLORS[kind],
                        label=f"{kind} ({len(sub):,})")
        granted = lat[kinds == "granted"]
        for q, style in ((0.5, "--"), (0.99, ":")):
            if len(granted):
                v = float(granted.quantile(q))
                ax.axvline(v, color=OUTCOME_COLORS["granted"], ls=style, lw=1)
                ax.annotate(f"p{int(q * 100)} {v:.2f} ms", (v, 1), xycoords=("data", "axes "
                            "fraction"), fontsize=7, ha="left", va="top", xytext=(3, -2),
                            textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("acquire latency (ms)", fontsize=8)
    ax.set_ylabel("attempts", fontsize=8)
    _legend(ax, ax.get_legend_handles_labels()[0])
    return Plot("latency-dist", "Acquire latency distribution",
                "Granted attempts with their p50 and p99; refusals and timeouts beside them.",
                _png(fig))


def throughput(acq: pd.DataFrame, windows: Sequence[FaultWindow], colors: Mapping[str, str],
               t_end: int) -> Plot:
    fig, ax = _figure()
    handles = _shade(ax, windows, colors)
    dur = max(t_end / 1e9, 1e-3)
    width = max(0.25, dur / 150)
    edges = np.arange(0, dur + width, width)
    kinds = _outcome(acq)
    done = acq[acq["type"] != "unfinished"]
    for kind, lw in (("granted", 1.6), ("error", 1.0), ("timeout", 1.0)):
        sub = (done[kinds[done.index] == kind]["t1"] / 1e9).to_numpy()
        if kind == "granted" or len(sub):
            counts, _ = np.histogram(sub, bins=edges)
            ax.step(edges[:-1], counts / width, where="post", lw=lw,
                    color=OUTCOME_COLORS[kind], label=f"{kind}/s")
    ax.set_xlim(0, dur)
    ax.set_xlabel("test time (s)", fontsize=8)
    ax.set_ylabel(f"per second ({width:g} s bins)", fontsize=8)
    _legend(ax, [*ax.get_legend_handles_labels()[0], *handles])
    return Plot("throughput", "Grants per second",
                "Acquires granted per second (and errors, timeouts); shaded: fault windows.",
                _png(fig))


def hold_times(sections: Sequence[Section], windows: Sequence[FaultWindow],
               colors: Mapping[str, str], ttl_ms: float | None) -> Plot:
    fig, ax = _figure()
    handles = _shade(ax, windows, colors)
    by_reason: dict[str, tuple[list[float], list[float]]] = {}
    for s in sections:
        r = "open" if s.open else (s.exit_reason if s.exit_reason in REASON_COLORS else "other")
        xs, ys = by_reason.setdefault(r or "other", ([], []))
        xs.append(s.start / 1e9)
        ys.append(max((s.end - s.start) / MS, 1e-3))
    for r, (xs, ys) in sorted(by_reason.items(), key=lambda kv: kv[0] != "done"):
        ax.plot(xs, ys, ".", ms=3, alpha=0.7, color=REASON_COLORS[r], rasterized=True,
                label=f"exit: {r} ({len(xs):,})")
    if ttl_ms:
        ax.axhline(ttl_ms, color="#c0392b", ls="--", lw=1)
        ax.annotate(f"TTL {ttl_ms:g} ms", (0, ttl_ms), xycoords=("axes fraction", "data"),
                    fontsize=7, color="#c0392b", xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("test time (s), at enter", fontsize=8)
    ax.set_ylabel("hold time (ms)", fontsize=8)
    _legend(ax, [*ax.get_legend_handles_labels()[0], *handles])
    return Plot("hold-times", "Hold times",
                "Each critical section (enter to exit), coloured by why it ended; dashed: "
                "the TTL.", _png(fig))


def availability_bars(av: Mapping[str, Any], colors: Mapping[str, str]) -> Plot:
    scopes: list[tuple[str, Mapping[str, Any], str]] = [
        ("overall", av.get("overall") or {}, "#555555"),
        ("no fault", av.get("no_fault") or {}, "#888888"),
    ]
    for name, entry in (av.get("faults") or {}).items():
        scopes.append((name, entry, colors.get(name, "#999999")))
    fig, ax = _figure(0.9 + 0.42 * len(scopes), left_in=1.3)
    ys = np.arange(len(scopes))[::-1]
    for y, (_label, entry, color) in zip(ys, scopes, strict=True):
        share = entry.get("share") or 0.0
        answered = entry.get("answered") or 0.0
        ax.barh(y + 0.18, answered * 100, height=0.34, color=color, alpha=0.35)
        ax.barh(y - 0.18, share * 100, height=0.34, color=color)
        ax.annotate(f"{share * 100:.1f}% granted, {answered * 100:.1f}% answered "
                    f"({entry.get('attempts', 0):,} attempts)", (max(share, answered) * 100, y),
                    fontsize=7, va="center", xytext=(6, 0), textcoords="offset points")
    ax.set_yticks(ys, [s[0] for s in scopes], fontsize=8)
    ax.set_xlim(0, 170)  # room for the labels right of a full bar
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("share of acquire attempts (%): dark = granted, light = answered "
                  "(granted or busy, not an error or timeout)", fontsize=8)
    return Plot("availability", "Availability per fault",
                "While each fault was active, by the attempt's start.", _png(fig))
