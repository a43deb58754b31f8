"""Only here to ship ``linectl-pgsql.pth``: it registers the ``pgsql://`` kombu
transport alias at interpreter start, so plain ``nameko run`` / ``nameko shell``
with the shipped config (and any kombu program in this environment) resolve
``pgsql://`` without importing linectl first. Everything else is pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "linectl-pgsql.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
