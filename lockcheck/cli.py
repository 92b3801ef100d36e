"""The `lockcheck` command.

Exit codes (also in the README): 0 valid, 1 invalid (a safety violation was found),
2 unknown, 130 interrupted by Ctrl-C/SIGTERM (after teardown and a check of what was
recorded), 254 bad arguments or bad input, 255 internal error.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click

from lockcheck import __version__, exitcodes
from lockcheck.errors import BadInput
from lockcheck.history import HistoryError


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


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockcheck")
def main() -> None:
    """Test distributed locks against real servers under real faults."""


@main.command()
@click.option("--backend", default="redis", show_default=True, help="Lock service: redis.")
@click.option("--workload", default="mutex", show_default=True,
              help="mutex (acquire/hold/release) or fenced (also write to a fenced resource).")
@click.option("--nemesis", default="partition", show_default=True,
              help="none, partition, kill, pause, or a comma-separated list.")
@click.option("--nodes", type=int, default=None, help="Server nodes [backend default: redis 1].")
@click.option("--concurrency", type=int, default=5, show_default=True,
              help="Client worker processes, each in its own namespace.")
@click.option("--keys", type=int, default=3, show_default=True, help="How many lock names.")
@click.option("--time-limit", type=float, default=30.0, show_default=True, help="Seconds.")
@click.option("--ttl-ms", type=int, default=1000, show_default=True, help="Lease TTL.")
@click.option("--hold-ms", default="50-500", show_default=True,
              help="Critical-section time, ms or a range lo-hi.")
@click.option("--nemesis-interval", type=float, default=3.0, show_default=True,
              help="Seconds between faults, and how long a partition or pause lasts.")
@click.option("--restart-delay-ms", type=int, default=100, show_default=True,
              help="After a kill, restart the server this much later.")
@click.option("--quiet", type=float, default=5.0, show_default=True,
              help="Final seconds with every fault healed (at most a quarter of the run).")
@click.option("--resource", default="fenced", show_default=True,
              help="fenced workload: fenced (rejects stale fences) or unfenced resource.")
@click.option("--seed", type=int, default=None, help="Random seed [default: random].")
@click.option("--test-count", type=int, default=1, show_default=True,
              help="Run the test this many times; stop at the first invalid run.")
@click.option("--results-dir", default="results", show_default=True, type=click.Path())
@click.option("--subnet", default=None, help="A free /24 for the cluster [default: auto].")
@click.option("--leave-running", is_flag=True,
              help="Keep the cluster up after the run (remove it with `lockcheck cluster down`).")
def test(**o: Any) -> int:
    """Run a test: cluster up, clients and faults, then check the history."""
    import random

    from lockcheck.locks.backends import BACKENDS
    from lockcheck.runner import run_test
    from lockcheck.spec import TestSpec, parse_nemesis, parse_range_ms

    if o["backend"] not in BACKENDS:
        raise BadInput(f"unknown backend {o['backend']!r}; available: {', '.join(BACKENDS)}")
    nemesis = parse_nemesis(o["nemesis"])
    if o["test_count"] < 1:
        raise BadInput("--test-count must be at least 1")
    worst = exitcodes.VALID
    for i in range(o["test_count"]):
        seed = o["seed"] if o["seed"] is not None else random.randrange(2**31)
        if o["seed"] is not None:
            seed += i
        spec = TestSpec(
            backend=o["backend"], workload=o["workload"],
            nemesis=() if nemesis == ("none",) else nemesis,
            nodes=o["nodes"] or BACKENDS[o["backend"]].default_nodes,
            concurrency=o["concurrency"], keys=o["keys"], time_limit=o["time_limit"],
            ttl_ms=o["ttl_ms"], hold_ms=parse_range_ms(o["hold_ms"], "--hold-ms"),
            nemesis_interval=o["nemesis_interval"], restart_delay=o["restart_delay_ms"] / 1000,
            quiet=o["quiet"], resource=o["resource"], seed=seed,
            results_dir=o["results_dir"], leave_running=o["leave_running"],
            subnet=o["subnet"])
        outcome = run_test(spec)
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
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", default=None,
              help="mutex, fenced-mutex, cas-register, register, multi-register, kv, or a "
                   "checker name.")
@click.option("--format", "fmt", default=None,
              help="lockcheck, jepsen-edn, porcupine-etcd, porcupine-kv [default: by file].")
@click.option("--timeout", type=float, default=None, help="Seconds per search [default 60].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per path on stdout.")
@click.option("--html", "html_dir", type=click.Path(path_type=Path), default=None,
              help="Write the visualization of each failed check into this folder.")
@click.option("--allow-truncated", is_flag=True,
              help="Ignore an incomplete last line (a run that was killed).")
@click.option("--initial", default=None,
              help="Register models: the initial value, JSON or EDN (0, '{\"x\": 0}', "
                   "'{:x 0}') [default: nil].")
def check(paths: tuple[Path, ...], model: str | None, fmt: str | None, timeout: float | None,
          as_json: bool, html_dir: Path | None, allow_truncated: bool,
          initial: str | None) -> int:
    """Re-check stored runs or history files, without any cluster."""
    from lockcheck.checker.analyze import check_path
    from lockcheck.checker.external import parse_initial
    from lockcheck.results.progress import verdict_word

    start = None if initial is None else parse_initial(initial)
    verdicts: list[object] = []
    for p in paths:
        r = check_path(p, model=model, fmt=fmt, timeout=timeout, html_dir=html_dir,
                       allow_truncated=allow_truncated, initial=start)
        verdicts.append(r["valid"])
        if as_json:
            click.echo(json.dumps(r, default=str))
        else:
            detail = r.get("summary") or ""
            click.echo(f"{p}: {verdict_word(r['valid'])} ({r.get('elapsed_s', 0):.2f}s) {detail}")
    return exitcodes.for_verdict(exitcodes.merge_valid(verdicts))


@main.group()
def cluster() -> None:
    """Bring a cluster up or down by hand, for debugging."""


@cluster.command("up")
@click.option("--backend", default="redis", show_default=True)
@click.option("--nodes", type=int, default=None)
@click.option("--clients", type=int, default=1, show_default=True,
              help="Client namespaces to create as well.")
@click.option("--subnet", default=None)
def cluster_up(backend: str, nodes: int | None, clients: int, subnet: str | None) -> int:
    """Start nodes and servers and leave them running."""
    from lockcheck.cluster.netns import LocalCluster
    from lockcheck.cluster.redis import RedisService
    from lockcheck.cluster.state import Registry
    from lockcheck.locks.backends import BACKENDS
    from lockcheck.preflight import require_for_test

    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    require_for_test(BACKENDS[backend].service, "lockcheck cluster up")
    reg = Registry()
    c = LocalCluster(nodes or BACKENDS[backend].default_nodes, clients, reg, kind="cluster",
                     subnet=subnet)
    with c:
        for n in c.nodes:
            svc = RedisService(node=n, workdir=c.workdir / n.name,
                               log_path=c.workdir / n.name / "redis.log")
            svc.start()
            assert c.state is not None
            c.state.services[n.name] = {"service": "redis", "address": n.address,
                                        "port": svc.port, "pid": svc.daemon.pid if svc.daemon
                                        else None, "log": str(svc.log_path)}
        assert c.state is not None
        reg.save(c.state)
        state = c.state
        c.state = None  # leave it running: __exit__ must not tear it down
    click.echo(f"cluster {state.run_id} up on {state.subnet}:")
    for name, addr in state.nodes.items():
        ns = f"lc-{state.run_id}-{name}"
        extra = state.services.get(name, {})
        click.echo(f"  {name:4} {addr:15} netns {ns}  {extra.get('service', 'client')}"
                   + (f" :{extra['port']}" if "port" in extra else ""))
    click.echo("remove it with: lockcheck cluster down")
    return 0


@cluster.command("down")
def cluster_down() -> int:
    """Remove every lockcheck cluster, and the leftovers of killed runs."""
    from lockcheck.cluster.netns import cleanup_leftovers
    from lockcheck.cluster.state import Registry
    from lockcheck.preflight import is_root

    if not is_root():
        raise BadInput("lockcheck cluster down needs root")
    live = [s for s in Registry().all() if s.kind == "test" and s.owner_alive()]
    cleaned = cleanup_leftovers(Registry(), include_live=False)
    # clusters left running on purpose are removed too; live test runs are not touched
    for st in Registry().all():
        if st.kind == "cluster":
            from lockcheck.cluster.netns import destroy

            destroy(st, Registry())
            cleaned.append(st.run_id)
    click.echo(f"removed: {', '.join(cleaned) if cleaned else 'nothing'}")
    if live:
        click.echo(f"left alone (a test is running): {', '.join(s.run_id for s in live)}")
    return 0


@cluster.command("status")
def cluster_status() -> int:
    """List lockcheck clusters and runs on this machine."""
    from lockcheck.cluster.node import pid_alive
    from lockcheck.cluster.state import Registry

    states = Registry().all()
    if not states:
        click.echo("no lockcheck clusters")
    for st in states:
        owner = "running" if st.owner_alive() else ("left up" if st.kind == "cluster" else
                                                    "stale (owner gone)")
        click.echo(f"{st.run_id} {st.kind} {st.subnet} {owner}")
        for name, addr in st.nodes.items():
            svc = st.services.get(name, {})
            pid = svc.get("pid")
            alive = "" if pid is None else (" up" if pid_alive(int(str(pid))) else " down")
            click.echo(f"  {name:4} {addr:15} {svc.get('service', '')}{alive}")
    return 0


@main.command()
def doctor() -> int:
    """Check prerequisites and say how to install what is missing."""
    from lockcheck.preflight import doctor as run_doctor

    findings = run_doctor()
    for f in findings:
        mark = "ok " if f.ok else "MISSING"
        click.echo(f"{mark:8} {f.what:20} {f.detail}" + ("" if f.ok else f"  -> {f.fix}"))
    return 0 if all(f.ok for f in findings) else exitcodes.BAD_INPUT


if __name__ == "__main__":
    main()
