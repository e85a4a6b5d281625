"""Shipped recipes: every one under bertkit/recipes/ loads and its defaults agree with each other (warm-up against
the run's length, batch against accumulation, QA stride against the window), each task kind has its standard
recipe chosen by `--task`, warm-up as a share of the steps, and `bertkit recipes show --for` names the recipe a
command uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json

from bertkit.config.recipe import TASK_KINDS, default_recipe, load_recipe, recipe_names
from bertkit.config.schema import ScheduleConfig, TaskConfig, qa_context_room, qa_doc_stride, qa_question_tokens
from bertkit.engine.optim import lr_multiplier
from bertkit.errors import BertkitError
from bertkit.pipelines.finetune.common import plan_epochs

SMALL_SET = 100  # examples: a fine-tuning set small enough that a fixed warm-up count would be all of its run


@pytest.mark.parametrize("name", recipe_names())
def test_every_shipped_recipe_is_consistent(name: str) -> None:
    recipe = load_recipe(name)  # the validation each run does when it reads its recipe, before any data
    train, schedule = recipe.train, recipe.schedule
    assert recipe.name == name and recipe.description
    assert train.batch_size % train.grad_accum == 0
    assert not (schedule.warmup_steps and schedule.warmup_fraction) and 0.0 <= schedule.warmup_fraction < 1.0
    if train.epochs is None:
        total = train.steps
    else:
        # The steps follow the data: a fixed count could be the whole run of a small set, a share never is.
        assert schedule.warmup_steps == 0, f"{name} trains for epochs: warm up by schedule.warmup_fraction"
        total = plan_epochs(train, SMALL_SET)[0].steps
    assert total is not None and schedule.warmup_for(total) < total, "the run would be all warm-up"
    warmup = schedule.warmup_for(total)
    # Sampled (a pretraining recipe runs 10^6 steps), with the end of warm-up, where the peak is.
    sampled = {0, max(warmup - 1, 0), warmup, total - 1, *range(0, total, max(1, total // 500))}
    rates = [lr_multiplier(step, total, schedule) for step in sorted(sampled)]
    assert max(rates) == pytest.approx(1.0) and min(rates) >= 0.0  # reaches the peak, never above it
    if recipe.kind in ("finetune", "distill"):
        task = recipe.task  # type: ignore[union-attr]
        assert 3 <= task.max_seq_len <= 512
        if task.kind == "question-answering":
            stride = qa_doc_stride(task.max_seq_len, task.doc_stride)
            assert 0 <= stride < qa_context_room(task.max_seq_len)  # for any question, however long
    if recipe.kind == "pretrain":
        assert train.eval_batches >= 1 and train.log_every <= train.steps


def test_each_task_kind_has_its_standard_recipe() -> None:
    """What transformers' example scripts made standard: run_qa.py windows of 384 with stride 128, lr 3e-5, batch
    12, 2 epochs; run_ner.py batch 16, lr 5e-5 (over 5 epochs, see the recipe); sequence tasks BERT's lr 5e-5, batch
    32, 3 epochs."""
    for kind in TASK_KINDS:
        name = default_recipe("finetune", kind)
        assert name == f"finetune-{kind}" and load_recipe(name).task.kind == kind  # type: ignore[union-attr]
    assert default_recipe("finetune") == "finetune-classification"
    qa = load_recipe("finetune-question-answering")
    assert (qa.task.max_seq_len, qa_doc_stride(qa.task.max_seq_len, qa.task.doc_stride)) == (384, 128)  # type: ignore[union-attr]
    assert (qa.optim.lr, qa.train.batch_size, qa.train.epochs) == (3e-5, 12, 2)
    ner = load_recipe("finetune-token-classification")
    assert (ner.optim.lr, ner.train.batch_size, ner.train.epochs) == (5e-5, 16, 5)
    for kind in ("classification", "regression", "multi-label"):
        recipe = load_recipe(f"finetune-{kind}")
        assert (recipe.optim.lr, recipe.train.batch_size, recipe.train.epochs) == (5e-5, 32, 3)
        assert recipe.schedule.warmup_fraction == 0.1 and recipe.task.max_seq_len == 128  # type: ignore[union-attr]
    assert default_recipe("distill") == "distill-task"
    # The task stage's recipe follows the teacher: taggers train in batches of 16 for 5 epochs, as finetune's.
    assert default_recipe("distill", "token-classification") == "distill-task-token-classification"
    assert default_recipe("distill", "question-answering") == "distill-task-question-answering"
    tagger = load_recipe("distill-task-token-classification", kind="distill")
    assert (tagger.train.batch_size, tagger.distill.prediction.epochs, tagger.distill.prediction.lr) == (16, 5, 1e-4)  # type: ignore[attr-defined]
    with pytest.raises(BertkitError, match="distils classification, token-classification, question-answering"):
        default_recipe("distill", "regression")
    with pytest.raises(BertkitError, match="not a task bertkit fine-tunes; use one of classification"):
        default_recipe("finetune", "ner")
    with pytest.raises(BertkitError, match="--recipe is required"):
        default_recipe("pretrain")


def test_warmup_fraction_is_a_share_of_the_steps() -> None:
    schedule = ScheduleConfig(warmup_fraction=0.1)
    assert [schedule.warmup_for(n) for n in (1, 10, 57, 1000)] == [1, 1, 6, 100]  # rounded up: never 0 of a run
    rates = [lr_multiplier(step, 57, schedule) for step in range(57)]
    assert rates[:7] == pytest.approx([1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0, 1.0]) and rates[7] < 1.0
    assert ScheduleConfig(warmup_steps=6).warmup_for(57) == 6 and ScheduleConfig().warmup_for(57) == 0
    with pytest.raises(ValueError, match="warmup_steps and schedule.warmup_fraction are mutually exclusive"):
        ScheduleConfig(warmup_steps=10, warmup_fraction=0.1)
    with pytest.raises(ValueError, match="less than 1"):
        ScheduleConfig(warmup_fraction=1.0)
    # One set on the command line replaces the other from the recipe file; both on the command line contradict.
    assert load_recipe("finetune-classification", ["schedule.warmup_steps=7"]).schedule.warmup_fraction == 0.0
    assert load_recipe("bert-tiny", ["schedule.warmup_fraction=0.05"]).schedule.warmup_steps == 0
    with pytest.raises(BertkitError, match="mutually exclusive"):
        load_recipe("bert-tiny", ["schedule.warmup_fraction=0.05", "schedule.warmup_steps=3"])


def test_a_distill_recipes_warmup_fraction_replaces_the_students_steps(tmp_path: Path) -> None:
    """A distill recipe merged over a student's pretrain recipe (bert-tiny warms up 30 steps): its warm-up share
    replaces the student's count instead of contradicting it."""
    from bertkit.config.recipe import load_distill_recipe

    own = tmp_path / "distill-share.yaml"
    own.write_text("kind: distill\nschedule:\n  warmup_fraction: 0.1\n", encoding="utf-8")
    assert load_recipe("bert-tiny").schedule.warmup_steps == 30
    schedule = load_distill_recipe("bert-tiny", str(own)).schedule
    assert (schedule.warmup_steps, schedule.warmup_fraction) == (0, 0.1)


def test_qa_stride_fits_every_window_by_construction() -> None:
    for max_len in range(5, 1025):
        room, stride = qa_context_room(max_len), qa_doc_stride(max_len, None)
        assert room >= 1 and 0 <= stride < room, max_len
        assert qa_question_tokens(max_len) + room + 3 == max_len
    assert qa_doc_stride(384, None) == 128 and qa_doc_stride(128, None) == 42 and qa_doc_stride(128, 20) == 20
    # A stride set by hand that a window cannot hold is refused when the recipe is read, saying what fits.
    with pytest.raises(BertkitError, match=r"task.doc_stride \(128\) must be less than .* \(63 tokens.*derive it .*42"):
        load_recipe("finetune-question-answering", ["task.max_seq_len=128", "task.doc_stride=128"])
    with pytest.raises(ValueError, match="leaves no room for a context"):
        TaskConfig(kind="question-answering", max_seq_len=4)
    with pytest.raises(ValueError, match="task.doc_stride does not apply to a classification task"):
        TaskConfig(kind="classification", max_seq_len=128, doc_stride=128)  # only question answering reads it


def test_recipes_show_names_the_recipe_a_command_uses() -> None:
    shown = run_json("recipes", "show", "--for", "finetune", "--task", "question-answering")
    assert shown["name"] == "finetune-question-answering"
    assert shown["used_by"] == "bertkit finetune --task question-answering"
    assert shown["recipe"]["task"]["max_seq_len"] == 384 and shown["recipe"]["schedule"]["warmup_fraction"] == 0.1
    assert run_json("recipes", "show", "--task", "token-classification")["name"] == "finetune-token-classification"
    assert run_json("recipes", "show", "--for", "finetune")["name"] == "finetune-classification"
    assert run_json("recipes", "show", "--for", "distill")["name"] == "distill-task"
    assert "--for finetune --task question-answering" in run_error("recipes", "show")
    assert "not both" in run_error("recipes", "show", "bert-tiny", "--for", "finetune")
    assert "--for takes finetune or distill" in run_error("recipes", "show", "--for", "embed")
    assert "not a task bertkit fine-tunes" in run_error("recipes", "show", "--task", "ner")


def test_finetune_with_an_unknown_task_is_one_error_line(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a", "label": "x"}) + "\n")
    error = run_error("finetune", "-m", str(tmp_path), "--train", str(data), "-o", str(tmp_path / "r"), "--task", "ner")
    assert "--task 'ner' is not a task" in error and not (tmp_path / "r").exists()


def test_a_negative_seed_is_refused_before_any_random_state_is_drawn() -> None:
    # numpy's generators (every loader's shuffle) take no negative seed: refused at the recipe, in one line
    with pytest.raises(BertkitError) as err:
        load_recipe("finetune-tiny", ["train.seed=-1"], kind="finetune")
    assert "train.seed" in str(err.value) and "\n" not in str(err.value)
    assert load_recipe("finetune-tiny", ["train.seed=0"], kind="finetune").train.seed == 0


@pytest.mark.parametrize(
    "command",
    [
        ["build-corpus", "-i", "{d}/in.txt", "-t", "{d}/tok", "-o", "{d}/out"],
        ["tokenize", "train", "-i", "{d}/in.txt", "-o", "{d}/out"],
        ["augment", "-m", "{d}/m", "-i", "{d}/in.csv", "-o", "{d}/out"],
        ["compress", "-t", "{d}/m", "--train", "{d}/in.csv", "--eval", "{d}/in.csv", "-o", "{d}/out"],
    ],
)
def test_a_negative_seed_option_is_one_error_line_before_any_input_is_read(tmp_path: Path, command: list[str]) -> None:
    args = [arg.format(d=tmp_path) for arg in command]
    assert run_error(*args, "--seed", "-1") == "error: --seed must be 0 or more, not -1"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("optim.lr=inf", "'optim.lr': Input should be a finite number"),
        ("optim.lr=1e400", "'optim.lr': Input should be a finite number"),  # past a float: pydantic makes it inf
        ("optim.lr=nan", "'optim.lr': Input should be a finite number"),
        ("optim.weight_decay=inf", "'optim.weight_decay': Input should be a finite number"),
        ("objective.mlm=inf", "'objective.mlm': Input should be a finite number"),
        ("model.layer_norm_eps=inf", "'model.layer_norm_eps': Input should be a finite number"),
        ("optim.betas=[nan,0.9]", "'optim.betas.0': Input should be a finite number"),
        ("optim.betas=[0.9,1.5]", "'optim.betas.1': Input should be less than 1"),
        ("optim.betas=[-0.1,0.9]", "'optim.betas.0': Input should be greater than or equal to 0"),
        # pydantic reads true/false as 1/0: a rate of 1.0, a run of one step
        ("optim.lr=true", "bad value for 'optim': 'lr' takes a number, not true"),
        ("train.steps=true", "bad value for 'train': 'steps' takes a number, not true"),
        ("objective.nsp=false", "bad value for 'objective': 'nsp' takes a number, not false"),
    ],
)
def test_infinite_nan_and_out_of_range_numbers_are_refused_at_the_recipe(override: str, needle: str) -> None:
    """No number of a recipe is infinite, NaN or true/false, and Adam's betas lie in [0, 1): refused in one line
    where the recipe is read, not as a traceback from the optimizer or a run that trains on NaN."""
    assert needle in run_error("recipes", "show", "bert-tiny", "--set", override)
    assert load_recipe("bert-tiny", ["optim.betas=[0.0,0.95]"], kind="pretrain").optim.betas == (0.0, 0.95)


def test_an_empty_recipe_file_or_set_value_is_refused(tmp_path: Path) -> None:
    """An empty recipe file (a truncated copy, a template never filled) would be every default, BERT-base's
    shape; `--set train.steps=` (a shell variable left unset) the schema's default steps: both are one line."""
    empty = tmp_path / "mine.yaml"
    empty.write_text("# to fill in\n", encoding="utf-8")
    assert "is empty" in run_error("recipes", "show", str(empty))
    line = run_error("recipes", "show", "bert-tiny", "--set", "train.steps=")
    assert line == "error: --set train.steps= has no value after '='; give one, or train.steps=null to unset the key"
    assert load_recipe("bert-tiny", ["train.budget=null"], kind="pretrain").train.budget is None


@pytest.mark.parametrize("option", ["--pretrain-steps", "--finetune-steps"])
@pytest.mark.parametrize("steps", ["0", "-1"])
def test_quickstart_steps_below_one_are_refused_before_anything_is_written(
    tmp_path: Path, option: str, steps: str
) -> None:
    line = run_error("quickstart", "-o", str(tmp_path / "qs"), option, steps)
    assert line == f"error: {option} must be at least 1, not {steps}"
    assert not (tmp_path / "qs").exists()


def test_each_family_has_its_own_configuration_class() -> None:
    """The model section is a discriminated union on family: every shipped recipe's model is its family's class,
    a key of another family is one line naming the family that takes it, and a typo still gets a did-you-mean."""
    from bertkit.config.model import FAMILY_CLASSES, ModelConfig, saved_model_config
    from bertkit.config.recipe import load_recipe, recipe_names

    for name in recipe_names():
        recipe = load_recipe(name)
        if hasattr(recipe, "model"):  # a fine-tuning recipe takes its model from --model
            assert type(recipe.model) is FAMILY_CLASSES[recipe.model.family], name
    assert type(load_recipe("albert-tiny", ["model.sharing=shared-ffn"]).model).__name__ == "AlbertConfig"
    cases = {
        "model.sharing=all-shared": "model.sharing is a key of model.family=albert, and this model is model.family=b",
        "model.generator.hidden_fraction=0.5": "model.generator is a key of model.family=electra",
        "model.global_rope_theta=1e4": "model.global_rope_theta is a key of model.family=modernbert",
        "model.hiden_size=64": "did you mean 'model.hidden_size'",
        "model.family=bart": "model.family must be one of bert, roberta",
    }
    for override, message in cases.items():
        with pytest.raises(BertkitError, match=re.escape(message)):
            load_recipe("bert-tiny", [override])
    with pytest.raises(BertkitError, match=re.escape("model.attention is a key of model.family=bert / roberta")):
        load_recipe("xlnet-tiny", ["model.attention=full"])
    assert type(ModelConfig(family="xlnet")).__name__ == "XLNetConfig"
    assert ModelConfig.model_validate({"family": "roberta"}) == ModelConfig(family="roberta")
    # A model file that lists every family's keys at their off values (as files written before did) still loads;
    # a foreign key that is on is refused.
    legacy = {**ModelConfig().model_dump(), "sharing": "none", "generator": None, "global_rope_theta": None,
              "bias": None, "local_attention": None}  # fmt: skip
    assert saved_model_config(legacy) == ModelConfig()
    with pytest.raises(ValueError, match="model.sharing is a key of model.family=albert"):
        saved_model_config({**legacy, "sharing": "all-shared"})
