"""The repo's scripts (scripts/*.py) as modules, for the tests of their functions: each is
loaded once per process, and under its own name where that name is free, since the scripts
import each other by name (docs_check and suite_cost import measured). scripts/suite_cost.py
shares its name with the suite's plugin (tests/suite_cost.py), which keeps it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
_LOADED: dict[str, ModuleType] = {}


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py, loaded once (its script dir on the path, as when it runs)."""
    path = SCRIPTS / f"{name}.py"
    imported = sys.modules.get(name)  # (by another script's `import NAME`)
    if name not in _LOADED and imported is not None and imported.__file__ == str(path):
        _LOADED[name] = imported
    if name not in _LOADED:
        if str(SCRIPTS) not in sys.path:
            sys.path.append(str(SCRIPTS))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, module)  # what `import NAME` in another script finds
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]
