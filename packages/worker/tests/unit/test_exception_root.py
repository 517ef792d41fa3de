"""Every exception codey_worker defines derives from its one root, `WorkerError` (style guide: one
root exception per package), so a caller can catch everything this package raises on
purpose with one clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import codey_worker
from codey_worker.errors import WorkerError


def test_every_exception_defined_in_the_package_derives_from_its_root() -> None:
    strays = []
    for info in pkgutil.walk_packages(codey_worker.__path__, "codey_worker."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__ and not issubclass(obj, WorkerError)):
                strays.append(f"{module.__name__}.{name}")
    assert strays == []
