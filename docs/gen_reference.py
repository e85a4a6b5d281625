"""mkdocs-gen-files script: writes the reference pages generated from the code into the build (never into docs/).

The generators are in docs/_gen/reference.py, loaded by path so that the bertkit package carries no
documentation code; tests/unit/test_docs_reference.py loads the same file to check the pages.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import mkdocs_gen_files

DOCS = Path(__file__).resolve().parent
# Document the checkout this script belongs to, whatever bertkit the environment has installed.
sys.path.insert(0, str(DOCS.parent))


def load_generator():
    spec = importlib.util.spec_from_file_location("bertkit_docs_reference", DOCS / "_gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


for path, page in load_generator().pages().items():
    with mkdocs_gen_files.open(path, "w") as out:
        out.write(page())
    mkdocs_gen_files.set_edit_path(path, "gen_reference.py")
