"""`bertkit recipes list|show`."""

from __future__ import annotations

import typer

from bertkit.cli.common import JSON_HELP, QUIET_HELP, guarded
from bertkit.cli.pretrain import SET_HELP

app = typer.Typer(help="List recipes and show them resolved and validated.", no_args_is_help=True)


def describe_recipe(name: str, overrides: list[str] | None = None) -> dict:
    """Name, kind, description and (pretraining recipes) parameter count: what `recipes list` shows, and the
    recipes reference page (docs/_gen/reference.py) reads."""
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

    rows = [describe_recipe(name) for name in recipe_names()]
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
    name: str | None = typer.Argument(None, help="Recipe name or .yaml path; leave out with --for."),
    for_: str | None = typer.Option(
        None,
        "--for",
        metavar="finetune|distill",
        help="Show the recipe this command runs without --recipe: finetune picks its --task's "
        "(finetune-<task>), distill its task stage's for a --task teacher (distill-task, distill-task-<task>).",
    ),
    task: str | None = typer.Option(
        None,
        "--task",
        metavar="classification|multi-label|regression|token-classification|question-answering|retrieval|similarity",
        help="With --for finetune (implied): the --task of the command; with --for distill: what the teacher was "
        "fine-tuned for (classification, token-classification or question-answering).",
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """The recipe with every default filled in and overrides applied, plus its parameter count. With --for (and
    --task), the recipe a command would use without --recipe, named in the first line."""
    import json

    import yaml

    from bertkit.config.recipe import default_recipe, load_recipe
    from bertkit.errors import BertkitError

    used_by = None
    if for_ is not None or task is not None:
        if name is not None:
            raise BertkitError("give a recipe name or --for/--task (the recipe a command would use), not both")
        command = for_ or "finetune"
        name = default_recipe(command, task)
        if command == "distill":  # the task stage's recipe follows the teacher's kind, which --task names here
            used_by = "bertkit distill --stage task" + (f" with a {task} teacher" if task else "")
        else:
            used_by = f"bertkit {command}" + (f" --task {task}" if task else "")
    elif name is None:
        raise BertkitError(
            "name a recipe (see `bertkit recipes list`), or ask for the one a command uses: "
            "--for finetune --task question-answering"
        )
    recipe = load_recipe(name, list(set_))
    resolved = recipe.model_dump(mode="json")
    info = describe_recipe(name, list(set_))
    if used_by is not None:
        info["used_by"] = used_by
    if json_out:
        print(json.dumps({**info, "recipe": resolved}))
        return
    if used_by is not None:
        print(f"# {recipe.name}: what `{used_by}` runs without --recipe")
    print(yaml.safe_dump(resolved, sort_keys=False).rstrip())
    if "parameters" in info:
        print(f"# parameters (kept network: encoder + heads): {info['parameters']:,}")
