"""Only here for what a wheel needs beyond pyproject.toml:

- ``linectl-pgsql.pth``: it registers the ``pgsql://`` kombu transport alias at
  interpreter start, so plain ``nameko run`` / ``nameko shell`` with the shipped
  config (and any kombu program in this environment) resolve ``pgsql://``
  without importing linectl first;
- the demo layout, the demo plant (and its lines' layouts) and the nameko
  config of ``deploy/``, copied into the
  ``shared/deploy/`` package data (``shared.config.default_line_file`` finds the
  layout there when the wheel runs outside a checkout)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "linectl-pgsql.pth"
PACKAGED_DEPLOY = ("line.yaml", "nameko.yaml", "REGISTER_MAP.md", "plant.yaml",
                   "lines/cell-a.yaml", "lines/cell-b.yaml", "lines/cell-c.yaml")


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))
        self.mkpath(os.path.join(self.build_lib, "shared", "deploy", "lines"))
        for name in PACKAGED_DEPLOY:
            self.copy_file(os.path.join("deploy", name), os.path.join(self.build_lib, "shared", "deploy", name))

    def get_outputs(self, include_bytecode=True):
        packaged = [os.path.join(self.build_lib, "shared", "deploy", n) for n in PACKAGED_DEPLOY]
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH), *packaged]


setup(cmdclass={"build_py": build_py_with_pth})
