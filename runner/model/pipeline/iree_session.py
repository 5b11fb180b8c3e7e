"""Loads compiled modules with their parameters into IREE contexts and calls their functions.

One `IreeSession` per worker process: one VM instance and one HAL device, one context
per submodel (its parameters, its vmfb, any extra module that imports from it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import BadInput, StepFailed, clear_frames
from runner.base.signals import deferred, import_held


@dataclass(frozen=True)
class ModuleFiles:
    """What one context loads: vmfbs in load order and an optional `.irpa` for scope `model`."""

    name: str
    vmfbs: tuple[Path, ...]
    weights: Path | None = None


@contextlib.contextmanager
def calling_runtime() -> Iterator[None]:
    """Around every call into the runtime. A signal that arrives meanwhile is raised once
    the call is over and its device objects are dropped (`deferred`), and an error leaving
    the call has its frames cleared now, while the device is open (`clear_frames`): those
    frames hold the call's runtime objects (its invoker, argument and result buffers), and
    an error outlives its session (a caller keeps it, or the garbage collector frees it
    later from a reference cycle, in whatever code runs then)."""
    with deferred():
        try:
            yield
        except BaseException as e:
            clear_frames(e)
            raise


class IreeSession:
    """Every call into the runtime runs in `calling_runtime()`, so `close()` frees
    everything in order: a runtime object freed after its device deadlocks IREE's runtime
    or crashes the interpreter."""

    def __init__(self, driver: str, runtime_flags: Sequence[str] = ()):
        with calling_runtime():
            self._open(driver, runtime_flags)

    def _open(self, driver: str, runtime_flags: Sequence[str]) -> None:
        rt = import_held("iree.runtime")

        self._rt = rt
        if runtime_flags:
            rt.flags.parse_flags(*runtime_flags)
        try:
            self.device = rt.get_driver(driver).create_default_device()
        except (RuntimeError, ValueError) as e:
            raise StepFailed(f"cannot open IREE device driver {driver!r}: {e}",
                             fix="check the profile's `target.driver` and that the device "
                             "is visible to this process") from e
        self.driver = driver
        self.instance = rt.VmInstance()
        # iree.runtime has no type information: its contexts and modules are Any.
        self._contexts: dict[str, tuple[Any, list[Any]]] = {}
        self._functions: list[IreeFunction] = []

    def load(self, files: ModuleFiles) -> None:
        with calling_runtime():
            self._load(files)

    def _load(self, files: ModuleFiles) -> None:
        rt = self._rt
        modules = [rt.create_hal_module(self.instance, self.device)]
        if files.weights is not None:
            if not files.weights.is_file():
                raise BadInput("weights file not found", where=str(files.weights),
                               fix="export or download the submodel's parameters (.irpa)")
            index = rt.ParameterIndex()
            try:
                index.load(str(files.weights))
            except (RuntimeError, ValueError) as e:
                raise BadInput(f"not a readable .irpa archive: {e}",
                               where=str(files.weights),
                               fix="fetch or export the weights again") from e
            provider = index.create_provider(scope="model")
            modules.append(rt.create_io_parameters_module(self.instance, provider))
        loaded = []
        for vmfb in files.vmfbs:
            if not vmfb.is_file():
                raise BadInput("compiled module not found", where=str(vmfb),
                               fix="recompile it (`runner compile`)")
            try:
                # A copy, read once: `VmModule.mmap` opens the file for writing, which fails
                # on the read-only cache mount a worker container gets. With external
                # parameters a vmfb is small. The copy is Python memory all the same, freed
                # under the GIL: `close` releases it last.
                loaded.append(rt.VmModule.copy_buffer(self.instance, vmfb.read_bytes()))
            except (OSError, RuntimeError, ValueError) as e:
                raise BadInput(f"not a loadable IREE module: {e}", where=str(vmfb),
                               fix="recompile it (`runner compile`)") from e
        try:
            context = rt.VmContext(self.instance, modules=[*modules, *loaded])
        except (RuntimeError, ValueError) as e:
            raise StepFailed(f"cannot link submodel {files.name!r}: {e}",
                             where=", ".join(map(str, files.vmfbs)),
                             fix="check that the weights match the module and that every "
                             "imported module is listed") from e
        self._contexts[files.name] = (context, loaded)

    def close(self) -> None:
        """Releases invokers, then contexts, then the device, then the compiled modules.
        IREE's Python objects do not keep what they use alive, so the garbage collector
        freeing them in another order (e.g. an invoker kept by a traceback) crashes the
        interpreter.

        The modules go last: IREE frees a module loaded from Python memory under the GIL,
        from whichever thread drops its last reference, and that can be one of the device's
        worker threads retiring the last call. Releasing the device waits for those threads
        while this one holds the GIL: with the module's last reference on a worker, both
        waited for ever (`goldens check` hung in 3 of 806 runs on a loaded 2-core machine).
        Held here until the device is gone, a module is freed on this thread."""
        with calling_runtime():
            self._close()

    def _close(self) -> None:
        for fn in self._functions:
            fn.invoker = None
        self._functions.clear()
        modules = [module for _, loaded in self._contexts.values() for module in loaded]
        self._contexts.clear()
        self.__dict__.pop("device", None)
        self.__dict__.pop("instance", None)
        modules.clear()

    def function(self, submodel: str, name: str, where: str) -> IreeFunction:
        """`where` names the config field that asked for this function, for the error."""
        with calling_runtime():
            return self._function(submodel, name, where)

    def _function(self, submodel: str, name: str, where: str) -> IreeFunction:
        context, modules = self._contexts[submodel]
        for module in reversed(modules):
            fn = module.lookup_function(name)
            if fn is not None:
                function = IreeFunction(f"{submodel}.{name}",
                                        self._rt.FunctionInvoker(context, self.device, fn))
                self._functions.append(function)
                return function
        exported = sorted({f for m in modules for f in m.function_names})
        raise BadInput(f"module has no function {name!r} (it exports {exported})",
                       where=where, fix="name a function the compiled module exports")


@dataclass
class IreeFunction:
    name: str
    invoker: Any  # an iree.runtime FunctionInvoker; None once the session closed

    def __call__(self, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        with calling_runtime():  # the results are host copies before a signal is raised
            return self._call(*args)

    def _call(self, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        if self.invoker is None:
            raise StepFailed(f"{self.name} called after its IREE session was closed",
                             fix="call it inside the session's `with` block; a runner bug")
        try:
            result = self.invoker(*args)
        except (RuntimeError, ValueError) as e:
            shapes = ", ".join(f"{a.shape}:{a.dtype}" for a in args)
            raise StepFailed(f"calling {self.name}({shapes}) failed: {e}",
                             fix="check the model config's batch size, dtype and sizes "
                             "against the compiled module") from e
        results = result if isinstance(result, tuple | list) else (result,)
        # Copies, not views: a view into device memory outliving the session (e.g. held
        # by a traceback) crashes the interpreter when it is garbage-collected.
        return tuple(np.array(r.to_host() if hasattr(r, "to_host") else r, copy=True)
                     for r in results)
