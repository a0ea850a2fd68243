"""Copy the browser libraries from npm (frontend/node_modules) into static/vendor, with a manifest.

Third-party front-end code is never committed: ``frontend/package.json`` + ``package-lock.json`` pin it, and
this step (run by setup.py's build_py, or ``python -m dlscope.viewer.vendor``) copies the dist files in.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRONTEND = HERE / "frontend"
VENDOR = HERE / "static" / "vendor"

#: npm package -> dist files the viewer loads (source path inside the package, name under static/vendor).
DIST_FILES = {
    "tabulator-tables": [("dist/js/tabulator_esm.min.mjs", "tabulator_esm.min.mjs"),
                         ("dist/css/tabulator.min.css", "tabulator.min.css")],
    "echarts": [("dist/echarts.esm.min.mjs", "echarts.esm.min.mjs")],
}


def vendor_ready(vendor: Path = VENDOR) -> bool:
    """True when every vendored file is present (the viewer can start)."""
    return all((vendor / name).exists() for files in DIST_FILES.values() for _, name in files)


def npm_ci(frontend: Path = FRONTEND) -> None:
    """Install the pinned packages from the lock file (no scripts run)."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to fetch the viewer's browser libraries (apt-get install npm)")
    subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=frontend, check=True)


def copy_vendor(frontend: Path = FRONTEND, vendor: Path = VENDOR) -> dict:
    """Copy the dist files into ``vendor`` and write ``manifest.json`` (package, version, sha256)."""
    modules = frontend / "node_modules"
    if not modules.exists():
        npm_ci(frontend)
    vendor.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for package, files in DIST_FILES.items():
        version = json.loads((modules / package / "package.json").read_text())["version"]
        for src, name in files:
            data = (modules / package / src).read_bytes()
            (vendor / name).write_bytes(data)
            manifest[name] = {"package": package, "version": version,
                              "sha256": hashlib.sha256(data).hexdigest()}
    (vendor / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


if __name__ == "__main__":
    print(json.dumps(copy_vendor(), indent=2))
    sys.exit(0)
