"""`bertkit recipes list|show`."""

from __future__ import annotations

import typer

from bertkit.cli.common import JSON_HELP, QUIET_HELP, guarded
from bertkit.cli.pretrain import SET_HELP

app = typer.Typer(help="List recipes and show them resolved and validated.", no_args_is_help=True)


def _describe(name: str, overrides: list[str] | None = None) -> dict:
    from bertkit.config.recipe import load_recipe

    recipe = load_recipe(name, overrides)
    info = {"name": recipe.name, "kind": recipe.kind, "description": recipe.description}
    if recipe.kind == "pretrain":
        from bertkit.models.pretraining import count_parameters

        info["parameters"] = count_parameters(recipe.model, objective=recipe.objective)  # type: ignore[union-attr]
    return info


@app.command("list")
@guarded
def list_command(
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Every recipe shipped with bertkit, with its parameter count."""
    import json

    from bertkit.config.recipe import recipe_names

    rows = [_describe(name) for name in recipe_names()]
    if json_out:
        print(json.dumps({"recipes": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("recipe", "kind", "parameters", "description")
    for row in rows:
        params = f"{row['parameters'] / 1e6:.1f}M" if "parameters" in row else "-"
        table.add_row(row["name"], row["kind"], params, row["description"])
    Console().print(table)


@app.command("show")
@guarded
def show_command(
    name: str = typer.Argument(..., help="Recipe name or .yaml path."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """The recipe with every default filled in and overrides applied, plus its parameter count."""
    import json

    import yaml

    from bertkit.config.recipe import load_recipe

    recipe = load_recipe(name, list(set_))
    resolved = recipe.model_dump(mode="json")
    info = _describe(name, list(set_))
    if json_out:
        print(json.dumps({**info, "recipe": resolved}))
        return
    print(yaml.safe_dump(resolved, sort_keys=False).rstrip())
    if "parameters" in info:
        print(f"# parameters (kept network: encoder + heads): {info['parameters']:,}")
