"""`runner history` (list results, their series and change points), `runner history import`
(backfill from run dirs) and `runner goldens propose` (goldens from the history)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import socket
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput, RunnerError
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.outdir import REFUSES, RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DISK_FULL,
    Exits,
    add_confirm_rounds,
    add_dry_run,
    add_find_links,
    add_good_bad,
    add_json,
    add_out,
    add_pre,
    add_results,
    document,
    renamed,
    rounds_at_most,
    shared,
)
from runner.history.extract import RECORDED
from runner.inputs.cliargs import COUNT, COUNT_OR_ZERO, number
from runner.inputs.paths import suite_path

HISTORY_JSON, HISTORY_MD, HISTORY_HTML = "history.json", "history.md", "history.html"
PROPOSAL_JSON, PROPOSAL_MD = "proposal.json", "proposal.md"
DEFAULT_LIMIT = 1000  # results: a year of nightlies of a dozen series in well under a second
_AGO = re.compile(r"^(\d{1,5})([dh])$")


def parse_when(text: str, flag: str, end_of_day: bool = False) -> datetime:
    """`2026-11-01`, `2026-11-01T08:00`, or `7d` / `12h` ago, as naive UTC; a date alone
    with `end_of_day` (--until) is the whole day."""
    m = _AGO.match(text.strip())
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        return now - (timedelta(days=n) if unit == "d" else timedelta(hours=n))
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"`{text}` is not a date", where=flag,
                       fix="e.g. 2026-11-01, 2026-11-01T08:00, 7d or 12h") from None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    if end_of_day and len(text.strip()) == len("2026-11-01"):
        when += timedelta(days=1, microseconds=-1)
    return when


def _filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("which results (each narrows; default: all)")
    shared(g, "--profile-match", metavar="GLOB",
           help="only results of a profile this matches (a name or glob, e.g. mi325x "
           "or 'mi3*'; default: every profile)")
    _command(g, "only results of this command", "all")
    shared(g, "--metric", action="append", metavar="NAME",
           help="only this metric, repeatable: fid, clip, samples_per_s, stage_ms, "
           "dispatch_ms, dispatch_count, time_ms, size_bytes, latency_ms, passed "
           "(default: all)")
    shared(g, "--stage", variant="pattern", metavar="GLOB",
           help="only numbers of this stage, layout, golden test or dispatch (a glob: "
           "unet, 'unet*', 'clip bs1', 'tiny-bench/*'; default: all)")
    g.add_argument("--iree-match", metavar="VERSION|COMMIT|A..B",
                   help="only results of an IREE build this matches: a version (3.13.0, or "
                   "the 3.13.0rc20261016 its wheels report) or commit prefix as recorded, or a "
                   "range A..B of them in the history's order (default: every build)")
    _since(g)
    g.add_argument("--until", metavar="DATE",
                   help="only results that finished on or before this date (a date alone: "
                   "to its end; default: now)")
    _machine(g)
    shared(g, "--sku", help="only benchmark goldens of this SKU (default: every SKU)")
    # A filter is named as one: elsewhere --profile loads a profile and --iree installs a build.
    for old, new in (("--profile", "--profile-match GLOB"),
                     ("--iree", "--iree-match VERSION|COMMIT|A..B")):
        renamed(p, old, new, f"history selects results; {old} elsewhere names what to run")


def _command(g: Any, what: str, default: str, **kwargs: Any) -> None:
    shared(g, "--command", metavar="CMD", dest="result_command", choices=list(RECORDED),
           help=f"{what}: run, bench, 'bench goldens', mlperf, validate, 'goldens check' "
           f"(default: {default})", **kwargs)


def _min_change(p: Any, what: str) -> None:
    shared(p, "--min-change", type=number(0.0, 10.0), default=0.02, metavar="FRACTION",
           help=f"{what} (default: 0.02, i.e. 2%%)")


def _since(g: Any) -> None:
    shared(g, "--since", metavar="DATE", help="only results that finished on or after this "
           "date: 2026-11-01, 2026-11-01T08:00, or 7d / 12h ago (default: the first)")


def _machine(g: Any) -> None:
    shared(g, "--machine", metavar="HOST", help="only results of this host (a name or glob; "
           "default: every machine)")


def _query(args: argparse.Namespace):
    from runner.history.store import Query

    return Query(profile=args.profile_match, command=args.result_command, machine=args.machine,
                 sku=args.sku, metrics=tuple(args.metric or ()), subject=args.stage,
                 since=parse_when(args.since, "--since") if args.since else None,
                 until=parse_when(args.until, "--until", True) if args.until else None,
                 versions=() if not args.iree_match or ".." in args.iree_match
                 else (args.iree_match,),
                 limit=None if args.iree_match and ".." in args.iree_match
                 else args.limit or None)


def _in_range(results: list, spec: str) -> list:
    """Results from the first that measured build A to the last that measured build B."""
    from runner.history.store import release_candidates

    a, _, b = spec.partition("..")

    def hit(r: Any, v: str) -> bool:
        release = release_candidates(v) is not None
        return (bool(v) and v in (r.compiler_version, r.runtime_version, r.build)) or (
            release and (r.compiler_version or r.runtime_version).startswith(v + "rc")) or (
            len(v) >= 7 and (r.compiler_commit or r.runtime_commit).startswith(v))

    starts = [i for i, r in enumerate(results) if hit(r, a)]
    ends = [i for i, r in enumerate(results) if hit(r, b)]
    if not starts or not ends:
        missing = a if not starts else b
        raise BadInput(f"no result in the selection measured `{missing}`",
                       where="--iree-match",
                       fix="name a version or commit the history holds (`runner history "
                       "--json` lists them)")
    return results[starts[0]:ends[-1] + 1]


def cmd_history(ctx: CommandContext) -> int:
    from runner.history import render
    from runner.history.changes import detect_all
    from runner.history.judge import alerts, judge_changes
    from runner.history.selection import check_dates, refuse_empty
    from runner.history.series import series_of
    from runner.history.store import Query, opened
    from runner.history.url import resolve

    args = ctx.args
    url = resolve(args.results)
    query = _query(args)
    check_dates(query.since, query.until)
    with opened(url) as store:
        results = store.query(query)
        if not results and query != Query(limit=query.limit):
            raise refuse_empty(store, query)
        confirmations = store.confirmations()
    if args.iree_match and ".." in args.iree_match:
        results = _in_range(results, args.iree_match)
    if args.limit:
        results = results[-args.limit:]
    series = series_of(results)
    changes = judge_changes(detect_all(series, min_change=args.min_change), confirmations)
    shown = {"profile": args.profile_match, "command": args.result_command,
             "metric": args.metric, "stage": args.stage, "iree": args.iree_match,
             "since": args.since, "until": args.until,
             "machine": args.machine, "sku": args.sku, "limit": args.limit,
             "min_change": args.min_change}
    record = render.to_json(url.shown(), shown, results, changes)
    names = tuple(args.metric or ())
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / HISTORY_JSON, record)
        atomic_write_text(out / HISTORY_MD, render.markdown(url.shown(), results, changes,
                                                            names))
        atomic_write_text(out / HISTORY_HTML, render.html(url.shown(), results, series, changes,
                                                          names))
        written = (HISTORY_JSON, HISTORY_MD, HISTORY_HTML)
        print(f"reports: {', '.join(str(out / n) for n in written)}", file=sys.stderr)
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
    elif not args.out:
        print(render.markdown(url.shown(), results, changes, names), end="")
    return EXIT_FAILED if alerts(changes) else EXIT_OK


def cmd_import(ctx: CommandContext) -> int:
    from runner.history.extract import extract
    from runner.history.store import opened
    from runner.history.url import resolve

    args = ctx.args
    url = resolve(args.results)
    found, failed = [], 0
    for path in args.run_dirs:
        try:
            found.append((path, extract(Path(path))))
        except RunnerError as e:
            failed += 1
            print(f"error: {e}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    if args.dry_run:
        for path, results in found:
            for r in results:
                print(f"would record: {r.command} {path} ({r.finished_at:%Y-%m-%d %H:%M}, "
                      f"{r.iree}, {len(r.metrics)} metrics) in {url.shown()}")
        return EXIT_BAD_INPUT if failed else EXIT_OK
    with opened(url) as store:
        for path, results in found:
            for r in results:
                added = store.add(r)
                rows.append({"out_dir": r.out_dir, "command": r.command, "key": r.key,
                             "metrics": len(r.metrics), "added": added})
                if not args.json:
                    print(f"{'recorded' if added else 'already there'}: {r.command} {path} "
                          f"({len(r.metrics)} metrics)")
    if args.json:
        print(json.dumps({"store": url.shown(), "imported": rows, "failed": failed},
                         indent=2, sort_keys=True))
    print(f"{sum(r['added'] for r in rows)} result(s) recorded in {url.shown()}, "
          f"{sum(not r['added'] for r in rows)} already there"
          + (f", {failed} director(ies) not readable" if failed else ""), file=sys.stderr)
    return EXIT_BAD_INPUT if failed else EXIT_OK


def _confirm_request(args: argparse.Namespace):
    from runner.bisect.builds import Sources, check_find_links, parse_build
    from runner.history.confirm import ConfirmRequest

    sources = Sources(find_links=check_find_links(args.find_links), pre=args.pre)
    good, bad = parse_build(args.good, sources, "--good"), parse_build(args.bad, sources, "--bad")
    if good.spec == bad.spec:
        raise BadInput(f"--good and --bad are one build ({good.spec}): nothing to compare",
                       where="--bad", fix="name the first bad build the history printed")
    return ConfirmRequest(good, bad, args.result_command, args.metric[0], args.stage,
                          args.profile_match, args.sku, args.rounds, args.min_change,
                          Path(args.out).absolute(), sources, rounds_at_most(args))


def cmd_confirm(ctx: CommandContext) -> int:
    from runner.history import confirm
    from runner.history.store import Query, open_store, opened
    from runner.history.url import resolve

    args = ctx.args
    if len(args.metric) != 1:
        raise BadInput("confirm measures one metric", where="--metric",
                       fix="name the one metric of the change (e.g. --metric time_ms)")
    req = _confirm_request(args)
    url = resolve(args.results)
    if args.dry_run and url.path is not None and not url.path.is_file():
        raise BadInput("the store holds no results yet", where=url.shown(),
                       fix="record the series first (bench goldens with --out)")
    query = Query(command=req.command, metrics=(req.metric,), sku=req.sku)
    with (open_store(url, upgrade=False) if args.dry_run else opened(url)) as store:
        series = confirm.find_series(store.query(query), req, socket.gethostname())
        if args.dry_run:
            print("\n".join(confirm.confirm_dry_run(req, [series], url.shown())))
            return EXIT_OK
        confirmation = confirm.confirm(req, series)
        store.add_confirmation(confirmation)
    text = confirm.confirmation_summary(confirmation, series)
    atomic_write_json(req.out / confirm.CONFIRM_JSON, confirmation.to_dict())
    atomic_write_text(req.out / confirm.CONFIRM_MD, text)
    print(json.dumps(confirmation.to_dict(), indent=2, sort_keys=True) if args.json else text,
          end="\n" if args.json else "")
    print(f"confirmation stored in {url.shown()}; reports: {req.out / confirm.CONFIRM_JSON}, "
          f"{req.out / confirm.CONFIRM_MD}", file=sys.stderr)
    return EXIT_FAILED if confirmation.holds else EXIT_OK


def cmd_propose(ctx: CommandContext) -> int:
    from runner.bench.goldens import load_benchmarks
    from runner.goldens.cli import module_dirs, selection
    from runner.history import propose_files
    from runner.history.propose import propose
    from runner.history.store import Query, opened
    from runner.history.url import resolve

    args = ctx.args
    benches = load_benchmarks([suite_path(p) for p in args.paths], selection(args),
                              module_dirs(args))
    url = resolve(args.results)
    query = Query(command="bench goldens", sku=args.sku, machine=args.machine,
                  metrics=("time_ms", "dispatch_count", "size_bytes"),
                  since=parse_when(args.since, "--since") if args.since else None)
    with opened(url) as store:
        results = store.query(query)
    proposals = [propose(b, results, args.sku, args.min_runs) for b in benches]
    lines = []
    for p in proposals:
        lines += [f"## {p.test} ({p.sku})", ""]
        if p.golden_time_ms is not None:
            values = [pt.value for pt in p.runs]
            lines.append(f"golden_time_ms {p.golden_time_ms:g} x {p.tolerance:g} from "
                         f"{len(p.runs)} run(s), {min(values):.4g}..{max(values):.4g} ms, "
                         f"{p.runs[0].when:%Y-%m-%d} to {p.runs[-1].when:%Y-%m-%d}")
        lines += [f"- {n}" for n in p.notes + p.headroom]
        diff = p.diff()
        lines += (["", "```diff", diff.rstrip("\n"), "```"] if diff else ["", "no change"])
        if p.runs:
            lines += ["", "runs used:", *[f"- {pt.when:%Y-%m-%d %H:%M} {pt.build} "
                                          f"{pt.value:.4g} ms ({pt.result.out_dir})"
                                          for pt in p.runs]]
        lines.append("")
    text = "\n".join(lines)
    record = {"store": url.shown(), "sku": args.sku,
              "proposals": [p.to_dict() for p in proposals]}
    if args.out:
        out = Path(args.out)
        written = propose_files.write_proposals(list(zip(benches, proposals, strict=True)), out)
        record["written"] = [str(w) for w in written]
        atomic_write_json(out / PROPOSAL_JSON, record)
        atomic_write_text(out / PROPOSAL_MD, text)
        suites = sorted({str(w.parent) for w in written})
        where = (f"`{shlex.join(['runner', 'bench', 'goldens', *suites])} --sku {args.sku}` "
                 "checks them where they are" if written else "none")
        print(f"proposed files: {where}; reports: {out / PROPOSAL_JSON}, "
              f"{out / PROPOSAL_MD}", file=sys.stderr)
    print(json.dumps(record, indent=2, sort_keys=True) if args.json else text, end="" if
          not args.json else "\n")
    if not any(p.runs for p in proposals):  # nothing measured: nothing was judged either
        raise BadInput(
            f"the store holds no `runner bench goldens --sku {args.sku}` result of these "
            f"{len(proposals)} benchmark test(s): nothing proposed", where=url.shown(),
            fix=f"run `{shlex.join(['runner', 'bench', 'goldens', *args.paths])} --sku "
            f"{args.sku} --out DIR` on that SKU's machine first (it records into this "
            "store), or point --results, --sku, --machine and --since at the runs you mean")
    return EXIT_OK


def register(subparsers: Any, goldens: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`runner history` with its `import`, and `goldens propose` under `goldens`."""
    p = subparsers.add_parser(
        "history", help="every recorded result: list, chart, find where a metric moved "
        "(change points, with the bisect command); import old run dirs",
        description="Reads the results store that run, bench, bench goldens, mlperf, "
        "validate and goldens check record into when they finish. Without a subcommand: "
        "the selected results, each series' change points (a step found by ruptures on "
        "the series' ranks and confirmed by a Mann-Whitney test) with what each is: the "
        "machine's (the same build, or the machine changed with it), unconfirmed (worse "
        "across builds: `history confirm` measures both again), or a confirmed regression; "
        "as Markdown, JSON or an HTML page of charts. Exit 1 only for a confirmed "
        "regression.")
    _filters(p)
    p.add_argument("--limit", type=COUNT_OR_ZERO, default=DEFAULT_LIMIT, metavar="N",
                   help="only the newest N results of the selection, the series and change "
                   f"points in them (default: {DEFAULT_LIMIT}; 0: all)")
    _min_change(p, "a change point smaller than this relative change is not reported")
    add_results(p, records=False)
    add_json(p, "the results and changes")
    add_out(p, "write history.json, history.md and history.html (charts) here",
            Rerun(RESUMES, "nothing: the history is read again and the reports rewritten"),
            required=False, default="none: Markdown on the console")
    p.set_defaults(func=cmd_history)
    document(p, "runner history --profile-match cpu --metric stage_ms --since 30d",
             "runner history --metric fid --metric clip --json",
             "runner history --out runs/history",
             "runner history --iree-match 3.12.0..3.13.0 --machine 'mi325x-*' --results "
             "postgresql://lab@db.lab/results",
             out="history.json (every selected result and change), history.md, history.html "
             "(each series over builds and dates, bands and change points drawn)",
             exits=Exits(verdict="a change point is a confirmed regression",
                         incomplete=DISK_FULL))
    sub = p.add_subparsers(dest="history_command", metavar="{import,confirm}")
    i = sub.add_parser("import", help="add the results of existing out dirs (run, bench, "
                       "bench goldens, mlperf, validate, goldens check) to the store")
    i.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="out dirs of recorded commands; one already in the store is skipped")
    add_results(i, records=False)
    add_json(i, "what was recorded")
    add_dry_run(i, "what would be recorded, and where")
    i.set_defaults(func=cmd_import)
    document(i, "runner history import runs/main",
             "runner history import runs/main --dry-run",
             "runner history import runs/nightly-* --results postgresql://lab@db.lab/results",
             exits=Exits(incomplete=DISK_FULL))

    _register_confirm(sub)

    from runner.goldens.cli import benchmark_paths_arg, selection_flags

    g: Any = goldens._subparsers._group_actions[0]  # type: ignore[union-attr]
    q = g.add_parser("propose", help="golden_time_ms and its tolerance (and dispatch count, "
                     "size) for benchmark tests, from the history of `bench goldens`")
    benchmark_paths_arg(q)
    shared(q, "--sku", required=True, help="the SKU whose results and golden entries count")
    selection_flags(q)
    _machine(q)
    _since(q)
    q.add_argument("--min-runs", type=COUNT, default=5, metavar="N",
                   help="fewest runs in the window (from the latest build change, up to a "
                   "machine change) to propose a time (default: 5)")
    add_results(q, records=False)
    add_json(q, "the proposals")
    add_out(q, "write the proposed test files (json/<suite's parent>/<suite>/, with the "
            "quality tests they name), proposal.json and proposal.md here",
            Rerun(RESUMES, "nothing: the proposal is made again"), required=False,
            default="none: the diff on the console")
    q.set_defaults(func=cmd_propose, rocm_chip=None)
    document(q, "runner goldens propose tiny-bench --sku cpu",
             "runner goldens propose tiny-bench --sku cpu --min-runs 1 --since 30d "
             "--out runs/propose",
             out="json/ (each changed test file where `bench goldens` checks it, and the "
             "quality tests it names), proposal.json, proposal.md",
             exits=Exits(incomplete=DISK_FULL))
    return p


def _register_confirm(sub: Any) -> None:
    c = sub.add_parser(
        "confirm", help="measure a change's last good and first bad builds again, "
        "interleaved on this machine, and store whether the difference holds",
        description="Installs both builds (a cached venv each, as runner bisect does) and "
        "runs the series' bench goldens test with each in turn, good, bad, bad, good, ..., "
        "so both see the same machine. Each pair of rounds gives the bad/good ratio of every "
        "repetition of one against every repetition of the other; the change holds when the "
        "ratio's signed-rank interval over the pairs lies wholly on the worse side of 1 and "
        "the estimate is past --min-change; while the estimate is past it but the interval "
        "takes in no change, rounds are added up to --max-rounds. The "
        "confirmation is stored: `runner history` then calls the change a regression (exit "
        "1) or the machine's. Exit 1 when it holds, 0 when it does not.")
    add_good_bad(c)
    g = c.add_argument_group("the series (as `runner history` printed the command)")
    _command(g, "the command of the series", "none: required", required=True)
    shared(g, "--metric", action="append", metavar="NAME", required=True,
           help="the series' metric: time_ms (default: none: required)")
    shared(g, "--stage", variant="pattern", metavar="GLOB", required=True,
           help="the series' subject, e.g. tiny-bench/unet_cpu (default: none: required)")
    shared(g, "--profile-match", metavar="GLOB",
           help="the series' profile (default: any, where one series matches)")
    shared(g, "--sku", help="the series' SKU (default: any, where one series matches)")
    add_confirm_rounds(c)
    _min_change(c, "the smallest bad/good change that holds")
    add_find_links(c)
    add_pre(c)
    add_results(c, records=False)
    add_json(c, "the confirmation")
    add_out(c, "write confirm.json, confirm.md and each round's bench goldens (rounds/) here",
            Rerun(REFUSES, "nothing: the rounds are measured again"))
    add_dry_run(c, "each build's setup and every round's command, in order")
    c.set_defaults(func=cmd_confirm)
    document(c, "runner history confirm --good wheels:3.12.0 --bad wheels:3.13.0 --command "
             "'bench goldens' --metric time_ms --stage tiny-bench/unet_cpu --sku cpu "
             "--out runs/confirm-unet",
             out="confirm.json (the confirmation as stored), confirm.md, rounds/NN-good|bad/ "
             "(each round's bench goldens out dir and log)",
             exits=Exits(verdict="the change holds: the bad build is worse, its interval "
                         "wholly on the worse side"))
