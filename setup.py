"""Everything is declared in setup.cfg; this file only exists to ship the start-up `.pth` file.

A `.pth` file must sit at the root of site-packages, which setup.cfg cannot express: the
build_py command below copies it next to the packages, so both wheels (`pip install .`) and
editable installs (`pip install -e .`) put it where `site` reads it.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64: `pip install -e .` goes through `develop`
    editable_wheel = None

PTH = "verl_rl_insight_autoload.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(
            os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH),
            os.path.join(self.build_lib, PTH),
            preserve_mode=0,
        )

    def get_outputs(self, include_bytecode=True):
        return list(super().get_outputs(include_bytecode)) + [os.path.join(self.build_lib, PTH)]


cmdclass = {"build_py": build_py_with_pth}

if editable_wheel is not None:

    class editable_wheel_with_pth(editable_wheel):
        # An editable wheel maps packages back to the tree but ships nothing from build_lib;
        # the .pth has to be put into the wheel's root by hand.
        def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
            result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
            self.copy_file(
                os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH),
                os.path.join(unpacked_wheel, PTH),
                preserve_mode=0,
            )
            return result

    cmdclass["editable_wheel"] = editable_wheel_with_pth

setup(cmdclass=cmdclass)
