"""A package's entry points, imported on first use: `__getattr__ = lazy_exports(__name__,
{...})` in its `__init__.py` offers `package.name` and `from package import name` without
importing the modules behind them (and their torch, IREE or SQLAlchemy) when the package
is imported, so `runner --help` stays as fast as before."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, entries: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` (PEP 562) of `package`: each name of `entries` is read from
    its module (a submodule of `package`, named relative to it, e.g. `"bench"`) when first
    asked for.

    Args:
        package: the package's `__name__`.
        entries: exported name -> the submodule defining it, relative to `package`.

    Returns:
        The function to assign to the package's `__getattr__`.

    Raises:
        ValueError: an entry's module outside `package` (a dependency the layer check
            would not see).
    """
    for module in entries.values():
        if module.startswith(".") or module.startswith("runner."):
            raise ValueError(f"{package}: name {module!r} relative to the package")

    def __getattr__(name: str) -> Any:
        if name not in entries:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{entries[name]}"), name)

    return __getattr__
