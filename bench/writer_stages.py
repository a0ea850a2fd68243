"""The forked raw-table writer's stages beside the import's (``replay_beside_timeline.py``'s lines plus ``w.*``:
the search keys, each table's ingest, the indexes, the names, the timeline arrays, each with the seconds from
process start and the CPU seconds of the process it ran in). ``timeline_arrays`` shows which process built
them: the writer (``w.write_timeline_arrays`` in its pid) or the importing process (after ``apply``).

    PYTHONPATH=src python bench/writer_stages.py import TRACE -o X.sqlite --force -q
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import replay_beside_timeline as timeline  # noqa: E402 - times from before dlscope's imports

from dlscope.pipeline import build  # noqa: E402
from dlscope.store import writer  # noqa: E402


def main() -> None:
    for name in ("kernel_pairs", "search_keys", "raw_names", "add_names", "write_timeline_arrays", "index_names",
                 "release_free_memory", "write_raw_file"):
        setattr(writer, name, timeline.timed("w." + name, getattr(writer, name)))
    writer._ArrowIngest.add = timeline.timed("w.ingest.add", writer._ArrowIngest.add)
    writer._ArrowIngest.execute_script = timeline.timed("w.indexes", writer._ArrowIngest.execute_script)
    writer._ArrowIngest.__exit__ = timeline.timed("w.ingest.commit", writer._ArrowIngest.__exit__)
    build.timeline_arrays = timeline.timed("timeline_arrays", build.timeline_arrays)
    timeline.main()


if __name__ == "__main__":
    main()
