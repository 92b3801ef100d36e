"""Jepsen `history.edn` reader: EDN op maps -> lockcheck `Op`s.

A Jepsen history is either one vector of op maps or a sequence of op maps (one per
line, as Jepsen writes it), each with ``:process :type :f :value`` and usually
``:time`` (ns) and ``:index``. Records written as ``#jepsen.history.Op{...}`` are read
as maps (any ``#tag`` is dropped, the form after it kept). ``:process :nemesis`` becomes
``"nemesis"``.

Mapping to lockcheck ops (docs/history-format.md):

* ``type`` and ``f`` are the keyword names; ``time`` is ``:time`` or, without it, the
  op's position (Jepsen writes ops in real-time order); ``index`` is the position.
* Independent keys (``jepsen.independent``) are tuples ``[k v]`` in ``:value``:
  for ``acquire``/``release``/``renew``/``read``/``write`` a 2-element vector value is
  taken as ``[key value]``; for ``cas`` a value ``[k [old new]]`` is. Otherwise ``key``
  is None (one register / one lock).
* Lock ops: a value that is an integer is a fence (``{"fence": n}``); a map value is
  kept with its keys as strings (``:fence`` -> ``"fence"``, ``:ttl-ms`` -> ``"ttl_ms"``).

The EDN reader is our own (small, no dependency): maps, vectors, lists, sets, keywords,
symbols, strings, characters, integers, floats, nil, booleans, comments, ``#_`` and
tagged forms. Malformed input raises `HistoryError` with the line; so does a completion
(``:ok``/``:fail``/``:info``) of a client process with no open ``:invoke`` of that
process before it. Nemesis ops are exempt (Jepsen writes them as ``:info`` pairs).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.history import TYPES, HistoryError, Op, validate_processes

LOCK_FS = frozenset({"acquire", "release", "renew"})


@dataclass(frozen=True, slots=True)
class Keyword:
    name: str

    def __str__(self) -> str:
        return ":" + self.name


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str

    def __str__(self) -> str:
        return self.name


class Tagged:
    """Marker left on the stack by ``#tag``: the next form is the value."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_TOKEN = re.compile(
    r"""
     (?P<ws>[\s,]+)
    |(?P<comment>;[^\n]*)
    |(?P<str>"(?:[^"\\]|\\.)*")
    |(?P<open>\#\{|[\[\(\{])
    |(?P<close>[\]\)\}])
    |(?P<discard>\#_)
    |(?P<tag>\#[A-Za-z][^\s,\[\]\(\)\{\}"]*)
    |(?P<char>\\(?:newline|space|tab|return|u[0-9a-fA-F]{4}|\S))
    |(?P<atom>[^\s,\[\]\(\)\{\}";\\]+)
    """,
    re.VERBOSE | re.DOTALL,
)
_INT = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_RATIO = re.compile(r"[+-]?\d+/\d+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_CLOSERS = {"[": "]", "(": ")", "{": "}", "#{": "}"}


def _string(tok: str, path: str, line: int) -> str:
    body = tok[1:-1]
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u":
            try:
                out.append(chr(int(body[i + 2 : i + 6], 16)))
            except ValueError:
                raise HistoryError(path, line, "bad \\u escape in a string") from None
            i += 6
        elif nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            raise HistoryError(path, line, f"bad escape \\{nxt} in a string")
    return "".join(out)


def _atom(tok: str, path: str, line: int) -> Any:
    if tok == "nil":
        return None
    if tok == "true":
        return True
    if tok == "false":
        return False
    if tok.startswith(":"):
        if len(tok) == 1:
            raise HistoryError(path, line, "empty keyword ':'")
        return Keyword(tok[1:])
    if tok[0].isdigit() or (tok[0] in "+-" and len(tok) > 1 and tok[1].isdigit()):
        if _INT.fullmatch(tok):
            return int(tok.rstrip("N"))
        if _FLOAT.fullmatch(tok):
            return float(tok.rstrip("M"))
        if _RATIO.fullmatch(tok):
            num, den = tok.split("/")
            return int(num) / int(den) if int(den) else float("nan")
        raise HistoryError(path, line, f"bad number {tok!r}")
    return Symbol(tok)


@dataclass(slots=True)
class _Frame:
    opener: str
    line: int
    items: list[Any]
    tags: int = 0  # pending #tag markers inside this frame
    discard: int = 0  # pending #_ inside this frame


def read_edn_forms(
    text: str, path: str = "<edn>", *, allow_truncated: bool = False
) -> list[tuple[int, Any]]:
    """All top-level forms of an EDN text, each with the line it starts on.

    With ``allow_truncated``, a text cut off inside a form keeps the forms completed
    before the cut, including the complete elements of an unclosed top-level vector.
    """
    return _read(text, path, allow_truncated)[0]


def _read(text: str, path: str, allow_truncated: bool) -> tuple[list[tuple[int, Any]], list[int]]:
    """Forms with their lines, and the lines of the elements of a top-level vector."""
    top = _Frame("", 1, [])
    lines: list[int] = []  # start line of each top-level form
    vec_lines: list[int] = []  # start line of each element of a top-level vector
    stack: list[_Frame] = [top]
    line = 1
    pos = 0
    n = len(text)

    def add(value: Any, start: int) -> None:
        frame = stack[-1]
        frame.tags = 0  # pending tags apply to this form; we keep the form itself
        if frame.discard:
            frame.discard -= 1
            return
        frame.items.append(value)
        if frame is top:
            lines.append(start)
        elif len(stack) == 2 and frame.opener == "[":
            vec_lines.append(start)

    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise HistoryError(path, line, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tok = m.group()
        start = line
        pos = m.end()
        line += tok.count("\n")
        if kind in ("ws", "comment"):
            continue
        if kind == "str":
            add(_string(tok, path, start), start)
        elif kind == "atom":
            add(_atom(tok, path, start), start)
        elif kind == "char":
            body = tok[1:]
            if body in _CHARS:
                add(_CHARS[body], start)
            elif len(body) == 5 and body[0] == "u":
                add(chr(int(body[1:], 16)), start)
            else:
                add(body, start)
        elif kind == "open":
            stack.append(_Frame(tok, start, []))
        elif kind == "close":
            frame = stack[-1]
            if frame is top:
                raise HistoryError(path, start, f"unexpected {tok!r}")
            if _CLOSERS[frame.opener] != tok:
                raise HistoryError(
                    path, start, f"{tok!r} closes {frame.opener!r} opened on line {frame.line}"
                )
            if frame.discard or frame.tags:
                raise HistoryError(path, start, f"#_ or a tag with no form before {tok!r}")
            stack.pop()
            add(_collection(frame, path), frame.line)
        elif kind == "discard":
            stack[-1].discard += 1
        elif kind == "tag":
            stack[-1].tags += 1
    if len(stack) > 1:
        if not allow_truncated:
            frame = stack[-1]
            raise HistoryError(
                path,
                line,
                f"unexpected end of input: {frame.opener!r} from line {frame.line} "
                "is not closed (truncated file?)",
            )
        bottom = stack[1]
        if bottom.opener == "[":  # a vector of ops cut short: keep its complete ops
            top.items.append(bottom.items)
            lines.append(bottom.line)
    elif top.tags or top.discard:
        raise HistoryError(path, line, "unexpected end of input after # tag or #_")
    return list(zip(lines, top.items, strict=True)), vec_lines


def _collection(frame: _Frame, path: str) -> Any:
    items = frame.items
    if frame.opener == "{":
        if len(items) % 2:
            raise HistoryError(path, frame.line, "a map needs an even number of forms")
        out: dict[Any, Any] = {}
        for k, v in zip(items[::2], items[1::2], strict=True):
            out[_hashable(k)] = v
        return out
    return items  # vectors, lists and sets all become lists


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((_hashable(k), _hashable(x)) for k, x in v.items()), key=repr))
    return v


def plain(v: Any) -> Any:
    """EDN values as JSON-like data: keywords and symbols become their names; map keys
    become strings (``-`` in keyword keys becomes ``_``: ``:ttl-ms`` -> ``ttl_ms``)."""
    if isinstance(v, Keyword | Symbol):
        return v.name
    if isinstance(v, dict):
        return {_plain_key(k): plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v


def _plain_key(k: Any) -> str:
    if isinstance(k, Keyword):
        return k.name.replace("-", "_")
    return str(plain(k))


def _name(v: Any) -> Any:
    return v.name if isinstance(v, Keyword | Symbol) else v


def _split_key(f: str, value: Any) -> tuple[str | None, Any]:
    """(key, value) for an independent-key tuple ``[k v]``, else (None, value)."""
    if isinstance(value, list) and len(value) == 2:
        k, inner = value
        if f == "cas":
            if isinstance(inner, list) and len(inner) == 2:
                return str(plain(k)), inner
            return None, value
        if f in LOCK_FS or f in ("read", "write"):
            return str(plain(k)), inner
    return None, value


def _lock_value(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        return {"fence": v}
    return plain(v)


def read_jepsen_edn(path: str | os.PathLike[str], *, allow_truncated: bool = False) -> list[Op]:
    """Read a Jepsen history.edn file into lockcheck `Op`s (see the module doc)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HistoryError(p, 0, "not UTF-8 text") from None
    except OSError as e:
        raise HistoryError(p, 0, f"cannot read: {e.strerror or e}") from None
    return parse_jepsen_edn(text, str(p), allow_truncated=allow_truncated)


def parse_jepsen_edn(text: str, path: str = "<edn>", *, allow_truncated: bool = False) -> list[Op]:
    """Parse Jepsen history text into lockcheck `Op`s (see the module doc)."""
    forms, vec_lines = _read(text, path, allow_truncated)
    maps: list[tuple[int, Any]] = []
    if len(forms) == 1 and isinstance(forms[0][1], list):
        line0, items = forms[0]
        lines = vec_lines if len(vec_lines) == len(items) else [line0] * len(items)
        maps = list(zip(lines, items, strict=True))
    else:
        maps = forms
    ops = [_op(m, line, n, path) for n, (line, m) in enumerate(maps)]
    broken = validate_processes(ops)
    if broken is not None:
        op, why = broken
        raise HistoryError(path, int(op.extra["line"]), why)
    return ops


def _op(m: Any, line: int, index: int, path: str) -> Op:
    if not isinstance(m, dict):
        raise HistoryError(path, line, "expected an op map {:process .. :type .. :f ..}")
    missing = [k for k in ("process", "type", "f") if Keyword(k) not in m]
    if missing:
        raise HistoryError(path, line, f"op map without :{missing[0]}")
    typ = _name(m[Keyword("type")])
    if typ not in TYPES or typ == "event":
        raise HistoryError(path, line, f"unknown :type {m[Keyword('type')]}")
    f = _name(m[Keyword("f")])
    if not isinstance(f, str):
        raise HistoryError(path, line, ":f must be a keyword")
    proc = _name(m[Keyword("process")])
    if isinstance(proc, bool) or not isinstance(proc, int | str):
        raise HistoryError(path, line, ":process must be an integer or :nemesis")
    t = m.get(Keyword("time"), index)
    if isinstance(t, bool) or not isinstance(t, int):
        raise HistoryError(path, line, ":time must be an integer (ns)")
    raw = m.get(Keyword("value"))
    key, value = _split_key(f, raw) if proc != "nemesis" else (None, raw)
    value = _lock_value(value) if f in LOCK_FS else plain(value)
    if f in LOCK_FS and key is None and proc != "nemesis":
        key = "lock"
    err = m.get(Keyword("error"))
    known = {"process", "type", "f", "value", "time", "index", "error"}
    extra = {
        _plain_key(k): plain(v)
        for k, v in m.items()
        if not (isinstance(k, Keyword) and k.name in known)
    }
    extra["line"] = line
    if Keyword("index") in m:
        extra["jepsen_index"] = plain(m[Keyword("index")])
    return Op(
        process=proc,
        type=str(typ),
        f=f,
        key=key,
        value=value,
        time=t,
        index=index,
        error=None if err is None else str(plain(err)),
        extra=extra,
    )
