"""The documentation's reference pages, generated from the code so that nothing is written twice.

Three pages, each a function that returns the page's Markdown:

- `cli_page()`: every `bertkit` command and subcommand, walked from the Typer app's command tree
  (usage line, help text, and a table of every argument and option);
- `recipe_keys_page()`: every key a recipe accepts, walked from the pydantic recipe models (type with its
  choices and bounds, default per recipe kind, description from `Field(description=...)` and the `#` comments
  beside the field in the source);
- `recipes_page()`: every recipe shipped with bertkit, with its key hyper-parameters and its YAML.

`pages()` maps each page's path under docs/ to its Markdown. docs/gen_reference.py (the mkdocs-gen-files script)
writes them into the build, never into the repository; tests/unit/test_docs_reference.py checks them against the
command tree, the recipe schema and `bertkit recipes list`, each walked on its own. This file is loaded by path
(importlib), so that the bertkit package carries no documentation code.
"""

from __future__ import annotations

import ast
import functools
import html
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

GENERATED_NOTE = (
    "!!! info \"Generated from the code\"\n"
    "    This page is generated from {source} when the documentation is built (docs/gen_reference.py), "
    "so it always matches the code.\n"
)

# ---------------------------------------------------------------------------------------------------------------
# Markdown helpers


def md_text(text: str) -> str:
    """Plain text as Markdown that renders exactly that text (also inside a table cell): HTML and Markdown
    specials are escaped, and a pair of backticks stays code, as the help texts mean it."""
    parts = re.split(r"(`[^`\n]+`)", text)
    out = []
    for part in parts:
        if len(part) > 2 and part.startswith("`") and part.endswith("`"):
            out.append(code(part[1:-1]))
        else:
            escaped = html.escape(part, quote=False)
            out.append(re.sub(r"([\\`*_\[\]|#{}])", r"\\\1", escaped))
    return "".join(out)


def code(text: str) -> str:
    """Inline code that is safe in a table cell (a `|` in it would otherwise split the cell)."""
    return "<code>" + html.escape(text, quote=False).replace("|", "&#124;") + "</code>"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("\n", " ") or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def paragraphs(text: str) -> str:
    """Help text (click's conventions: blank lines between paragraphs, `\\b` before one kept as written) as
    Markdown paragraphs."""
    blocks = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text).partition("\f")[0]):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":
            blocks.append("<br>\n".join(md_text(line.strip()) for line in lines[1:]))
        else:
            blocks.append(md_text(" ".join(line.strip() for line in lines)))
    return "\n\n".join(block for block in blocks if block) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# CLI reference


def bertkit_command() -> Any:
    """The root command of `bertkit`, as Typer builds it for the command line."""
    import typer

    from bertkit.cli.app import app

    return typer.main.get_command(app)


def walk_commands(command: Any, name: str = "bertkit", parent: Any = None) -> Iterator[tuple[Any, Any]]:
    """(command, context) for `command` and every subcommand under it, depth first in the order of `--help`."""
    ctx = command.context_class(command, info_name=name, parent=parent)
    yield command, ctx
    if hasattr(command, "list_commands"):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from walk_commands(sub, sub_name, ctx)


def anchor(path: str) -> str:
    return path.replace(" ", "-")


def param_names(param: Any) -> list[str]:
    """How a parameter is written on the command line: its option strings, or an argument's metavar."""
    if getattr(param, "param_type_name", "") == "argument":
        return [getattr(param, "display_name_raw", None) or param.metavar or param.name.upper()]  # as in its usage
    return [*param.opts, *param.secondary_opts]


def param_type(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return "flag"
    if param.metavar:
        label = param.metavar
    elif hasattr(param, "display_type"):  # Typer's parameters
        label = param.display_type(ctx).removeprefix("<").removesuffix(">")
    else:  # plain click's
        label = param.type.name
    if getattr(param, "multiple", False):
        if label.startswith("list[") and label.endswith("]"):
            label = label[5:-1]
        label += " (repeatable)"
    return label


def param_default(param: Any, ctx: Any) -> str:
    if param.required:
        return "required"
    if isinstance(getattr(param, "show_default", None), str):
        return md_text(param.show_default)
    value = param.get_default(ctx, call=False)
    if callable(value):
        return "(dynamic)"
    if getattr(param, "secondary_opts", None) and getattr(param, "is_flag", False):
        if value is None:
            return ""
        return code(param.opts[0] if value else param.secondary_opts[0])
    if getattr(param, "is_flag", False):
        return "" if not value else code("on")
    if value is None or value == [] or value == ():
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(code(str(item)) for item in value)
    if isinstance(value, bool):
        return code(str(value).lower())
    return code(str(getattr(value, "value", value)))


def command_section(command: Any, ctx: Any) -> str:
    path = ctx.command_path
    level = "##" if path.count(" ") <= 1 else "###"
    out = [f"{level} {path} {{#{anchor(path)}}}\n"]
    out.append("```text\n" + command.get_usage(ctx) + "\n```\n")
    if command.help:
        out.append(paragraphs(command.help))
    rows = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        names = ", ".join(code(name) for name in param_names(param))
        help_text = md_text(" ".join((getattr(param, "help", None) or "").split()))
        rows.append([names, md_text(param_type(param, ctx)), param_default(param, ctx), help_text])
    if rows:
        out.append(table(["Argument / option", "Type", "Default", "Description"], rows))
    if hasattr(command, "list_commands"):
        subs = []
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                target = anchor(f"{path} {sub_name}")
                subs.append([f"[{code(sub_name)}](#{target})", md_text(sub.get_short_help_str(limit=300))])
        out.append(table(["Command", "What it does"], subs))
    return "\n".join(out)


def cli_page(command: Any = None) -> str:
    root = command if command is not None else bertkit_command()
    out = [
        "# Command-line reference\n",
        GENERATED_NOTE.format(source="the Typer app (bertkit/cli/app.py and the command modules beside it)"),
        "Every command prints the same with `--help`. An option whose type says (repeatable) may be given several "
        "times; a flag takes no value.\n",
    ]
    out += [command_section(command, ctx) for command, ctx in walk_commands(root)]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# Recipe-key reference


def recipe_models() -> dict[str, type[BaseModel]]:
    """Recipe kind -> its pydantic model, from the union that load_recipe validates against."""
    from bertkit.config.recipe import Recipe

    return {model.model_fields["kind"].default: model for model in typing.get_args(Recipe)}


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def nested_models(annotation: Any, suffix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """The pydantic models a field holds, with the key suffix that reaches into each: "" for the model itself
    or an Optional/union member, "[]" for a list's items, ".<name>" for a dict's values."""
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(suffix, annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_union(annotation):
        return [found for arg in args for found in nested_models(arg, suffix)]
    if origin in (list, set, frozenset, tuple) and args:
        return [found for arg in args if arg is not Ellipsis for found in nested_models(arg, suffix + "[]")]
    if origin is dict and len(args) == 2:
        return nested_models(args[1], suffix + ".<name>")
    return []


def _literal(values: tuple[Any, ...]) -> str:
    shown = [code(str(value).lower() if isinstance(value, bool) else str(value)) for value in values]
    return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)


def type_text(annotation: Any) -> str:
    """A field's type in words: Literal choices spelled out, unions as "or", str patterns shown."""
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata += extra
    if annotation is type(None) or annotation is None:
        return "null"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_union(annotation):
        return " or ".join(type_text(arg) for arg in args)
    if origin is typing.Literal:
        return _literal(args)
    if origin in (list, set, frozenset):
        inner = type_text(args[0]) if args else "any"
        return f"list of {inner if ' ' not in inner else '(' + inner + ')'}"
    if origin is tuple:
        return "[" + ", ".join(type_text(arg) for arg in args) + "]"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section ({annotation.__name__})"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    name = getattr(annotation, "__name__", str(annotation))
    patterns = [getattr(item, "pattern", None) for item in metadata if getattr(item, "pattern", None)]
    return name + "".join(f" matching {code(pattern)}" for pattern in patterns)


_BOUNDS = ((annotated_types.Gt, "gt", ">"), (annotated_types.Ge, "ge", "≥"), (annotated_types.Lt, "lt", "<"),
           (annotated_types.Le, "le", "≤"))  # fmt: skip


def bounds_text(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        for kind, attr, sign in _BOUNDS:
            if isinstance(item, kind):
                parts.append(f"{sign} {getattr(item, attr)}")
        if isinstance(item, annotated_types.MinLen) or getattr(item, "min_length", None):
            parts.append(f"length ≥ {getattr(item, 'min_length', None)}")
    return " and ".join(parts)


def value_text(value: Any) -> str:
    """A default as it would be written in a recipe (YAML/JSON spelling: null, true, lists)."""
    if isinstance(value, str):
        return code(json.dumps(value) if not value or value.strip() != value or "|" in value else value)
    return code(json.dumps(value))


def _comment_lines(source: str) -> dict[int, tuple[str, bool]]:
    """Line number (1-based) -> (comment text, whether the line holds only the comment)."""
    found = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            alone = not lines[line - 1][: tok.start[1]].strip()
            found[line] = (tok.string.lstrip("#").strip(), alone)
    return found


_NOT_PROSE = re.compile(r"^(fmt:|type:|noqa|pragma)")


@functools.cache
def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the `#` comment block right above the field in the class body (no blank line between)
    and any comment on the field's own lines. The schema documents most fields this way."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    comments = _comment_lines(source)
    found = {}
    class_node = ast.parse(source).body[0]
    for node in getattr(class_node, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        line = node.lineno - 1
        while line >= 1 and line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        inline = [comments[n][0] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                  if n in comments and not comments[n][1]]  # fmt: skip
        text = " ".join(part for part in [*above, *inline] if part and not _NOT_PROSE.match(part))
        found[node.target.id] = text
    return found


def class_doc(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def field_description(model: type[BaseModel], name: str) -> str:
    """`Field(description=...)` first, then the source comments beside the field, in the class that defines it."""
    owners = [cls for cls in model.__mro__ if name in cls.__dict__.get("__annotations__", {})]
    # The nearest class that comments the field (a family's class re-declares `family` without a comment).
    comment = next((field_comments(cls)[name] for cls in owners if field_comments(cls).get(name)), "")
    parts = [model.model_fields[name].description or "", comment]
    return " ".join(sentence(part) for part in parts if part)


def sentence(text: str) -> str:
    """A description as a sentence: a plain first word capitalised (not `torch.compile`), a final full stop, and
    Python's None written as recipes write it, null."""
    text = re.sub(r"\bNone\b", "null", text.strip())
    if re.match(r"[a-z]+(?=[\s,:;(]|$)", text) and not text.startswith("null"):
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass
class Key:
    path: str
    model: type[BaseModel]  # the model that holds the field (the first kind's, when kinds share the key)
    name: str
    kinds: list[str] = field(default_factory=list)
    annotations: dict[str, Any] = field(default_factory=dict)  # kind -> the field's type in that kind's model
    # A section of one class per tag (the model's family, the task's kind): the tags whose class has the key.
    families: list[str] = field(default_factory=list)


@dataclass
class Section:
    path: str  # "" for the recipe's top level
    model: type[BaseModel]  # the first kind's (the top level has one model per kind)
    kinds: list[str] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    nullable: bool = False  # an Optional section, absent (null) unless the recipe sets it


def recipe_sections() -> list[Section]:
    """Every section of every kind of recipe, each with its keys, in schema order; a section or key shared by
    several kinds appears once, with the kinds that accept it."""
    sections: dict[str, Section] = {}

    def visit(model: type[BaseModel], path: str, kind: str, nullable: bool) -> None:
        section = sections.setdefault(path, Section(path, model, nullable=nullable))
        if kind not in section.kinds:
            section.kinds.append(kind)
        for name, info in model.model_fields.items():
            dotted = f"{path}.{name}" if path else name
            inner = nested_models(info.annotation)
            if not inner:
                key = next((k for k in section.keys if k.name == name), None)
                if key is None:
                    key = Key(dotted, model, name)
                    section.keys.append(key)
                if kind not in key.kinds:
                    key.kinds.append(kind)
                    key.annotations[kind] = info.annotation
                    tag_key = class_tag(model)[0]
                    if name == tag_key:  # each class takes its own; the key, all
                        key.annotations[kind] = TAG_TYPES[tag_key]()
                family = class_tag(model)[1]
                if family and family not in key.families:
                    key.families.append(family)
            optional = _is_union(_unwrap(info.annotation)) and type(None) in typing.get_args(_unwrap(info.annotation))
            for suffix, sub in inner:
                visit(sub, dotted + suffix, kind, optional)

    for kind, model in recipe_models().items():
        visit(model, "", kind, False)
    return list(sections.values())


def key_type(key: Key) -> str:
    """The key's type, the same in every kind that accepts it, or Literals merged (`kind`), or per kind."""
    annotations = list(dict.fromkeys(key.annotations.values()))
    if len(annotations) > 1 and all(typing.get_origin(a) is typing.Literal for a in annotations):
        annotations = [typing.Literal[tuple(v for a in annotations for v in typing.get_args(a))]]
    if len(annotations) == 1:
        bounds = bounds_text(key.model.model_fields[key.name])
        return type_text(annotations[0]) + (f", {bounds}" if bounds else "")
    return "<br>".join(f"{kind}: {type_text(annotation)}" for kind, annotation in key.annotations.items())


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return PydanticUndefined
        data = data[part]
    return data


def key_default(key: Key, defaults: dict[str, dict]) -> str:
    """The value a recipe of each kind gets without the key: read from the kind's default recipe, so a default
    that a kind overrides (a fine-tuning recipe's lr and epochs) or that a validator fills in shows as it
    applies. Keys of a section that is null by default show the section's own field default."""
    info = key.model.model_fields[key.name]
    if info.is_required():
        return "required"
    shown: dict[str, str] = {}
    for kind in key.kinds:
        value = _lookup(defaults[kind], key.path)
        if value is PydanticUndefined:
            value = to_jsonable_python(info.get_default(call_default_factory=True))
        shown[kind] = value_text(value)
    if len(set(shown.values())) == 1:
        return next(iter(shown.values()))
    return "<br>".join(f"{kind}: {value}" for kind, value in shown.items())


def recipe_keys_page() -> str:
    models = recipe_models()
    defaults = {kind: model().model_dump(mode="json") for kind, model in models.items()}
    sections = recipe_sections()
    out = [
        "# Recipe keys\n",
        GENERATED_NOTE.format(source="the recipe schema (bertkit/config/schema.py, recipe.py and track.py)"),
        "A recipe is a YAML file whose top-level keys are the sections below; any key can also be set on the "
        "command line with its dotted name, e.g. `--set optim.lr=3e-4` or `--set model.generator.num_layers=6`. "
        "Unknown keys are errors. Three kinds of recipe exist, set by `kind`: "
        + ", ".join(f"`{kind}`" for kind in models)
        + "; each section says which kinds accept it. A default that differs between kinds is given per kind. "
        "`bertkit recipes show NAME` prints a recipe with every default filled in.\n",
        "| Section | Recipe kinds | What it holds |",
        "| --- | --- | --- |",
    ]
    for section in sections:
        title = section.path or "top level"
        doc = class_doc(section.model).split("\n\n")[0].replace("\n", " ") if section.path else "the recipe itself"
        out.append(f"| [{code(title)}](#{_section_anchor(section)}) | {', '.join(section.kinds)} | {md_text(doc)} |")
    out.append("")
    for section in sections:
        out.append(_section_markdown(section, defaults))
    return "\n".join(out)


def class_tag(model: type[BaseModel]) -> tuple[str, str]:
    """(the key that picks the class, the class's value of it) for a section of one class per tag: a model
    family's class, a task kind's; ("", "") for any other."""
    from bertkit.config.task_config import TaskConfig

    if getattr(model, "FAMILY", ""):
        return "family", str(model.FAMILY)  # type: ignore[attr-defined]
    if issubclass(model, TaskConfig) and model is not TaskConfig:
        return "kind", str(model.model_fields["kind"].default)
    return "", ""


def _family_type() -> Any:
    from bertkit.config.model import Family

    return Family


def _kind_type() -> Any:
    from bertkit.config.schema import TaskKindName

    return TaskKindName


def _tag_base(tag_key: str) -> type[BaseModel]:
    """The base of the classes a `tag_key` picks among (what every family, or every kind, has)."""
    from bertkit.config.model import ModelConfig
    from bertkit.config.task_config import TaskConfig

    return ModelConfig if tag_key == "family" else TaskConfig


# The type of the key that picks a section's class: every value it takes.
TAG_TYPES = {"family": _family_type, "kind": _kind_type}


def _section_families(section: Section) -> tuple[str, dict[str, str]]:
    """(the key that picks the section's class, tag -> its class name), for the model and task sections (empty
    elsewhere)."""
    if not any(key.families for key in section.keys):
        return "", {}
    from bertkit.config.model import FAMILY_CLASSES
    from bertkit.config.task_config import TASK_CONFIG_CLASSES

    tag_key = class_tag(section.model)[0]
    classes = FAMILY_CLASSES if tag_key == "family" else TASK_CONFIG_CLASSES
    return tag_key, {tag: cls.__name__ for tag, cls in classes.items()}


def _section_anchor(section: Section) -> str:
    return "top-level" if not section.path else re.sub(r"[^a-z0-9]+", "-", section.path.lower()).strip("-")


def _section_markdown(section: Section, defaults: dict[str, dict]) -> str:
    depth = section.path.count(".") + section.path.count("[]")
    level = "##" if depth == 0 else "###"
    title = f"`{section.path}`" if section.path else "Top-level keys"
    out = [f"{level} {title} {{#{_section_anchor(section)}}}\n"]
    tag_key, families = _section_families(section)
    described = _tag_base(tag_key) if families else section.model  # a tagged section: the classes' common base
    if section.path:
        out.append(f"Recipe kinds: {', '.join(section.kinds)}. Model: `{described.__name__}`.\n")
    else:
        models = ", ".join(f"`{model.__name__}`" for model in recipe_models().values())
        out.append(f"Recipe kinds: {', '.join(section.kinds)}. Models: {models}.\n")
    if section.nullable:
        out.append(f"Absent (`null`) unless the recipe sets `{section.path}`; the defaults are those it then takes.\n")
    doc = class_doc(described)
    if doc and section.path:
        out.append(md_text(doc.replace("\n\n", "\0").replace("\n", " ").replace("\0", "\n\n")) + "\n")
    plural_tag = {"family": "families", "kind": "kinds"}.get(tag_key, "")
    if families:
        out.append(
            f"One class per `{section.path}.{tag_key}` (" + ", ".join(f"{code(f)}: `{m}`" for f, m in families.items())
            + f"): a key that is not its {tag_key}'s is refused, with the {plural_tag} that take it. Keys every "
            f"{tag_key} has come first; a key of some {plural_tag} says which.\n"
        )
    rows = []
    for key in sorted(section.keys, key=lambda k: bool(families) and len(k.families) != len(families)):
        kind_note = "" if key.kinds == section.kinds else f" ({', '.join(key.kinds)} only)"
        family_note = ""
        if families and len(key.families) != len(families):
            family_note = f" {plural_tag.capitalize()}: " + ", ".join(code(f) for f in key.families) + "."
        rows.append(
            [
                code(key.path),
                key_type(key),
                key_default(key, defaults),
                md_text(field_description(key.model, key.name)) + family_note + kind_note,
            ]
        )
    if rows:
        out.append(table(["Key", "Type", "Default", "Description"], rows))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# Shipped recipes


def _shape(model: Any) -> str:
    parts = [f"{model.num_layers} layers", f"hidden {model.hidden_size}", f"{model.num_heads} heads",
             f"FFN {model.intermediate_size}", f"vocab {model.vocab_size:,}"]  # fmt: skip
    if model.embedding_dim != model.hidden_size:
        parts.append(f"embeddings {model.embedding_dim}")
    if model.layer_sharing != "none":
        parts.append(f"sharing {model.layer_sharing}")
    if model.block_sparse:
        parts.append(f"block_sparse attention (blocks of {model.block_size})")
    parts.append(f"max length {model.max_position_embeddings - model.position_offset}")
    return ", ".join(parts)


def number(value: float) -> str:
    """1e-4, 5e-5, 0.01, 0.1: small rates the way papers and recipes write them."""
    if value and abs(value) < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def plural(count: float, unit: str) -> str:
    shown = f"{int(count):,}" if float(count).is_integer() else f"{count:g}"
    return f"{shown} {unit}" + ("" if count == 1 else "s")


def _length(recipe: Any) -> str:
    train = recipe.train
    text = plural(train.epochs, "epoch") if train.epochs is not None else plural(train.steps, "step")
    if train.budget:
        text = f"budget {train.budget} (at most {train.steps:,} steps)"
    return text


def _warmup(schedule: Any) -> str:
    if schedule.warmup_fraction:
        warm = f"{schedule.warmup_fraction:.0%} warm-up"
    else:
        warm = "no warm-up" if not schedule.warmup_steps else f"{plural(schedule.warmup_steps, 'warm-up step')}"
    decay = schedule.decay + (f" ({schedule.decay_shape})" if schedule.decay == "wsd" else "")
    return f"{warm}, {decay} decay"


def default_uses() -> dict[str, list[tuple[str, str]]]:
    """Recipe name -> (command, task kind) of each command that runs it when given no --recipe."""
    from bertkit.config.recipe import TASK_KINDS, default_recipe
    from bertkit.errors import BertkitError

    uses: dict[str, list[tuple[str, str]]] = {}
    for command in ("finetune", "distill"):
        for kind in TASK_KINDS:
            try:
                name = default_recipe(command, kind)
            except BertkitError:  # a kind the command has no default recipe for
                continue
            shown = f"bertkit finetune --task {kind}" if command == "finetune" else "bertkit distill --stage task"
            uses.setdefault(name, []).append((shown, kind))
    return uses


def first_clause(text: str) -> str:
    """The text up to its first sentence or clause break outside parentheses ("et al." is no break)."""
    depth = 0
    text = " ".join(text.split())
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and (text.startswith(("; ", ": ", " - "), i) or (text.startswith(". ", i)
                                                                         and not text[:i].endswith(" al"))):
            return text[:i]
    return text.rstrip(".")


def recipe_facts(recipe: Any, parameters: int | None, uses: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The hyper-parameters that tell one recipe from another, as (name, value) rows."""
    rows: list[tuple[str, str]] = []
    for command, kind in uses:
        teacher = f" for a {kind} teacher" if command.startswith("bertkit distill") else ""
        rows.append(("default of", f"`{command}`{teacher} (no --recipe)"))
    if recipe.kind == "pretrain":
        rows.append(("family", recipe.model.family))
        rows.append(("model", _shape(recipe.model)))
        if getattr(recipe.model, "generator", None) is not None:  # ELECTRA
            rows.append(("generator", f"{recipe.model.generator.hidden_fraction:g} of the width"))
        if parameters is not None:
            rows.append(("parameters", f"{parameters / 1e6:.1f}M ({parameters:,})"))
        weights = ", ".join(f"{name} {getattr(recipe.objective, name):g}" for name in recipe.objective.active)
        rows.append(("objective", weights))
    if recipe.kind == "finetune":
        task = recipe.task
        rows.append(("task", f"{task.kind}, max_seq_len {task.max_seq_len}, best by {task.best_metric}"))
    if recipe.kind == "distill":
        distill = recipe.distill
        rows.append(("method", distill.method or "follows the student (tinybert* -> tinybert, else distilbert)"))
        for phase_name in ("intermediate", "prediction"):
            phase = getattr(distill, phase_name)
            length = plural(phase.steps, "step") if phase.steps is not None else plural(phase.epochs, "epoch")
            warm = f", {phase.warmup_fraction:.0%} warm-up" if phase.warmup_fraction else ""
            rows.append((f"{phase_name} phase", f"{length}, lr {number(phase.lr)}{warm}, {phase.decay} decay"))
        rows.append(("optimizer", f"{recipe.optim.name}, weight decay {number(recipe.optim.weight_decay)}"))
    else:
        optim = recipe.optim
        rows.append(("optimizer", f"{optim.name}, lr {number(optim.lr)}, weight decay {number(optim.weight_decay)}"))
        rows.append(("schedule", _warmup(recipe.schedule)))
    batch = str(recipe.train.batch_size)
    if recipe.train.grad_accum > 1:
        batch += f" ({recipe.train.grad_accum} accumulation steps)"
    rows.append(("batch", batch))
    if recipe.kind != "distill":
        rows.append(("length", _length(recipe)))
    if recipe.engine.precision != "fp32":
        rows.append(("precision", recipe.engine.precision))
    return rows


KIND_TITLES = {"pretrain": "Pretraining", "finetune": "Fine-tuning", "distill": "Distillation (task stage)"}
KIND_NOTES = {
    "pretrain": "Run with `bertkit pretrain --recipe NAME`; also the students of `bertkit distill --student NAME`.",
    "finetune": "Run with `bertkit finetune --recipe NAME`; without --recipe, finetune takes `finetune-<task>`.",
    "distill": "Merged over the student's pretrain recipe by `bertkit distill --stage task`.",
}


def shipped_recipes() -> list[tuple[str, Path, Any, int | None]]:
    """(name, file, resolved recipe, parameter count or None) of every recipe `bertkit recipes list` shows,
    counted by the same function that command uses."""
    from bertkit.cli.recipes import describe_recipe
    from bertkit.config.recipe import load_recipe, recipe_names, resolve_recipe_path

    return [
        (name, resolve_recipe_path(name), load_recipe(name), describe_recipe(name).get("parameters"))
        for name in recipe_names()
    ]


def _leading_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def recipes_page() -> str:
    recipes = shipped_recipes()
    uses = default_uses()
    out = [
        "# Recipes\n",
        GENERATED_NOTE.format(source="the recipe files in bertkit/recipes/"),
        "Every recipe that ships with bertkit (`bertkit recipes list`). A recipe is named by its file name; "
        "`bertkit recipes show NAME` prints it with every default filled in, and any key can be changed with "
        "`--set KEY=VALUE` (see [Recipe keys](recipe-keys.md)). Parameter counts are those of the kept network "
        "(encoder and pretraining heads), as `bertkit recipes list` counts them.\n",
        "| Recipe | Kind | Family / task | Parameters | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, _, recipe, parameters in recipes:
        if recipe.kind == "pretrain":
            family = recipe.model.family
        elif recipe.kind == "finetune":
            family = recipe.task.kind
        else:  # the task comes from the teacher: say which teachers the recipe is the default for
            family = "task stage" + "".join(f", {kind}" for _, kind in uses.get(name, []))
        params = f"{parameters / 1e6:.1f}M" if parameters is not None else ""
        first = first_clause(recipe.description)
        out.append(f"| [{code(name)}](#{name}) | {recipe.kind} | {family} | {params} | {md_text(first)} |")
    out.append("")
    for kind, title in KIND_TITLES.items():
        out.append(f"## {title} recipes\n")
        out.append(md_text(KIND_NOTES[kind]) + "\n")
        for name, path, recipe, parameters in recipes:
            if recipe.kind != kind:
                continue
            text = path.read_text(encoding="utf-8")
            out.append(f"### {name} {{#{name}}}\n")
            out.append(md_text(" ".join(recipe.description.split())) + "\n")
            comment = _leading_comment(text)
            if comment:
                out.append(md_text(comment) + "\n")
            facts = recipe_facts(recipe, parameters, uses.get(name, []))
            out.append(table(["Setting", "Value"], [[md_text(k), md_text(v)] for k, v in facts]))
            body = textwrap.indent(f"```yaml\n{text.rstrip()}\n```", "    ")
            out.append(f'??? example "recipes/{path.name}"\n\n{body}\n')
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------


def pages() -> dict[str, Callable[[], str]]:
    """Path under docs/ -> the function that writes that page."""
    return {
        "reference/cli.md": cli_page,
        "reference/recipe-keys.md": recipe_keys_page,
        "reference/recipes.md": recipes_page,
    }
