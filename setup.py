"""Build hook: the wheel carries the viewer's browser libraries, fetched from npm, never committed.

build_py runs ``npm ci`` in src/dlscope/viewer/frontend (pinned by package-lock.json) and copies the dist
files into src/dlscope/viewer/static/vendor when they are missing; everything else is in pyproject.toml.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

VENDOR_SCRIPT = Path(__file__).resolve().parent / "src" / "dlscope" / "viewer" / "vendor.py"


def _vendor_module():
    spec = importlib.util.spec_from_file_location("dlscope_viewer_vendor", VENDOR_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithViewerAssets(build_py):
    """build_py that first makes sure static/vendor holds Tabulator and ECharts."""

    def run(self):
        vendor = _vendor_module()
        if not vendor.vendor_ready():
            vendor.copy_vendor()
        super().run()


setup(cmdclass={"build_py": BuildPyWithViewerAssets})
