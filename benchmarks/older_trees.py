"""Today's names for the values of an older framecast, for benchmarks that run one beside this tree.

``bench_planner.py --code REV`` and ``bench_store.py``'s old store import the framecast of an
earlier commit, while the benchmarks (and this tree's fakes) name its values as this tree does. The
pure values moved to ``framecast/values/`` (and the service's ``Budget`` protocol to
``framecast/service/budget.py``); in a tree from before that, :func:`alias_moved_values` registers
each of today's module names as an alias of where the value lived then. In a tree that has
``framecast/values/`` it does nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__all__ = ["alias_moved_values"]

#: Today's module -> the module it was, whole (a tree of 89f4980 and before).
_WHOLE: dict[str, tuple[str, ...]] = {
    "framecast.values.job": ("framecast.jobs.model",),
    "framecast.values.reasons": ("framecast.jobs.reasons", "framecast.reasons"),
    "framecast.values.presets": ("framecast.jobs.presets", "framecast.presets"),
}
#: Today's module -> {name: where the name was}.
_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "framecast.values.service_requests": {
        "Priority": ("framecast.keys.budget", "framecast.budget"),
        "RequestKind": ("framecast.ops.metrics",),
        "RefusalKind": ("framecast.service.refusals",),
    },
    "framecast.values.durations": {"DurationRow": ("framecast.planner.predict",)},
    "framecast.service.budget": {"Budget": ("framecast.keys.budget", "framecast.budget")},
}


def _first(modules: tuple[str, ...]) -> types.ModuleType | None:
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def alias_moved_values() -> None:
    """In a framecast without ``framecast/values/``, make today's names of its values importable."""
    if importlib.util.find_spec("framecast.values") is not None:
        return
    jobs = importlib.import_module("framecast.jobs")  # the job model's package (or module) then
    values = types.ModuleType("framecast.values")
    values.__path__ = []  # a package: its submodules below are found in sys.modules
    public = getattr(jobs, "__all__", [n for n in vars(jobs) if not n.startswith("_")])
    values.__dict__.update({name: getattr(jobs, name) for name in public})
    sys.modules["framecast.values"] = values
    for new, old in _WHOLE.items():
        module = _first(old)
        if module is not None:
            sys.modules[new] = module
            setattr(values, new.rsplit(".", 1)[1], module)
    for new, names in _NAMES.items():
        alias = types.ModuleType(new)
        for name, homes in names.items():
            for home in homes:
                module = _first((home,))
                if module is not None and hasattr(module, name):
                    setattr(alias, name, getattr(module, name))
                    break
        sys.modules[new] = alias
