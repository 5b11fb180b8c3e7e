"""A history selection that matches nothing is bad input, said with what the store holds.

A cron line's typo (`--metric fdi`, `--profile-match mi325`, `--since` after `--until`) once read
"0 result(s)" and exit 0, which a scheduler takes for "no regression". So a selection that
holds no result is refused (exit 2), naming each filter that alone matches nothing and what
the store does hold for it, so the fix is in the message.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from runner.base.errors import BadInput
from runner.history.store import Query, Store

# Each filter: its Query field and the flag that sets it.
FLAGS = {"profile": "--profile-match", "command": "--command", "machine": "--machine",
         "sku": "--sku", "metrics": "--metric", "subject": "--stage",
         "versions": "--iree-match", "since": "--since", "until": "--until"}
SHOWN = 12  # known values listed per filter


def check_dates(since: datetime | None, until: datetime | None) -> None:
    """`--since` after `--until` selects nothing whatever the store holds."""
    if since is not None and until is not None and since > until:
        raise BadInput(f"--since {since:%Y-%m-%d %H:%M} is after --until {until:%Y-%m-%d %H:%M}",
                       where="--since/--until", fix="swap them, or leave one out")


def _known(store: Store) -> dict[str, list[str]]:
    """What the store holds, per filter: the values a filter of it can match."""
    everything = store.query(Query())
    values: dict[str, set[str]] = {field: set() for field in FLAGS}
    for r in everything:
        for field in ("profile", "command", "machine", "sku"):
            values[field].add(getattr(r, field))
        values["metrics"].update(m.name for m in r.metrics)
        values["subject"].update(m.subject for m in r.metrics)
        values["versions"].update((r.compiler_version, r.runtime_version))
    if everything:
        first, last = everything[0].finished_at, everything[-1].finished_at
        values["since"] = values["until"] = {f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M}"}
    return {field: sorted(v for v in found if v) for field, found in values.items()}


def refuse_empty(store: Store, query: Query) -> BadInput:
    """The error for a `query` that selected nothing: each filter that alone selects nothing,
    with the values the store holds for it (or, where each matches alone, that together they
    match nothing)."""
    given = {f: getattr(query, f) for f in FLAGS if getattr(query, f)}
    if not given:
        return BadInput("the store holds no result", where="--results",
                        fix="record results first (`runner run ... --results URL`, or "
                        "`runner history import DIR`)")
    alone = [f for f in given if not store.query(
        dataclasses.replace(Query(), **{f: given[f]}, limit=1))]
    known = _known(store)
    if not alone:
        flags = ", ".join(FLAGS[f] for f in given)
        return BadInput(f"{flags} each match results, but together none", where=flags,
                        fix="widen one of them (`runner history --json` lists what is there)")

    def listed(field: str) -> str:
        values = known[field]
        more = f", ... ({len(values) - SHOWN} more)" if len(values) > SHOWN else ""
        return ", ".join(values[:SHOWN]) + more if values else "none"

    return BadInput(
        "; ".join(f"{FLAGS[f]} {_shown(given[f])} matches no result in the store"
                  for f in alone), where=", ".join(FLAGS[f] for f in alone),
        fix="; ".join(f"{FLAGS[f]}: the store holds {listed(f)}" for f in alone))


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, datetime):
        return f"{value:%Y-%m-%d %H:%M}"
    return str(value)
