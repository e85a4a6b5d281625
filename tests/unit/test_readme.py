"""The README stays a short way in, and its links into docs/ resolve (GitHub renders them as they are; the docs
site's own links are checked by `mkdocs build --strict` in CI)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_slugs(markdown: str) -> set[str]:
    """Anchors as Python-Markdown's toc extension makes them (MkDocs' default slugify)."""
    slugs = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = re.sub(r"[`*_]", "", line.lstrip("#").strip())
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
        text = re.sub(r"[^\w\s-]", "", text).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", text))
    return slugs


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [target for target in LINK.findall(readme) if "://" not in target]
    assert len(links) > 20
    for target in links:
        path, _, anchor = target.partition("#")
        file = ROOT / path
        assert file.is_file(), f"README links to a missing file: {target}"
        if anchor:
            slugs = heading_slugs(file.read_text(encoding="utf-8"))
            assert anchor in slugs, f"README links to a missing anchor: {target}"


def test_slugs_follow_mkdocs() -> None:
    assert heading_slugs("## Time to quality against transformers' Trainer\n### `bertkit compress`\n") == {
        "time-to-quality-against-transformers-trainer",
        "bertkit-compress",
    }


def test_the_licence_file_is_the_one_the_readme_and_the_package_name() -> None:
    """README, pyproject.toml and LICENSE name the same licence: the Apache License 2.0, its full terms in LICENSE."""
    import tomllib

    readme = (ROOT / "README.md").read_text("utf-8")
    [line] = [line for line in readme.splitlines() if line.startswith("Licence:")]
    named = re.match(r"Licence: ([\w.-]+)", line).group(1)  # type: ignore[union-attr]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text("utf-8")
    assert named == declared == "Apache-2.0" and "(LICENSE)" in line
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text.splitlines()[1]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert text.rstrip().endswith("END OF TERMS AND CONDITIONS")
