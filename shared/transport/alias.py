"""Registers the ``pgsql://`` URL scheme with kombu.

Imported at interpreter start by the installed ``linectl-pgsql.pth`` (so plain
``nameko run`` / ``nameko shell`` and any kombu program resolve ``pgsql://``)
and by ``import shared``. It does not import kombu itself — that would cost
every Python start in the environment ~60 ms — but registers the alias the
moment ``kombu.transport`` is first imported.
"""

import importlib.abc
import importlib.machinery
import sys

ALIAS = "pgsql"
TARGET = "shared.transport.pgsql:Transport"


def _register(module) -> None:
    module.TRANSPORT_ALIASES.setdefault(ALIAS, TARGET)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of ``kombu.transport``."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "kombu.transport":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            _register(module)

        spec.loader.exec_module = exec_module
        return spec


if "kombu.transport" in sys.modules:
    _register(sys.modules["kombu.transport"])
elif not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterOnImport())
