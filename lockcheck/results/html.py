"""Small HTML helpers shared by the run report and the comparison: escaping, the page
shell with the stylesheet and scripts inlined (the pages open offline, from a file)."""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from typing import Any

VERDICT_CLASS = {True: "valid", False: "invalid"}


@cache
def static(name: str) -> str:
    return resources.files("lockcheck.results").joinpath("static", name).read_text("utf-8")


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def verdict_class(valid: object) -> str:
    """valid / invalid / unknown (the CSS classes and the words on the badges)."""
    return VERDICT_CLASS.get(valid, "unknown") if isinstance(valid, bool) else "unknown"


def badge(valid: object, word: str | None = None) -> str:
    cls = verdict_class(valid)
    return f'<span class="badge {cls}">{esc(word or cls.upper())}</span>'


def json_script(element_id: str, data: Any) -> str:
    """Data for the page's script; `</` is escaped so no string can end the element."""
    text = json.dumps(data, separators=(",", ":"), default=str).replace("</", "<\\/")
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'


def table(header: list[str], rows: list[list[Any]], *, num_cols: tuple[int, ...] = (),
          cls: str = "") -> str:
    """A table of already-escaped cell HTML (no header row when `header` is empty)."""
    def cell(tag: str, i: int, v: Any) -> str:
        c = ' class="num"' if i in num_cols else ""
        return f"<{tag}{c}>{v}</{tag}>"

    head = "".join(cell("th", i, esc(h)) for i, h in enumerate(header))
    thead = f"<thead><tr>{head}</tr></thead>" if header else ""
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}">{thead}<tbody>{body}</tbody></table>'


def page(title: str, body: str, *, scripts: tuple[str, ...] = (), data: Any = None) -> str:
    data_html = json_script("lc-data", data) if data is not None else ""
    js = "".join(f"<script>{static(s)}</script>" for s in scripts)
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{static('lockcheck.css')}</style>"
        f"<script>{static('errors.js')}</script></head><body><main>"
        f'<div id="lc-errors"></div>{body}</main>{data_html}{js}</body></html>\n'
    )
