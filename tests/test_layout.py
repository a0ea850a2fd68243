"""The code's shape: the folders follow the flow with no import cycle, `import dlscope` stays light, and the
README's "How it is built" names every package."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from conftest import REPO

SRC = REPO / "src" / "dlscope"


def _imports(path: Path, rel: tuple[str, ...]) -> set[str]:
    """Top-level packages/modules of dlscope that a file imports (at any depth of the file)."""
    own = rel[0].removesuffix(".py")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel[:-1])[:len(rel) - node.level]
            target = base + (node.module.split(".") if node.module else [])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dlscope."):
            target = node.module.split(".")[1:]
        else:
            continue
        if target and target[0].removesuffix(".py") != own:
            out.add(target[0].removesuffix(".py"))
    return out


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).parts
        graph.setdefault(rel[0].removesuffix(".py"), set()).update(_imports(path, rel))
    return graph


def test_packages_depend_on_each_other_without_a_cycle():
    graph = package_graph()
    graph.pop("__init__", None)  # the package's lazy API names (PEP 562)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        raise AssertionError(f"import cycle between dlscope packages: {e.args[1]}") from None
    # the flow: the store and the analysis never reach up to what presents or orchestrates them
    for low in ("analyze", "store", "importers", "model", "errors", "format", "version", "nanoseconds"):
        assert not graph.get(low, set()) & {"present", "viewer", "cli", "pipeline", "compare", "capture"}, low
    assert order


def test_import_dlscope_for_step_does_not_load_pandas_or_pyarrow():
    code = ("import sys, dlscope; dlscope.step; dlscope.range; dlscope.profile; dlscope.trace_handler; "
            "print(sorted(m for m in ('pandas', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_readme_names_every_package_in_how_it_is_built():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## How it is built"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    packages = sorted(p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    missing = [p for p in packages if f"`{p}/`" not in section]
    assert not missing, f"README 'How it is built' does not name: {missing}"


def test_the_schema_doc_is_generated_from_the_ddl():
    """docs/schema.md's list of every table and column is the DDL's own (one spec: the DDL in store/schema.py;
    `python -m dlscope.store.schema` prints it), so the documented schema cannot drift from the database."""
    from dlscope.store.schema import COUNTERS_DDL, DDL, JOB_DDL, SEARCH_DDL, document

    doc = (REPO / "docs" / "schema.md").read_text()
    start = doc.index("from the DDL: do not edit by hand -->\n") + len("from the DDL: do not edit by hand -->\n")
    generated = doc[start:doc.index("<!-- end of the generated part -->")]
    assert generated == document(DDL + JOB_DDL + COUNTERS_DDL + SEARCH_DDL)


def test_the_stored_raw_tables_are_what_the_analysis_produces(tmp_path):
    """The DDL's raw tables and the analysed model agree column for column (ops are stored as op_nodes +
    op_instances), so nothing the analysis computes is silently dropped and nothing stored is left unset."""
    import sqlite3

    from trace_builder import KinetoTrace

    from dlscope.analyze.analysis import analyse
    from dlscope.importers import load
    from dlscope.model import TABLES
    from dlscope.store.schema import DDL, RAW_TABLES

    t = KinetoTrace()
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 50)
    t.launch(20, 25, "volta_sgemm_128x64_tn", 30, 60)
    an = analyse(load(t.write(tmp_path / "t.json")))
    conn = sqlite3.connect(":memory:")
    conn.executescript(DDL)

    def columns(table):
        return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}

    for name in TABLES:
        if name != "ops":
            assert columns(name) == set(an.profile.table(name).columns), name
    assert columns("op_nodes") | columns("op_instances") == set(an.profile.ops.columns)
    assert columns("iterations") == set(an.iterations.columns)
    assert columns("python_tree") == set(an.python_tree.columns)
    assert set(RAW_TABLES) == (set(TABLES) - {"ops"}) | {"op_nodes", "op_instances", "iterations", "python_tree"}
