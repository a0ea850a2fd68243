"""The critical path's replay hands malloc's free pages back to the system where a phase has just left many
behind: before its graph is built (the rules' pages, in an import), after the build and after the unchanged
replay (their temporaries). On the benchmark trace this took the import's peak from the replay to the rules
(bench/README.md, "h27mem"). Nothing stored changes."""

from __future__ import annotations

from conftest import data_file
from test_arrow_pool_import import stored

from dlscope.pipeline import build, build_database
from dlscope.whatif import stored as replay_stored

TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def logged(monkeypatch, module, name: str, log: list[str]) -> None:
    real = getattr(module, name)

    def call(*args, **kwargs):
        log.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, call)


def replay_here(monkeypatch) -> None:
    """The replay in the importing process, as on a large trace (a small one's is forked beside the rules)."""
    monkeypatch.setattr(build, "fork_pays", lambda: False)


def test_the_pages_go_back_around_the_replays_build_after_the_rules(tmp_path, monkeypatch):
    replay_here(monkeypatch)
    log: list[str] = []
    for module, name in ((build, "aggregate_ranks"), (replay_stored, "release_free_memory"),
                         (replay_stored, "build"), (replay_stored, "unchanged")):
        logged(monkeypatch, module, name, log)
    build_database([data_file(*TRACE)], tmp_path / "out.sqlite", progress=False)
    assert log == ["aggregate_ranks",
                   "release_free_memory", "build", "release_free_memory", "unchanged", "release_free_memory"]


def test_the_database_is_the_one_written_without_giving_pages_back(tmp_path, monkeypatch):
    replay_here(monkeypatch)
    trace = data_file(*TRACE)
    given_back = build_database([trace], tmp_path / "given_back.sqlite", progress=False)
    calls: list[int] = []
    monkeypatch.setattr(replay_stored, "release_free_memory", lambda: calls.append(1))
    kept = build_database([trace], tmp_path / "kept.sqlite", progress=False)
    assert len(calls) == 3  # the no-op stand-in was the one called
    a, b = stored(given_back), stored(kept)
    assert a.keys() == b.keys() and len(a["findings"]) > 0 and len(a["agg_critical_path"]) > 0
    for name in a:
        assert a[name] == b[name], name


def test_a_replay_that_cannot_build_its_graph_still_notes_why(monkeypatch):
    def broken(job):
        raise ValueError("no graph")

    monkeypatch.setattr(replay_stored, "build", broken)
    job = type("J", (), {"ops": [1], "kernels": [], "api_calls": []})()
    r = replay_stored.Replay(lambda: job)
    assert r.g is None and r.note == "the dependency graph could not be built (ValueError: no graph)"
