"""The command line loads the table libraries only for commands that use them: ``dlscope --help`` and the
registration of every command cost no pandas, numpy or pyarrow import (about half a second a run)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pandas", "numpy", "pyarrow")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_importing_the_command_line_loads_no_table_library():
    loaded = _modules_after("import dlscope.cli")
    assert "dlscope.cli" in loaded and "click" in loaded
    assert not loaded.intersection(HEAVY)


def test_help_lists_every_command_without_loading_a_table_library():
    loaded = _modules_after("from dlscope.cli import main\n"
                            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert not loaded.intersection(HEAVY)
    help_text = subprocess.run([sys.executable, "-m", "dlscope", "--help"], capture_output=True, text=True,
                               check=True).stdout
    for command in ("import", "profile", "diff", "check", "view", "whatif", "export", "characterize"):
        assert f"\n  {command} " in help_text, command


def test_lazy_package_names_still_resolve():
    from dlscope import compare, roofline
    from dlscope.compare.check import check
    from dlscope.compare.diff import compare as diff_compare
    from dlscope.roofline.flops import op_cost

    assert compare.check is check and compare.compare is diff_compare and roofline.op_cost is op_cost
    loaded = _modules_after("import dlscope.compare as c\nc.compare")
    assert "pandas" in loaded  # the first use imports it


def test_check_is_the_function_even_after_its_module_is_imported():
    loaded = _modules_after("import importlib, dlscope.compare as c\n"
                            "module = importlib.import_module('dlscope.compare.check')\n"
                            "assert callable(c.check) and c.check is module.check, c.check\n"
                            "from dlscope.compare import check\nassert check is module.check")
    assert "dlscope.compare.check" in loaded


def test_a_command_that_lives_with_its_stage_loads_only_when_named():
    """``import dlscope.cli`` (every command's start) loads no stage's command module; naming one loads it and runs
    it."""
    stages = {"dlscope.capture.cli_profile", "dlscope.compare.cli_compare", "dlscope.viewer.cli_view",
              "dlscope.whatif.cli_whatif", "dlscope.present.cli_export", "dlscope.roofline.cli_characterize"}
    assert not _modules_after("import dlscope.cli") & stages
    loaded = _modules_after("from dlscope.cli import main\n"
                            "try:\n    main(['diff', '--help'])\nexcept SystemExit:\n    pass")
    assert loaded & stages == {"dlscope.compare.cli_compare"}
    usage = subprocess.run([sys.executable, "-m", "dlscope", "whatif", "--help"], capture_output=True, text=True,
                           check=True).stdout
    assert usage.startswith("Usage: dlscope whatif")
