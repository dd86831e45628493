"""One CLI vocabulary, checked over the whole app: each flag name has one meaning (one help text), one type and one
declaration (tritonize/options.py when more than one command takes it); each concept one spelling."""

from __future__ import annotations

import types
import typing
from collections import defaultdict
from typing import Annotated

import typer
import typer.main

import tritonize.options as declared_options
from tritonize.options import Artifacts, Timeout

# Spellings the vocabulary replaced: the concept they named now has one name (see tritonize/options.py).
RETIRED = {
    "--out": "--output-dir (reports, bundles) or --artifacts",
    "--bundle": "--output-dir",
    "--report-dir": "--output-dir",
    "--model-config-name": "--config-name",
    "--target": "--targets",
    "--repository": "the positional REPOSITORY",
}

# The user's card (README, docs/commands.md): `tritonize convert trt --min 1 --opt 16 --max 32`. These spellings are
# aliases of one option each, in these commands, forever.
CARD_ALIASES = {"--min": "--min-batch", "--opt": "--opt-batch", "--max": "--max-batch"}
CARD_COMMANDS = ("convert trt", "build")


def leaf_commands(command, path=()):
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path), command
        return
    for name, sub in sorted(subcommands.items()):
        yield from leaf_commands(sub, (*path, name))


def declarations() -> dict[str, str]:
    """Flag name -> help text, for every option declared in tritonize/options.py."""
    found = {}
    for value in vars(declared_options).values():
        if typing.get_origin(value) is not typing.Annotated:
            continue
        for meta in value.__metadata__:
            if isinstance(meta, typer.models.OptionInfo):
                first = (meta.default,) if isinstance(meta.default, str) else ()  # Annotated: the first name
                for decl in (*first, *meta.param_decls):
                    for name in decl.split("/"):  # a boolean flag: "--antialias/--no-antialias"
                        if name.startswith("--"):
                            found[name] = meta.help
    return found


def _type_name(param) -> str:
    """The value's type, Optional[...] unwrapped (the default says whether it may be left out)."""
    annotation = param.type_descriptor.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return getattr(annotation, "__name__", str(annotation))


def vocabulary_problems(app: typer.Typer) -> list[str]:
    """Every way the app's commands break the one-vocabulary rule, as lines a person can act on."""
    uses = defaultdict(list)  # flag -> [(command, help, type, is_flag)]
    problems = []
    for path, command in leaf_commands(typer.main.get_command(app)):
        for param in command.params:
            if param.name == "help":
                continue
            if param.param_type_name == "argument":
                continue
            if param.name == "repository":
                problems.append(f"{path}: the repository is the positional REPOSITORY everywhere, not {param.opts}")
            if param.hidden:
                problems.append(f"{path}: hidden option {param.opts[0]} (no aliases: 0.1.0 was never released)")
            for name in param.opts:
                if name.startswith("--"):
                    uses[name].append((path, param.help, _type_name(param), param.is_flag))
    declared = declarations()
    for name, where in sorted(uses.items()):
        if name in RETIRED:
            problems.append(f"{name} ({', '.join(w[0] for w in where)}): retired spelling; use {RETIRED[name]}")
        meanings = {(help_text, type_name, is_flag) for _, help_text, type_name, is_flag in where}
        if len(meanings) > 1:
            detail = "; ".join(f"{path}: {type_name} {help_text!r}" for path, help_text, type_name, _ in where)
            problems.append(f"{name} has {len(meanings)} meanings: {detail}")
            continue
        help_text = where[0][1]
        if name in declared and declared[name] != help_text:
            problems.append(f"{name}: declared in tritonize/options.py, redeclared by {where[0][0]}")
        elif len(where) > 1 and name not in declared:
            problems.append(f"{name} is taken by {', '.join(w[0] for w in where)} but not declared in tritonize/options.py")
    return problems


def test_the_whole_app_speaks_one_vocabulary():
    from tritonize.cli import app

    assert vocabulary_problems(app) == []


def test_the_cards_spellings_are_aliases_of_the_batch_options():
    """`--min/--opt/--max` are the same option as `--min-batch/--opt-batch/--max-batch` (one parameter, so one
    meaning), in every command of the card; removing an alias, or making it an option of its own, fails here."""
    from tritonize.cli import app

    commands = dict(leaf_commands(typer.main.get_command(app)))
    for path in CARD_COMMANDS:
        for alias, name in CARD_ALIASES.items():
            params = [p for p in commands[path].params if alias in p.opts]
            assert len(params) == 1 and name in params[0].opts, f"{path}: {alias} is not an alias of {name}"


def test_a_flag_given_a_second_meaning_is_caught():
    """The checker is not vacuous: a command that gives --timeout another meaning, redeclares --artifacts, or
    brings back a retired spelling is named."""
    app = typer.Typer()

    @app.command("call")
    def call(timeout: Timeout = 1.0, artifacts: Artifacts = declared_options.DEFAULT_ARTIFACTS) -> None:
        """Uses the shared declarations."""

    @app.command("wait")
    def wait(
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for readiness.")] = 1.0,
        bundle: Annotated[str, typer.Option("--bundle", help="Where.")] = "x",
    ) -> None:
        """Gives --timeout a second meaning and takes a retired spelling."""

    problems = vocabulary_problems(app)
    assert any(p.startswith("--timeout has 2 meanings") for p in problems), problems
    assert any(p.startswith("--bundle (wait): retired spelling") for p in problems), problems


def test_every_list_is_one_comma_separated_value():
    from tritonize.options import int_items, items

    assert items(" a, b,,c ", "--models") == ("a", "b", "c")
    assert int_items("1,2, 4", "--concurrency") == (1, 2, 4)
    assert items(None, "--models") == ()
    try:
        int_items("1,x", "--concurrency")
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        assert str(e) == "--concurrency takes a comma-separated list like 4,8,16, got '1,x'"
    else:
        raise AssertionError("a bad item was accepted")
