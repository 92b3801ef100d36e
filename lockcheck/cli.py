"""The `lockcheck` command.

Exit codes (also in the README): 0 valid, 1 invalid (a safety violation was found),
2 unknown, 130 interrupted by Ctrl-C/SIGTERM (after teardown and a check of what was
recorded), 254 bad arguments or bad input, 255 internal error.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from lockcheck import __version__, exitcodes
from lockcheck.checker.api import DEFAULT_TIMEOUT_S
from lockcheck.errors import BadInput
from lockcheck.history import HistoryError
from lockcheck.syspath import add_system_dirs

if TYPE_CHECKING:
    from lockcheck.cluster.state import Registry, RunState


def fail(message: str, code: int = exitcodes.BAD_INPUT) -> NoReturn:
    click.echo(f"lockcheck: {message}", err=True)
    sys.exit(code)


class Group(click.Group):
    """Maps errors to one line and an exit code instead of a traceback."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            fail("aborted", exitcodes.INTERRUPTED)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = f" (see: {e.ctx.command_path} --help)" if e.ctx is not None else ""
            fail(f"{e.format_message()}{where}")
        except click.ClickException as e:
            fail(e.format_message())
        except (BadInput, HistoryError) as e:
            fail(str(e))
        except KeyboardInterrupt:
            fail("interrupted", exitcodes.INTERRUPTED)
        except Exception as e:
            traceback.print_exc()
            fail(f"internal error: {type(e).__name__}: {e}", exitcodes.INTERNAL)
        sys.exit(rv if isinstance(rv, int) else 0)


class Command(click.Command):
    """A command whose options or help come in part from the registries: each
    provider's own options, the names and descriptions of the backends, workloads,
    faults and providers. `complete` fills them in when the command parses its
    arguments or shows its help, so that `lockcheck --help` loads no registry."""

    def __init__(self, *args: Any, complete: Callable[[click.Command], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.complete = complete

    def completed(self) -> list[click.Parameter]:
        if self.complete is not None:
            complete, self.complete = self.complete, None
            complete(self)
        return self.params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self.completed()
        return super().get_params(ctx)


def registry(ctx: click.Context) -> Registry:
    """The run registry of this invocation: one, made when first needed (a caller may
    pass its own as the context's `obj`)."""
    root = ctx.find_root()
    if root.obj is None:
        from lockcheck.cluster.state import Registry

        root.obj = Registry()
    reg: Registry = root.obj
    return reg


def with_registries(cmd: click.Command) -> None:
    """Each provider's own options after --provider, and the help of the options that
    name a backend, workload, fault or provider, from their registries."""
    from lockcheck.cluster.providers import all_providers

    providers = all_providers()
    at = next(i for i, p in enumerate(cmd.params) if p.name == "provider") + 1
    cmd.params[at:at] = [
        click.Option([o.flag], is_flag=o.is_flag, default=False if o.is_flag else None,
                     type=click.Path() if o.path else None, help=f"{p.name}: {o.help}")
        for p in providers for o in p.options]
    choices = choices_help()
    for param in cmd.params:
        if isinstance(param, click.Option) and param.name in choices:
            param.help = f"{param.help or ''}\n\n{choices[param.name]}"


def choices_help() -> dict[str, str]:
    """What the registries hold, for the help of the options that choose from them:
    one paragraph a choice."""
    from lockcheck.backends import BACKENDS
    from lockcheck.cluster.providers import all_providers
    from lockcheck.nemesis.registry import NEMESES
    from lockcheck.workloads.registry import WORKLOADS

    def listing(entries: list[tuple[str, str]]) -> str:
        return "\n\n".join(f"{name}: {what}" for name, what in entries)

    families = ", ".join(dict.fromkeys(b.family for b in BACKENDS.values()))
    return {
        "backend": f"{families} and their variants: {len(BACKENDS)} backends, each "
                   "described by `lockcheck backends`.",
        "workload": listing([(w.name, w.description) for w in WORKLOADS.values()]),
        "nemesis": listing([(n.name, n.description) for n in NEMESES.values()]),
        "provider": listing([(p.name, p.description) for p in all_providers()]),
    }


def given_provider_options(o: dict[str, Any], provider: str | None) -> dict[str, Any]:
    """The providers' options given on the command line, as `TestSpec.provider_options`."""
    from lockcheck.cluster.providers import provider_options

    return provider_options(o, provider)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockcheck")
def main() -> None:
    """Test distributed locks against real servers under real faults."""
    add_system_dirs(os.environ)  # root's tools, also from a cleared environment


@main.command(cls=Command, complete=with_registries)
@click.option("--backend", default="redis", show_default=True, help="Lock service and client.")
@click.option("--client", default=None,
              help="Run this lock client against the backend's servers instead of its "
                   "own: a shipped adapter (see: lockcheck backends) or your factory, "
                   "MODULE:FACTORY or path/to/file.py:FACTORY (docs/your-own-lock.md).")
@click.option("--server", default=None,
              help="Run another server the backend's clients speak to instead of its own: "
                   "valkey for the Redis backends (redis, redlock, redis-sentinel and "
                   "their variants) [default: the backend's own].")
@click.option("--workload", default="mutex", show_default=True, help="What the clients do.")
@click.option("--nemesis", default="partition", show_default=True,
              help="none, or faults, comma-separated (which backend takes which: "
                   "lockcheck backends).")
@click.option("--provider", default="local", show_default=True, help="Where the nodes run.")
@click.option("--nodes", type=int, default=None, help="Server nodes [default: per backend].")
@click.option("--concurrency", type=int, default=5, show_default=True,
              help="Client worker processes, each in its own namespace.")
@click.option("--keys", type=int, default=3, show_default=True, help="How many lock names.")
@click.option("--time-limit", type=float, default=30.0, show_default=True, help="Seconds.")
@click.option("--ttl-ms", type=int, default=None,
              help="Lease TTL.  [default: 1000, or the backend's minimum TTL]")
@click.option("--hold-ms", default="50-500", show_default=True,
              help="Critical-section time: ms (200), a range (50-500), "
                   "lognormal:MEDIAN:SIGMA[:MAX] or pareto:MIN:ALPHA[:MAX].")
@click.option("--nemesis-interval", type=float, default=3.0, show_default=True,
              help="Seconds of quiet between faults.")
@click.option("--nemesis-duration", type=float, default=None,
              help="Seconds each partition, pause, clock, loss or delay fault lasts "
                   "[default: --nemesis-interval].")
@click.option("--nemesis-mode", default="one", show_default=True,
              help="With several faults: one (a random one at a time) or all (all of "
                   "them at once).")
@click.option("--restart-delay-ms", type=int, default=100, show_default=True,
              help="After a kill, restart the server this much later.")
@click.option("--kill-targets", default="one-or-minority", show_default=True,
              help="Which servers a kill hits: one-or-minority, one, minority, majority, "
                   "all, or holder-quorum (one server of the quorum that granted a lock "
                   "held right now; Redlock names its masters).")
@click.option("--pause-ms", type=int, default=None,
              help="client-pause: how long the holder stays stopped [default: 2x TTL].")
@click.option("--pause-at", default="section", show_default=True,
              help="client-pause: stop a holder inside its critical section (section), "
                   "as it leaves it, while it releases (release; between the check and "
                   "the act of a release that has both), or a client whose "
                   "grant's replies are in but unread (acquire; Redlock clients).")
@click.option("--clock-offset-ms", type=int, default=None,
              help="clock-skew/bump/strobe: how far a clock moves [default: 2x TTL].")
@click.option("--clock-rate", type=float, default=4.0, show_default=True,
              help="clock-rate: how many times as fast the clock runs.")
@click.option("--clock-period-ms", type=int, default=None,
              help="clock-strobe: time between jumps [default: max(50, TTL/4)].")
@click.option("--clock-targets", default="nodes", show_default=True,
              help="Whose clocks the clock faults move: nodes, clients or all.")
@click.option("--loss-probability", type=float, default=0.3, show_default=True,
              help="loss: the share of packets dropped on a lossy link.")
@click.option("--delay-ms", type=int, default=100, show_default=True,
              help="delay: added to each round trip through a delayed node.")
@click.option("--reply-op", default="release", show_default=True,
              help="reply-loss: whose replies are withheld: acquire, renew or release.")
@click.option("--reply-client", default="all", show_default=True,
              help="reply-loss: aim at every client (all) or one (c0, c1, ...).")
@click.option("--reply-hold-ms", type=int, default=None,
              help="reply-loss: how long the replies are withheld (shorter than the op "
                   "timeout: delayed) [default: 3x the op timeout].")
@click.option("--quiet", type=float, default=5.0, show_default=True,
              help="Final seconds with every fault healed (at most a quarter of the run).")
@click.option("--recover-s", type=float, default=None,
              help="Then, how long each lock may take to be acquired again "
                   "[default: max(10 s, 3x TTL)].")
@click.option("--resource", default="fenced", show_default=True,
              help="fenced workload: fenced (rejects stale fences) or unfenced resource; "
                   "lock-set with an etcd backend: etcd-txn keeps the sets in etcd, each "
                   "write guarded by the writer's own lock key; with a consul backend: "
                   "consul-txn keeps them in Consul, each write a /v1/txn guarded by a "
                   "check-session on the writer's lock key; with an azure-blob backend: "
                   "azure-blob keeps each set in its lock's blob, written with the "
                   "writer's lease id; settlement: unfenced, fenced, idempotent, "
                   "row-lock or version (see the README); leader: fenced (the store "
                   "refuses a stale term) or unfenced.")
@click.option("--lock-order", default="sorted", show_default=True,
              help="transfer: take an operation's locks in one global order (sorted) "
                   "or in random order.")
@click.option("--locks-per-op", type=int, default=2, show_default=True,
              help="transfer: account locks each operation holds at once.")
@click.option("--wait-ms", type=int, default=None,
              help="transfer: how long each acquire blocks before the operation gives "
                   "up; 0: no limit [default: 3x TTL].")
@click.option("--lock-scope", default="fine", show_default=True,
              help="transfer: fine (a lock per account) or coarse (one global lock).")
@click.option("--seed", type=int, default=None, help="Random seed [default: random].")
@click.option("--test-count", type=int, default=1, show_default=True,
              help="Run the test this many times; stop at the first invalid run.")
@click.option("--results-dir", default="results", show_default=True, type=click.Path())
@click.option("--subnet", default=None, help="A free /24 for the cluster [default: auto].")
@click.option("--leave-running", is_flag=True,
              help="Keep the cluster up after the run (remove it with `lockcheck cluster down`).")
@click.option("--no-report", is_flag=True,
              help="Write no report.html at the end (`lockcheck check` or `compare` writes "
                   "it later); saves the plotting time in a long matrix.")
@click.pass_context
def test(ctx: click.Context, **o: Any) -> int:
    """Run a test: cluster up, clients and faults, then check the history."""
    import random

    from lockcheck.backends import backend
    from lockcheck.nemesis.registry import parse_nemesis
    from lockcheck.runner import run_test
    from lockcheck.spec import TTL_NOT_GIVEN, TestSpec
    from lockcheck.workloads.hold import parse_hold

    b = backend(o["backend"])
    nemesis = parse_nemesis(o["nemesis"])
    provider_opts = given_provider_options(o, o["provider"])
    hold = parse_hold(o["hold_ms"])
    if o["test_count"] < 1:
        raise BadInput("--test-count must be at least 1")
    worst = exitcodes.VALID
    for i in range(o["test_count"]):
        seed = o["seed"] if o["seed"] is not None else random.randrange(2**31)
        if o["seed"] is not None:
            seed += i
        spec = TestSpec(
            backend=b.name, server=b.choose_server(o["server"]), client=o["client"],
            workload=o["workload"], nemesis=nemesis,
            provider=o["provider"],
            provider_options=provider_opts,
            nodes=o["nodes"] or b.default_nodes,
            concurrency=o["concurrency"], keys=o["keys"], time_limit=o["time_limit"],
            ttl_ms=TTL_NOT_GIVEN if o["ttl_ms"] is None else o["ttl_ms"],
            hold_ms=hold.bounds, hold_dist=hold.dist,
            nemesis_interval=o["nemesis_interval"], nemesis_duration=o["nemesis_duration"],
            nemesis_mode=o["nemesis_mode"], restart_delay=o["restart_delay_ms"] / 1000,
            kill_targets=o["kill_targets"], pause_ms=o["pause_ms"], pause_at=o["pause_at"],
            clock_offset_ms=o["clock_offset_ms"],
            clock_rate=o["clock_rate"], clock_period_ms=o["clock_period_ms"],
            clock_targets=o["clock_targets"], loss_probability=o["loss_probability"],
            delay_ms=o["delay_ms"], quiet=o["quiet"], recover_s=o["recover_s"],
            reply_op=o["reply_op"], reply_client=o["reply_client"],
            reply_hold_ms=o["reply_hold_ms"],
            resource=o["resource"], seed=seed,
            lock_order=o["lock_order"], locks_per_op=o["locks_per_op"],
            wait_ms=o["wait_ms"], lock_scope=o["lock_scope"],
            results_dir=o["results_dir"], leave_running=o["leave_running"],
            report=not o["no_report"],
            subnet=o["subnet"])
        outcome = run_test(spec, registry=registry(ctx))
        if outcome.interrupted:
            return exitcodes.INTERRUPTED
        if outcome.failure is not None and outcome.valid is not False:
            fail(f"the run failed: {outcome.failure}; what was recorded is in "
                 f"{outcome.run_dir}", exitcodes.INTERNAL)
        code = exitcodes.for_verdict(outcome.valid)
        worst = code if worst == exitcodes.VALID or code == exitcodes.INVALID else worst
        if code == exitcodes.INVALID:
            break
    return worst


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per backend.")
def backends(as_json: bool) -> int:
    """List every backend and variant: client, fences, faults it takes, what it shows;
    then the faults each provider can inject."""
    from lockcheck.results.backends_table import backend_rows, render_backends

    rows = backend_rows()
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
    else:
        click.echo(render_backends(rows))
        click.echo("")
        click.echo(render_provider_faults())
    return 0


def render_provider_faults() -> str:
    from lockcheck.results.providers_table import render_providers

    return render_providers()


def with_models_and_formats(cmd: click.Command) -> None:
    """`check`'s --model and --format: what the checkers know."""
    from lockcheck.checker.external import ENGINE_MODELS, FORMATS
    from lockcheck.checker.registry import CHECKERS

    for param in cmd.params:
        if param.name == "model" and isinstance(param, click.Option):
            param.help = f"{', '.join(ENGINE_MODELS)}, or a checker: {', '.join(CHECKERS)}."
        if param.name == "fmt" and isinstance(param, click.Option):
            param.help = f"{', '.join(FORMATS)} [default: by file]."


@main.command(cls=Command, complete=with_models_and_formats)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", default=None, help="A model or a checker.")
@click.option("--format", "fmt", default=None, help="The history's format.")
@click.option("--timeout", type=float, default=None,
              help=f"Seconds per search [default {DEFAULT_TIMEOUT_S:g}].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per path on stdout.")
@click.option("--html", "html_dir", type=click.Path(path_type=Path), default=None,
              help="Write the visualization of each failed check into this folder.")
@click.option("--allow-truncated", is_flag=True,
              help="Ignore an incomplete last line (a run that was killed).")
@click.option("--initial", default=None,
              help="Register models: the initial value, JSON or EDN (0, '{\"x\": 0}', "
                   "'{:x 0}') [default: nil].")
@click.option("--no-report", is_flag=True, help="Do not write report.html into run folders.")
def check(paths: tuple[Path, ...], model: str | None, fmt: str | None, timeout: float | None,
          as_json: bool, html_dir: Path | None, allow_truncated: bool,
          initial: str | None, no_report: bool) -> int:
    """Re-check stored runs or history files, without any cluster.

    For a run folder it also writes (or refreshes) the folder's report.html."""
    from lockcheck.checker.analyze import check_path
    from lockcheck.checker.external import parse_initial
    from lockcheck.results.progress import verdict_word

    start = None if initial is None else parse_initial(initial)
    verdicts: list[object] = []
    for p in paths:
        r = check_path(p, model=model, fmt=fmt, timeout=timeout, html_dir=html_dir,
                       allow_truncated=allow_truncated, initial=start)
        verdicts.append(r["valid"])
        if not no_report and "checkers" in r and model is None and fmt in (None, "lockcheck"):
            _refresh_report(p, r)
        if as_json:
            click.echo(json.dumps(r, default=str))
        else:
            detail = r.get("summary") or ""
            click.echo(f"{p}: {verdict_word(r['valid'])} ({r.get('elapsed_s', 0):.2f}s) {detail}")
    return exitcodes.for_verdict(exitcodes.merge_valid(verdicts))


def _refresh_report(path: Path, results: dict[str, Any]) -> None:
    """report.html of a checked run folder; a failure here never costs the verdict."""
    from lockcheck.results.report import write_report
    from lockcheck.results.store import is_run_dir

    if not is_run_dir(path):
        return
    try:
        results["report"] = str(write_report(path, results=results))
    except Exception as e:
        click.echo(f"lockcheck: warning: {path}: report not written: {type(e).__name__}: {e}",
                   err=True)


# `test` options that test-all passes through to every run (all but these, which
# test-all sets itself or which make no sense for a matrix)
NOT_PASSED_THROUGH = frozenset({"backend", "workload", "nemesis", "test_count", "time_limit",
                                "results_dir", "leave_running", "subnet", "seed"})


def test_params() -> list[click.Parameter]:
    assert isinstance(test, Command)
    return test.completed()


def with_pass_through_options(cmd: click.Command) -> None:
    cmd.params += [
        click.Option([*p.opts, *([p.name] if p.name else [])],
                     type=None if p.is_flag else p.type, is_flag=p.is_flag, default=None,
                     help=f"Passed to each test: {p.help or ''}")
        for p in test_params()
        if isinstance(p, click.Option) and p.name not in NOT_PASSED_THROUGH]


def _pass_through_args(o: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for p in test_params():
        if not isinstance(p, click.Option) or p.name in NOT_PASSED_THROUGH:
            continue
        v = o.get(p.name or "")
        if v is None or v is False:
            continue
        args += [p.opts[0]] if p.is_flag else [p.opts[0], str(v)]
    return args


@main.command("test-all", cls=Command, complete=with_pass_through_options)
@click.option("--backends", multiple=True,
              help="Backends, space- or comma-separated, or repeated [default: every one "
                   "but lockcheck's own memory server].")
@click.option("--nemeses", multiple=True,
              help="Nemeses, space- or comma-separated; join faults run together with + "
                   "(kill+pause) [default: none partition kill pause client-pause].")
@click.option("--workloads", multiple=True, help="Workloads [default: mutex fenced].")
@click.option("--runs", "--test-count", "runs", type=int, default=1, show_default=True,
              help="Runs per cell, each a separate test with its own seed.")
@click.option("--shard", default=None, metavar="I/N",
              help="Run only the I-th of N slices of the cells x runs (for N machines; "
                   "`lockcheck compare` merges their results folders).")
@click.option("--time-limit", type=float, default=30.0, show_default=True,
              help="Seconds per run.")
@click.option("--results-dir", default="results", show_default=True,
              type=click.Path(path_type=Path))
@click.option("--seed", type=int, default=None,
              help="Seed of every cell's first run (+1 per further run) [default: random].")
@click.option("--cell-timeout", type=float, default=None,
              help="Stop a run that takes longer than this many seconds "
                   "[default: 2 x time limit + 300].")
def test_all(**o: Any) -> int:
    """Run a matrix of tests (backends x workloads x nemeses), one after another.

    Each run is a separate `lockcheck test` process with its output in a log file;
    a failing or crashing run is recorded and the matrix goes on. Exit code: 1 if any
    run was unsafe, 2 if any was unknown or failed, 0 if all were safe."""
    from lockcheck.results.matrix import (
        DEFAULT_NEMESES,
        DEFAULT_WORKLOADS,
        default_backends,
        known_names,
        run_test_all,
        split_names,
    )

    _, kw, kn = known_names()
    backends = split_names(o["backends"]) or default_backends()
    workloads = split_names(o["workloads"]) or [w for w in DEFAULT_WORKLOADS if w in kw]
    nemeses = split_names(o["nemeses"]) or [n for n in DEFAULT_NEMESES if n in kn]
    return run_test_all(backends=backends, workloads=workloads, nemeses=nemeses,
                        count=o["runs"], time_limit=o["time_limit"],
                        results_dir=o["results_dir"], pass_through=_pass_through_args(o),
                        seed=o["seed"], cell_timeout=o["cell_timeout"], out=sys.stderr,
                        shard_spec=o["shard"])


@main.command()
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Where index.html and report.md go [default: the results folder, "
                   "when there is one].")
@click.option("--publish", is_flag=True,
              help="First copy each results folder into OUT/<its name>, made fit to "
                   "publish: histories and logs compressed, the machine's paths replaced, "
                   "one full report per cell and a short page per run.")
@click.option("--verify", is_flag=True,
              help="Write nothing: re-check every run's history and exit 1 naming each "
                   "run whose published verdict differs.")
def compare(results_dirs: tuple[Path, ...], out_dir: Path | None, publish: bool,
            verify: bool) -> int:
    """Compare every run in one or more results folders: index.html and report.md.

    Rows are backends, columns nemeses, one table per workload; each cell adds up its
    runs and links to each. Several folders (the shards of one matrix) are merged, with a
    warning where their server or client versions differ."""
    from lockcheck.results.compare import compare as build
    from lockcheck.results.compare import load

    if verify:
        return _verify(results_dirs)
    if out_dir is None:
        if len(results_dirs) > 1 or publish:
            raise BadInput("give --out: where the merged page goes")
        out_dir = results_dirs[0]
    dirs = list(results_dirs)
    if publish:
        from lockcheck.results.publish import publish as make_publishable

        dirs = make_publishable(dirs, out_dir, say=lambda line: click.echo(line, err=True))
    for w in load(dirs).warnings:
        click.echo(f"lockcheck: warning: {w}", err=True)
    index, md = build(dirs, out_dir, write_reports=not publish)
    click.echo(f"{index}\n{md}")
    return 0


def _verify(dirs: tuple[Path, ...]) -> int:
    from lockcheck.results.verify import verify

    differ = n = crashed = 0
    for root in dirs:
        if not root.is_dir():
            raise BadInput(f"{root}: no such results folder")
        for r in verify(root):
            n += 1
            crashed += not r.verdict
            if not r.agrees:
                differ += 1
                click.echo(f"{r.run_dir}: published {r.published!r}, re-checked "
                           f"{r.rechecked!r}" + (f" ({r.note})" if r.note else ""))
    if not n:
        raise BadInput(f"{', '.join(map(str, dirs))}: no runs in it")
    click.echo(f"{n - differ - crashed} of {n} runs re-checked to their published verdict"
               + (f"; {differ} differ" if differ else "")
               + (f"; {crashed} published no verdict (crashed before the end)"
                  if crashed else ""))
    return exitcodes.INVALID if differ else 0


@main.command()
@click.argument("results_dir", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 opens it to the network).")
@click.option("--port", type=int, default=8080, show_default=True, help="0 picks a free one.")
def serve(results_dir: Path, host: str, port: int) -> int:
    """Serve a results folder (reports, logs, the comparison) over HTTP."""
    from lockcheck.results.serve import serve as run_server

    return run_server(results_dir, host, port, sys.stdout)


@main.group()
def cluster() -> None:
    """Bring a cluster up or down by hand, for debugging."""


@cluster.command("up", cls=Command, complete=with_registries)
@click.option("--backend", default="redis", show_default=True, help="Lock service and client.")
@click.option("--nodes", type=int, default=None)
@click.option("--clients", type=int, default=1, show_default=True,
              help="Client namespaces to create as well.")
@click.option("--provider", default="local", show_default=True, help="Where the nodes run.")
@click.option("--subnet", default=None)
@click.pass_context
def cluster_up(ctx: click.Context, **o: Any) -> int:
    """Start nodes and servers and leave them running."""
    from lockcheck.backends import backend as find_backend
    from lockcheck.runner import Teardown, no_interrupts, plan, servers_up
    from lockcheck.spec import TestSpec

    def say(line: str) -> None:
        click.echo(line, err=True)

    b = find_backend(o["backend"])
    clients = o["clients"]
    p = plan(TestSpec(backend=b.name, provider=o["provider"],
                      nodes=o["nodes"] or b.default_nodes, concurrency=max(1, clients),
                      nemesis=(), subnet=o["subnet"],
                      provider_options=given_provider_options(o, o["provider"])),
             say, command="lockcheck cluster up")
    undo = Teardown()
    try:
        c = servers_up(p, registry(ctx), undo, kind="cluster", clients=clients, say=say)
        services = p.db.describe()
        info = c.describe()
        c.keep(services)
    except BaseException:
        with no_interrupts():
            undo.run()
        raise
    name = p.provider.name
    on = info.get("subnet") or info.get("nodes_file") or name
    click.echo(f"cluster {c.run_id} up on {on}" + ("" if name == "local" else
                                                 f" ({name})") + ":")
    for node, addr in info.get("hosts", {}).items():
        svc = services.get(node, {})
        where = p.provider.place.format(run_id=c.run_id, node=node) or name
        click.echo(f"  {node:4} {addr:15} {where}  {svc.get('service', 'client')}"
                   + (f" :{svc['port']}" if "port" in svc else ""))
    click.echo(f"client config: {json.dumps(p.db.client_config())}")
    click.echo(f"remove it with: lockcheck cluster down {c.run_id}")
    return 0


@cluster.command("down")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option("--forget", "forget", multiple=True, metavar="RUN_ID",
              help="Drop this run's registry entry without cleaning it (its hosts are "
                   "gone for good: an ssh host that no longer exists).")
@click.pass_context
def cluster_down(ctx: click.Context, run_ids: tuple[str, ...], forget: tuple[str, ...]) -> int:
    """Remove every lockcheck cluster, and the leftovers of killed runs.

    Given run ids, remove only those clusters (left running by `cluster up` or
    --leave-running), and nothing of anyone else's."""
    from lockcheck.cluster.providers import all_providers
    from lockcheck.preflight import is_root

    reg = registry(ctx)
    known = {s.run_id: s for s in reg.all()}
    if run_ids:
        for rid in run_ids:
            if rid not in known:
                raise BadInput(f"{rid}: no such run in the registry (see: lockcheck cluster "
                               "status)")
        return remove_clusters(reg, [known[rid] for rid in run_ids])
    # without root, only what a provider that needs none made (inproc), in the
    # user's own registry
    providers = [p for p in all_providers() if is_root() or p.prerequisites() is None]
    for rid in forget:
        st = known.get(rid)
        if st is None:
            raise BadInput(f"--forget {rid}: no such run in the registry")
        if st.kind == "test" and st.owner_alive():
            raise BadInput(f"--forget {rid}: that test is still running")
    for rid in forget:
        reg.remove(rid)
        click.echo(f"forgot {rid}: whatever it left on its nodes stays there")
    live = [s for s in reg.all() if s.kind == "test" and s.owner_alive()]
    cleaned: list[str] = []
    problems: list[str] = []
    for p in providers:
        # clusters left running on purpose are removed too; live test runs are not
        try:
            cleaned += [r for r in p.reap(reg) + p.remove_kept(reg)
                        if r not in cleaned]
        except (BadInput, RuntimeError) as e:  # one provider's trouble: still do the rest
            problems.append(f"{p.name}: {e}")
    # a killed run whose hosts could not be reached stays registered (the reason was
    # said above): not a success
    live_ids = {s.run_id for s in live}
    problems += [f"run {s.run_id} (killed) is still registered; lockcheck cluster down "
                 f"tries again, --forget {s.run_id} drops it"
                 for s in reg.all() if s.kind == "test" and s.run_id not in live_ids
                 and not s.owner_alive()]
    click.echo(f"removed: {', '.join(cleaned) if cleaned else 'nothing'}")
    if live:
        click.echo(f"left alone (a test is running): {', '.join(s.run_id for s in live)}")
    for problem in problems:
        click.echo(f"lockcheck: could not remove everything: {problem}", err=True)
    return exitcodes.BAD_INPUT if problems else 0


def remove_clusters(reg: Registry, kept: list[RunState]) -> int:
    """`cluster down RUN_ID...`: those clusters, or what those killed runs left, only
    (no reaping, which would look at every run on the machine)."""
    from lockcheck.cluster.providers import provider
    from lockcheck.cluster.state import Selection

    for st in kept:
        if st.kind != "cluster" and st.owner_alive():
            raise BadInput(f"{st.run_id}: that test is still running")
    for st in kept:
        if st.kind != "cluster":
            # what a killed run left behind: removed as a cluster left running is
            st.kind = "cluster"
            reg.save(st)
    view = Selection(reg, [st.run_id for st in kept])
    removed: list[str] = []
    problems: list[str] = []
    for name in dict.fromkeys(st.provider for st in kept):
        try:
            removed += provider(name).remove_kept(view)
        except RuntimeError as e:  # a host out of reach: the run stays registered
            problems.append(f"{name}: {e}")
    click.echo(f"removed: {', '.join(removed) if removed else 'nothing'}")
    for problem in problems:
        click.echo(f"lockcheck: could not remove everything: {problem}", err=True)
    return exitcodes.BAD_INPUT if problems else 0


@cluster.command("status")
@click.pass_context
def cluster_status(ctx: click.Context) -> int:
    """List lockcheck clusters and runs on this machine."""
    from lockcheck.cluster.node import pid_alive
    from lockcheck.cluster.providers import PROVIDERS, provider

    states = registry(ctx).all()
    # a PID of a container or a remote host means nothing here
    pids_here = {st.provider for st in states
                 if st.provider in PROVIDERS and provider(st.provider).pids_here}
    if not states:
        click.echo("no lockcheck clusters")
    for st in states:
        owner = "running" if st.owner_alive() else ("left up" if st.kind == "cluster" else
                                                    "stale (owner gone)")
        click.echo(f"{st.run_id} {st.kind} {st.subnet or '-'} {owner}"
                   + ("" if st.provider == "local" else f" ({st.provider})"))
        for name, addr in st.nodes.items():
            svc = st.services.get(name, {})
            pid = svc.get("pid")
            alive = "" if pid is None or st.provider not in pids_here else (
                " up" if pid_alive(int(str(pid))) else " down")
            click.echo(f"  {name:4} {addr:15} {svc.get('service', '')}{alive}")
    return 0


@main.command(cls=Command, complete=with_registries)
@click.option("--provider", default=None,
              help="Also check this provider: docker (daemon, image) or ssh (each host of "
                   "--nodes-file) [default: local, and docker if a daemon is there].")
def doctor(**o: Any) -> int:
    """Check prerequisites and say how to install what is missing."""
    from lockcheck.preflight import doctor as run_doctor
    from lockcheck.preflight import provider_findings

    findings = run_doctor() + provider_findings(
        o["provider"], given_provider_options(o, o["provider"]))
    for f in findings:
        mark = "ok " if f.ok else ("--" if f.optional else "MISSING")
        click.echo(f"{mark:8} {f.what:20} {f.detail}" + ("" if f.ok else f"  -> {f.fix}"))
    click.echo("")
    click.echo(render_provider_faults())
    return 0 if all(f.ok or f.optional for f in findings) else exitcodes.BAD_INPUT


@main.group()
def servers() -> None:
    """The server programs that do not come as this distribution's packages."""


@servers.command("install")
@click.option("--backend", "backends", multiple=True,
              help="Only this backend's servers (repeatable) [default: every backend's].")
def servers_install(backends: tuple[str, ...]) -> int:
    """Install what is missing of them under /var/lib/lockcheck/servers (cached: a
    second install needs no network). scripts/install runs this."""
    from lockcheck.backends import BACKENDS, backend
    from lockcheck.preflight import is_root
    from lockcheck.servers import ROOT, Debian, install

    chosen = [backend(n) for n in backends] if backends else list(BACKENDS.values())
    if not is_root():
        raise BadInput(f"lockcheck servers install writes to {ROOT}: run it as root")
    sources = [s for b in chosen for choice in (None, *b.alternatives)
               for s in b.sources(choice).values()]
    done = install(sources, say=lambda line: click.echo(line, err=True))
    own = {s for s in sources if not isinstance(s, Debian)}
    click.echo(f"servers: {len(done)} installed now, {len(own) - len(done)} already here"
               + (", the rest are Debian packages (scripts/install)"
                  if len(own) < len(set(sources)) else ""))
    return 0


@servers.command("list")
def servers_list() -> int:
    """Each backend's server programs, where each comes from, and whether it is here."""
    from lockcheck.backends import BACKENDS, PACKAGED_IN
    from lockcheck.preflight import find_program
    from lockcheck.servers import install_hint

    seen: dict[str, Any] = {}
    for b in BACKENDS.values():
        for choice in (None, *b.alternatives):
            seen.update(b.sources(choice))
    for prog, source in seen.items():
        here = find_program(prog) is not None
        hint = (f"packaged in {PACKAGED_IN[prog]}" if prog in PACKAGED_IN
                else install_hint(source))
        click.echo(f"{'ok ' if here else 'MISSING':8} {prog.rsplit('/', 1)[-1]:16} "
                   f"{source.describe()}" + ("" if here else f"  -> {hint}"))
    return 0


@main.group()
def images() -> None:
    """The docker provider's node image."""


@images.command("build")
@click.option("--base", default="registry", show_default=True,
              help="registry (debian:<this machine's Debian release> from a registry) or "
                   "debootstrap (a Debian made here from this machine's apt mirror, where no "
                   "registry answers).")
@click.option("--force", is_flag=True, help="Build even if the image is up to date.")
@click.option("--image", default=None,
              help="Tag [default: lockcheck-node:<this machine's Debian release>].")
def images_build(base: str, force: bool, image: str | None) -> int:
    """Build the node image from the repository's Dockerfile (skipped when up to date)."""
    from lockcheck.cluster import images as node_images
    from lockcheck.cluster.containers import connect

    node_images.base_of(base)  # a bad --base before any daemon is asked
    node_images.build(connect(), base=base, force=force, image=image or node_images.IMAGE,
                      say=lambda line: click.echo(line, err=True))
    return 0


@main.command("client-check")
@click.argument("factory")
@click.option("--backend", default="redis", show_default=True,
              help="Whose servers the client is checked against (see: lockcheck backends).")
@click.option("--ttl-ms", type=int, default=None,
              help="Lease TTL.  [default: 1000, or the backend's minimum TTL]")
def client_check(factory: str, backend: str, ttl_ms: int | None) -> int:
    """Check a lock client in seconds, without faults, before a long run.

    FACTORY is MODULE:FACTORY, path/to/file.py:FACTORY or a shipped adapter's name.
    Against live servers: acquire, a second acquire that must be refused, renew,
    release, a lease that must expire, a renew and a release by the expired holder
    that must be refused (also once the lock was granted again and freed: a renew
    must never bring a lapsed lock back), a lease of 1.5 s that must last 1.5 s
    (not a TTL rounded down to whole seconds), a lock taken away on the server under
    its renewing holder, which the client must notice within a third of the TTL, and
    the errors of a stopped server.
    Exit 0 if the client got everything right, 1 if not."""
    from lockcheck.client_check import run_client_check

    return run_client_check(factory, backend, ttl_ms=ttl_ms,
                            say=lambda line: click.echo(line))


@main.command("libraries")
@click.option("--libraries", multiple=True,
              help="Adapters or PyPI libraries, space- or comma-separated [default: every "
                   "adapter lockcheck ships, see: lockcheck backends].")
@click.option("--faults", multiple=True,
              help="Faults of the battery to run [default: none client-pause partition "
                   "reply-loss kill].")
@click.option("--runs", type=int, default=3, show_default=True, help="Runs per fault.")
@click.option("--time-limit", type=float, default=10.0, show_default=True,
              help="Seconds per run.")
@click.option("--results-dir", default="results/libraries", show_default=True,
              type=click.Path(path_type=Path), help="Where the runs go before publishing.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("docs/libraries.md"),
              show_default=True,
              help="The page; the runs it links are published in the folder of its name.")
@click.option("--seed", type=int, default=None, help="Seed of each fault's first run.")
@click.option("--cell-timeout", type=float, default=None,
              help="Stop a run that takes longer [default: 2 x time limit + 300].")
@click.option("--page-only", is_flag=True,
              help="Run nothing: publish what the results folder holds and write the page.")
def libraries(**o: Any) -> int:
    """Put every lock library lockcheck has an adapter for through client-check and a
    short battery of faults, and write the page that shows them side by side.

    Per library and backend: client-check, then --runs runs of each fault (a test-all
    matrix with --client). A fault the backend refuses is shown as refused, never run.
    Exit code as test-all's: 1 if any run was unsafe, 2 if any was undecided, 130 if
    interrupted (the page is not written), 254 for bad arguments."""
    from lockcheck.libraries import faults, pairs, run_libraries
    from lockcheck.results.libraries import write_page
    from lockcheck.results.matrix import split_names

    names, chosen = split_names(o["libraries"]), split_names(o["faults"])
    pairs(names), faults(chosen)  # an unknown name is refused before anything runs
    say = lambda line: click.echo(line, err=True)  # noqa: E731
    if o["page_only"]:
        click.echo(f"page: {write_page(o['out'], [o['results_dir']], say)}")
        return 0
    code = run_libraries(libraries=names, fault_names=chosen, count=o["runs"],
                         time_limit=o["time_limit"], results_dir=o["results_dir"],
                         seed=o["seed"], cell_timeout=o["cell_timeout"], out=sys.stderr)
    if code == exitcodes.INTERRUPTED:
        say("interrupted: the page was not written; `lockcheck libraries --page-only` "
            "writes it from what ran")
        return code
    click.echo(f"page: {write_page(o['out'], [o['results_dir']], say)}")
    return code


if __name__ == "__main__":
    main()
