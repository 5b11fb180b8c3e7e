"""A profile as a command's flags ask for it: --profile, then --set KEY=VALUE, --metrics
and the layout flags over it. These read what argparse parsed into profile overrides; the
flags themselves (their spelling, help and types) are the CLI's grammar
(runner/cli/grammar.py), which this module does not need.

The profile is imported when one is loaded, not with this module: every command's CLI
imports it, most never load a profile.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner.base.errors import BadInput
from runner.config.reads import ProfileReads, fields_set, refuse_unread
from runner.inputs.yamlfile import parse_yaml

if TYPE_CHECKING:
    from runner.config.profile import Profile

# The layout flags' dests (--partition, --devices, --cpd, --batch-size, --vae-batch-size),
# each overriding the profile's `layout.X`.
LAYOUT_FIELDS = ("partition", "devices", "cpd", "batch_size", "vae_batch_size")


def profile_overrides(items: Sequence[str] | None) -> dict[str, Any]:
    """`--set a.b=v` items as dotted profile overrides (values parsed as YAML, bounded as a
    profile's are: runner.inputs.yamlfile)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise BadInput(f"`--set {item}` is not KEY=VALUE", where="--set",
                           fix="e.g. --set target.chip=gfx950")
        if not value.strip():  # YAML reads nothing as null: a field quietly emptied
            raise BadInput("an empty value", where=f"--set {key}",
                           fix=f"give one after the `=`: --set {key}=VALUE (or --set "
                           f"{key}=null where you mean none)")
        out[key] = parse_yaml(value, f"--set {key}", what="value")
    return out


def layout_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The layout flags given (a non-sweep command's), as LayoutSpec.with_overrides takes."""
    return {k: v for k in LAYOUT_FIELDS if (v := getattr(args, k, None)) is not None}


def metrics_override(args: argparse.Namespace) -> dict[str, Any]:
    """`--metrics` as the profile override it stands for (`accuracy.metrics`)."""
    from runner.config.profile import parse_metrics

    value = getattr(args, "metrics", None)
    return {"accuracy.metrics": list(parse_metrics(value, "--metrics"))} if value else {}


def profile_from_args(args: argparse.Namespace, reads: ProfileReads,
                      profile: str | None = None,
                      layout: Sequence[str] = LAYOUT_FIELDS) -> Profile:
    """The profile a command's flags ask for: --profile (or `profile`), --set, --metrics,
    then the `layout` flags (an error in one of them names the flag). A `--set` of a field
    the command does not read (`reads`) is refused before the profile is loaded."""
    from runner.config.profile import load_profile

    sets = profile_overrides(getattr(args, "set", None))
    refuse_unread(sets, reads)
    _refuse_both(args, sets, layout)
    loaded = load_profile(profile or args.profile, {**sets, **metrics_override(args)})
    flags = {k: v for k, v in layout_overrides(args).items() if k in layout}
    if flags:
        loaded = dataclasses.replace(loaded, layout=loaded.layout.with_overrides(**flags))
    return loaded


# A command's own sample flags: where one is given, the profile's `count` is not what runs.
SAMPLE_FLAGS = {"count": "--count", "samples": "--samples", "ids": "--ids"}


def _refuse_both(args: argparse.Namespace, sets: dict[str, Any], layout: Sequence[str]
                 ) -> None:
    """A `--set` that a flag given with it would override is refused, not dropped: the
    layout flags over `layout.X`, the sample flags over `count`."""
    given = fields_set(sets)
    flags = {f"layout.{k}": f"--{k.replace('_', '-')}" for k in layout_overrides(args)
             if k in layout}
    samples = [flag for dest, flag in SAMPLE_FLAGS.items() if getattr(args, dest, None) is not None]
    if samples:
        flags["count"] = samples[0]
    for field, flag in flags.items():
        if field in given:
            raise BadInput(f"`--set {given[field]}` and {flag} both say what {field} is",
                              where=f"--set {given[field]}",
                              fix="give one of them (the flag, or drop it for the --set)")
