"""The documentation's generated reference pages (docs/_gen/reference.py) against the code, each walked here on
its own: the recipe keys against the recipe models' JSON schema (and bertkit's own --set path), the CLI page
against the command tree, the recipes page against `bertkit recipes list`. No mkdocs build: the page functions
return Markdown, which is parsed here."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app

GENERATOR = Path(__file__).resolve().parents[2] / "docs" / "_gen" / "reference.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("bertkit_docs_reference_test", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def keys_page(reference) -> str:
    return reference.recipe_keys_page()


@pytest.fixture(scope="module")
def cli_page(reference) -> str:
    return reference.cli_page()


def cell_text(cell: str) -> str:
    """A Markdown table cell as the text it shows (code tags dropped, escapes undone)."""
    text = re.sub(r"</?code>", "", re.sub(r"\[(.*?)\]\(#[^)]*\)", r"\1", cell))
    return html.unescape(re.sub(r"\\(.)", r"\1", text)).strip()


def table_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell_text(cell) for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def sections(markdown: str, level: str) -> dict[str, str]:
    """Heading text (anchor dropped) -> the Markdown under it, up to the next heading of that level or above."""
    found: dict[str, str] = {}
    pattern = re.compile(rf"^#{{2,{len(level)}}} (.+?)(?: \{{#[^}}]+\}})?$", re.M)
    matches = list(pattern.finditer(markdown))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(markdown)
        found[match.group(1).strip("`")] = markdown[match.end() : end]
    return found


# --- recipe keys ------------------------------------------------------------------------------------------------


def schema_keys(schema: dict) -> set[str]:
    """Every dotted leaf key of a recipe model's JSON schema, following $refs into nested sections (also through
    anyOf, as Optional sections are written)."""
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> dict:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def sections_in(node: dict) -> list[dict]:
        node = resolve(node)
        if node.get("type") == "object" and "properties" in node:
            return [node]
        options = [*node.get("anyOf", []), *node.get("oneOf", [])]  # Optional sections; the model section per family
        return [found for option in options for found in sections_in(option)]

    keys: set[str] = set()

    def walk(node: dict, prefix: str) -> None:
        for name, prop in node["properties"].items():
            inner = sections_in(prop)
            for section in inner:
                walk(section, f"{prefix}{name}.")
            items = sections_in(resolve(prop).get("items", {})) if resolve(prop).get("type") == "array" else []
            for section in items:  # a list of sections (a pretraining recipe's phases): NAME[].KEY
                walk(section, f"{prefix}{name}[].")
            if not inner and not items:
                keys.add(prefix + name)

    walk(schema, "")
    return keys


def page_keys(markdown: str) -> dict[str, set[str]]:
    """Key -> recipe kinds, from the page: a section's kinds line, and a key's "(... only)" note."""
    keys: dict[str, set[str]] = {}
    for body in sections(markdown, "###").values():
        kinds_line = re.search(r"^Recipe kinds: ([a-z, ]+)\.", body, re.M)
        if kinds_line is None:
            continue
        kinds = set(kinds_line.group(1).split(", "))
        for row in table_rows(body)[1:]:
            only = re.search(r"\(([a-z, ]+) only\)$", row[3])
            keys[row[0]] = set(only.group(1).split(", ")) if only else kinds
    return keys


def test_recipe_keys_page_lists_exactly_the_keys_each_kind_accepts(keys_page):
    from bertkit.config.recipe import Recipe

    expected: dict[str, set[str]] = {}
    for model in typing.get_args(Recipe):
        kind = model.model_fields["kind"].default
        for key in schema_keys(model.model_json_schema()):
            expected.setdefault(key, set()).add(kind)
    listed = page_keys(keys_page)
    assert set(listed) == set(expected), (
        f"missing: {sorted(set(expected) - set(listed))}, not in the schema: {sorted(set(listed) - set(expected))}"
    )
    assert listed == expected
    assert {"train.budget", "model.hidden_size", "optim.lr", "model.generator.hidden_fraction"} <= set(listed)


def test_every_listed_key_is_one_that_set_accepts(keys_page):
    """bertkit's own --set path knows each listed key (a wrong value may fail, an unknown key may not)."""
    from bertkit.config.recipe import apply_overrides, validate_recipe
    from bertkit.errors import BertkitError

    def unknown(kind: str, key: str) -> bool:
        try:
            validate_recipe(apply_overrides({"kind": kind}, [f"{key}=null"]), "t")
        except BertkitError as err:
            return "unknown key" in str(err)
        return False

    for key, kinds in page_keys(keys_page).items():
        if "[]" in key:  # a key of a list's items (phases[].name) is written in the recipe file, not with --set
            continue
        for kind in kinds:
            assert not unknown(kind, key), (kind, key)
    assert unknown("pretrain", "model.hidden_sise") and unknown("finetune", "model.hidden_size")


def test_every_recipe_key_has_a_type_a_default_and_a_description(keys_page):
    rows = [row for row in table_rows(keys_page) if len(row) == 4 and row[0] != "Key"]
    assert len(rows) > 100
    for row in rows:
        assert all(row), row


# --- CLI --------------------------------------------------------------------------------------------------------


def command_tree() -> dict[str, list[str]]:
    """`bertkit ...` command path -> the names of its options and arguments, walked from the Typer app."""
    import typer

    found: dict[str, list[str]] = {}

    def walk(command, path: str, parent) -> None:
        ctx = command.context_class(command, info_name=path.rsplit(" ", 1)[-1], parent=parent)
        names = []
        for param in command.get_params(ctx):
            if not param.hidden:
                names += [*param.opts, *param.secondary_opts] if param.param_type_name == "option" else [param.name]
        found[path] = names
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), f"{path} {name}", ctx)

    walk(typer.main.get_command(app), "bertkit", None)
    return found


def test_cli_page_documents_every_command_and_option(cli_page):
    tree = command_tree()
    assert {"bertkit corpus inspect", "bertkit corpus merge", "bertkit tokenize train", "bertkit recipes show"} <= set(
        tree
    )
    page = sections(cli_page, "###")
    assert set(page) - {"Command-line reference"} == set(tree)
    for path, names in tree.items():
        rows = table_rows(page[path])
        documented = {name.strip() for row in rows for name in row[0].split(",")}
        for name in names:
            assert name in documented or name.upper() in documented, (path, name)
        assert f"Usage: {path}" in page[path]


def test_cli_page_keeps_what_help_says(cli_page):
    body = sections(cli_page, "###")["bertkit recipes show"]
    rows = {row[0]: row for row in table_rows(body)}
    assert rows["--for"][1] == "finetune|distill"  # a metavar with a pipe survives the table
    assert rows["--for"][3].startswith("Show the recipe this command runs without --recipe: finetune picks")
    assert rows["name"][1:3] == ["str", ""] and rows["--quiet, -q"][1] == "flag"
    help_text = CliRunner().invoke(app, ["recipes", "show", "--help"]).stdout
    usage = help_text.splitlines()[0].removeprefix("Usage: ").split(" ", 1)[1]  # the program name varies
    assert f"Usage: bertkit {usage}" in body


# --- recipes ----------------------------------------------------------------------------------------------------


def test_recipes_page_lists_every_recipe_that_recipes_list_shows(reference):
    from bertkit.config.recipe import RECIPE_DIR

    result = CliRunner().invoke(app, ["recipes", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = {row["name"]: row for row in json.loads(result.stdout.strip().splitlines()[-1])["recipes"]}
    page = reference.recipes_page()
    summary = {row[0]: row for row in table_rows(page.split("\n## ")[0])[1:]}
    assert set(summary) == set(listed)
    documented = sections(page, "###")
    for name, row in listed.items():
        assert row["kind"] == summary[name][1]
        if "parameters" in row:
            assert f"({row['parameters']:,})" in documented[name], name
        first_line = (RECIPE_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
        assert "    " + first_line in documented[name], name  # the file, in the collapsible block


def test_generated_pages_are_not_files_in_docs(reference):
    """They exist only in the build (mkdocs-gen-files); a copy in docs/ would go stale, or shadow the generated one."""
    docs = GENERATOR.parents[1]
    assert set(reference.pages()) == {"reference/cli.md", "reference/recipe-keys.md", "reference/recipes.md"}
    assert not [path for path in reference.pages() if (docs / path).exists()]
