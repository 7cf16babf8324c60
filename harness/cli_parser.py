"""The command line's parser: every command, its options and their help, the suites' own commands
(``Suite.commands``), and the readers that turn parsed options into typed overrides. What each command does is in
:mod:`harness.cli`; this module only reads arguments."""

from __future__ import annotations

import argparse
import difflib
import os

from harness.errors import MixbenchError
from harness.running.plan_commands import add_executor_args, add_nightly_parser


def _common(results: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE", help="import a module that registers mixers or suites (repeatable)")
    if results:
        p.add_argument("--results", default=os.environ.get("MIXBENCH_RESULTS", "results"), help="results store: a folder or an fsspec URL (default: results/)")
    return p


def _training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="quick", help="tiny | quick | paper-small | paper-large | long (default: quick)")
    _backbone_arg(p)
    p.add_argument("--data", default=None, help="'embedded' (default), a local file/folder, or hub:NAME")
    p.add_argument("--text-field", default=None, help="field holding the text in json/parquet data (default: text)")
    p.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (default: the preset's)")
    p.add_argument("--tokenizer-file", default=None, help="a pretrained tokenizers JSON instead of training a BPE")
    p.add_argument("--tokens", type=int, default=None, help="training token budget (default: the preset's)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per training step (default: the preset's)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: the mixer's tuned recipe, else the preset's)")
    p.add_argument("--max-train-docs", type=int, default=None, help="train on at most this many documents (0 = all)")
    p.add_argument("--skip-bad-rows", action="store_true", default=None,
                   help="leave out (and count) json/parquet rows without a string text field instead of failing")
    p.add_argument("--context", type=positive_int, default=None, help="training context length (default: the preset's)")
    p.add_argument("--eval-every", type=int, default=None, help="steps between validation passes (0 = at the end)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between resumable snapshots (0 = at the end)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--kernel", default=None, help="force a mixer kernel (default: the fastest for the device)")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE", help="mixer config fields")
    p.add_argument("--match", default=None, choices=("params", "none"),
                   help="params: each mixer's MLP width set so its non-embedding parameters are within 5%% of the "
                        "preset's reference mixer's (the presets' default); none: one MLP width (docs/protocol.md)")
    p.add_argument("--force", action="store_true", help="redo work that already exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--yes", action="store_true", help="train models estimated to take longer than the time limit")


def build_parser(suite_commands: list[list[str]] | None = None) -> argparse.ArgumentParser:
    """The whole parser. ``suite_commands`` ([name, help] pairs, :func:`suite_command_index`) stands in for the
    suites' own subcommands when the command line does not run one: their names and help are listed, and
    nothing is imported to build them."""
    parser = argparse.ArgumentParser(
        prog="mixbench", description="Compare token mixers on one backbone.", allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("mixers", parents=[_common(False)], help="list registered mixers, kernels and capabilities")
    p.add_argument("--config", default=None, metavar="MIXER", help="print this mixer's config fields (type, default, doc)")
    p.add_argument("--table", default=None, metavar="PRESET", nargs="?", const="quick",
                   help="a Markdown table of every mixer's paper, decode state, FLOPs per token and kernels at this "
                        "preset's backbone (default quick; builds each mixer)")

    p = sub.add_parser("suites", parents=[_common(False)], help="list suites with their config fields (type, default, doc)")
    p.add_argument("names", nargs="*", metavar="SUITE", help="only these suites (default: every one)")

    p = sub.add_parser("check", parents=[_common(False)], help="conformance gate for a mixer (exit 0 only if all pass)")
    p.add_argument("mixer", help="a registered mixer name (`mixbench mixers` lists them)")
    p.add_argument("--preset", default="quick",
                   help="the backbone the mixer is built into (default: quick, as train and run; the verdict is "
                        "cached, so eval and run at this preset do not check again)")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE",
                   help="mixer options (`mixbench mixers --config NAME` lists them)")
    p.add_argument("--lengths", default=None, metavar="N,N,...",
                   help="sequence lengths (default: 1, a prime below the smallest chunk, every chunk boundary, the "
                        "context and, for mixers that extrapolate, twice the context)")
    p.add_argument("--batch-sizes", default=None, metavar="N,N,...", help="batch sizes (default: 1,3)")
    _backbone_arg(p)
    p.add_argument("--tolerance", default=None, metavar="REL", help="relative tolerance of comparisons (default: 1e-4)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when present, else cpu)")

    p = sub.add_parser("train", parents=[_common(False)], help="train a model into a checkpoint folder")
    p.add_argument("--mixer", required=True, help="a registered mixer name (`mixbench mixers` lists them)")
    p.add_argument("--out", required=True, help="checkpoint folder (resumed if it holds a partial run)")
    p.add_argument("--seed", type=int, default=0, help="training seed: initialisation and data order (default: 0)")
    _training_args(p)

    p = sub.add_parser("eval", parents=[_common()], help="score a checkpoint (or a transformers model) with a suite")
    p.add_argument("--suite", required=True, help="the suite that scores it (`mixbench suites` lists them)")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder (written by `mixbench train`)")
    p.add_argument("--hf-model", default=None, metavar="PATH_OR_NAME",
                   help="a transformers causal LM (folder or hub name) instead of a checkpoint: scored with its own "
                        "tokenizer, its rows labelled external (docs/huggingface.md)")
    p.add_argument("--revision", default=None, help="with --hf-model: the hub revision (branch, tag or commit)")
    p.add_argument("--trust-remote-code", action="store_true", help="with --hf-model: run the model's own code")
    p.add_argument("--data", default=None, help="with --hf-model: the held-out data ('embedded' by default, as train)")
    p.add_argument("--mixer", default=None, help="a mixer name instead of a checkpoint, for suites that train "
                                                 "their own models (synthetic)")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE", help="with --mixer")
    p.add_argument("--preset", default="quick", help="with --mixer: the backbone (default: quick, as train and run)")
    p.add_argument("--suite-config", nargs="*", default=[], metavar="KEY=VALUE",
                   help="suite config fields (`mixbench suites NAME` lists them; lists: a,b,c)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--kernel", default=None,
                   help="force a mixer kernel, e.g. reference (default: the fastest for the device; recorded)")
    p.add_argument("--force", action="store_true", help="score again a run the store already holds")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _gate_args(p)

    p = sub.add_parser("export", parents=[_common()], help="write a checkpoint as a transformers model folder")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint folder (written by `mixbench train`)")
    p.add_argument("--out", required=True, help="the model folder to write: new, empty, or an earlier export")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier export at --out (never a folder mixbench did not write)")
    p.add_argument("--no-card-results", action="store_true",
                   help="do not read --results for the model card's board row")
    p.add_argument("--push-to-hub", default=None, metavar="REPO",
                   help="upload the folder to this model repository (needs the network and a token)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")

    p = sub.add_parser("run", parents=[_common()], help="train and score a grid of mixers at a preset")
    p.add_argument("--mixers", default=None, help="comma-separated mixer names (default: the quickstart's)")
    p.add_argument("--suites", default="perplexity", help="comma-separated suite names (default: perplexity)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    controls = p.add_mutually_exclusive_group()
    controls.add_argument("--controls", default=None, metavar="NAMES",
                          help="controls trained and scored beside the mixers (default: every registered control; "
                               "docs/controls.md)")
    controls.add_argument("--no-controls", action="store_true", help="train no controls (the board then cannot say "
                                                                     "whether a column measures mixing)")
    _training_args(p)
    p.add_argument("plan", nargs="?", default=None, help="a plan file (YAML) instead of the grid options")
    p.add_argument("--suite-config", nargs="*", default=[], metavar="SUITE.KEY=VALUE",
                   help="suite config fields (KEY=VALUE alone when --suites names one suite); "
                        "`mixbench suites NAME` lists them")
    p.add_argument("--keep-going", action="store_true", help="run the other jobs when one fails (exit 1 at the end)")
    _gate_args(p)
    add_executor_args(p)
    add_nightly_parser(sub, [_common()])

    p = sub.add_parser("leaderboard", parents=[_common()], help="print the leaderboard built from the store")
    p.add_argument("--format", default="md", help="md | csv | json | html | latex")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--all", action="store_true", help="every headline column with intervals (default: compact)")
    view.add_argument("--suite", default=None, metavar="S", help="every metric of one suite")
    p.add_argument("--suites", default=None, help="only these suites (comma-separated)")
    p.add_argument("--all-configs", action="store_true",
                   help="also runs under non-canonical suite configs, as their own columns")
    p.add_argument("--all-versions", action="store_true",
                   help="also rows of models trained by older code of the same configuration")
    p.add_argument("--all-budgets", action="store_true",
                   help="also rows of models trained at smaller token budgets of a setting (docs/rank_stability.md)")
    p.add_argument("--output", default=None, help="write to this file instead of stdout")

    p = sub.add_parser("show", parents=[_common()], help="one run's metrics (with intervals) and provenance")
    p.add_argument("run_id", metavar="RUN_ID", help="a run id or its first characters (at least 4)")

    p = sub.add_parser("compare", parents=[_common()],
                       help="paired differences of two models on the items both were scored on")
    p.add_argument("a", metavar="A", help="a model: its board label (e.g. mamba), row key, or one of its run ids")
    p.add_argument("b", metavar="B", help="the other model, named the same ways")
    p.add_argument("--suites", default=None, help="only these suites (comma-separated)")
    p.add_argument("--all", action="store_true", help="every metric, not only the board's headline columns")

    p = sub.add_parser("publish", parents=[_common()], help="write the results store as a static site (leaderboard, suites, plots)")
    p.add_argument("--out", default="site", help="site folder, replaced as a whole (default: site/)")
    p.add_argument("--force", action="store_true", help="replace a published site even with a board of zero runs")

    p = sub.add_parser("reproduce", parents=[_common()],
                       help="check the harness against published results (exit 0 only when every target reproduces)")
    p.add_argument("targets", nargs="*", metavar="NAME", help="targets to run (default with --all: every target)")
    p.add_argument("--list", action="store_true", help="list every target: source, claim, protocol, cost")
    p.add_argument("--all", action="store_true", help="run every registered target")
    p.add_argument("--plan", default=None, help="a reproduce plan (YAML: targets, and a device per scale), e.g. "
                                                "plans/reproduce.yaml for nightly use")
    p.add_argument("--scale", default="cpu", choices=("tiny", "cpu", "gpu"),
                   help="protocol size: cpu (default, this machine), gpu (the source's own scale), tiny (a smoke test)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the plan's, else cuda when available)")
    p.add_argument("--force", action="store_true", help="redo runs the store already holds")
    p.add_argument("--negatives", action="store_true",
                   help="also run each target's negatives (the protocol with a subject for which the claim must "
                        "fail); a target whose negative passes is 'cannot fail'. Always on with --plan")
    p.add_argument("--subject", action="append", default=[], metavar="ROLE=MIXER",
                   help="run the targets with MIXER (a registered name, optionally MIXER:{json config}) in ROLE "
                        "(--list shows each target's roles); repeatable")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("tune", parents=[_common()],
                       help="choose each mixer's learning rate (and other training values) on validation into the "
                            "preset's recipe file")
    p.add_argument("--preset", default="quick", help="the preset whose recipe file is written (default: quick)")
    p.add_argument("--mixers", default=None, help="comma-separated mixer names (default: the quickstart's)")
    controls = p.add_mutually_exclusive_group()
    controls.add_argument("--controls", default=None, metavar="NAMES",
                          help="controls tuned beside the mixers (default: every registered control)")
    controls.add_argument("--no-controls", action="store_true", help="tune no controls")
    p.add_argument("--grid", nargs="*", default=[], metavar="FIELD=V1,V2,...",
                   help="training values to try (default: lr=0.001,0.002,0.004,0.008); several fields make a grid")
    p.add_argument("--seeds", type=positive_int, default=3,
                   help="seeds of each chosen recipe that measure the seed spread (default: 3; 1: none)")
    p.add_argument("--extend", type=int, default=2,
                   help="how many times a best value at a numeric grid's end is extended past it (default: 2)")
    p.add_argument("--out", default="recipes",
                   help="the recipe file, or a folder for <preset>.json (default: recipes/, which the presets read "
                        "before the project's own harness/recipes/)")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE", help="with one mixer: its config")
    p.add_argument("--tokens", type=int, default=None, help="training token budget (default: the preset's)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per training step (default: the preset's)")
    p.add_argument("--data", default=None, help="'embedded' (default), a local file/folder, or hub:NAME")
    p.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (default: the preset's)")
    p.add_argument("--max-train-docs", type=int, default=None, help="train on at most this many documents (0 = all)")
    _backbone_arg(p)
    p.add_argument("--match", default=None, choices=("params", "none"), help="as for run (default: the preset's)")
    p.add_argument("--yes", action="store_true", help="train models estimated to take longer than the time limit")
    p.add_argument("--split", default="validation",
                   help="the held-out split the objective reads: validation (default) or validation_ood; a test split "
                        "is refused (docs/protocol.md)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _gate_args(p)

    p = sub.add_parser("quickstart", parents=[_common()], help="the embedded default: train, score, print the leaderboard")
    p.add_argument("--preset", default="quick", help="tiny | quick | paper-small | paper-large | long (default: quick)")
    p.add_argument("--seeds", default="0",
                   help="comma-separated training seeds (default: 0; the reference board runs 0,1,2)")
    p.add_argument("--add-mixers", default="",
                   help="comma-separated models scored beside the quickstart's mixers, e.g. a hybrid (quote it: "
                        "\"hybrid:deltanet*3+attention\"); the reference board adds one (docs/hybrids.md)")
    p.add_argument("--workers", type=int, default=None,
                   help="models trained and scored side by side, one thread each (default: one per core on the CPU; "
                        "1: one after another in this process); timings are made alone afterwards")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _gate_args(p)
    _suite_commands(sub, suite_commands)
    _no_abbreviations(parser)
    return parser


def refuse_unknown_command(parser: argparse.ArgumentParser, command: str) -> None:
    """A mistyped command in one line with the closest name (argparse prints its usage and every name)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if command in sub.choices:
        return
    close = difflib.get_close_matches(command, list(sub.choices), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"the commands are {', '.join(sub.choices)}."
    raise MixbenchError(f"unknown command '{command}'; {hint} (`mixbench --help` says what each does)")


def _gate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-gate", action="store_true",
                   help="score mixers that fail the conformance gate (for debugging; recorded in every result)")


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Refuse prefixes of options on every (sub)parser: `--check` must not silently mean `--checkpoint`."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _no_abbreviations(child)


def _suite_commands(sub, index: list[list[str]] | None = None) -> None:
    """Subcommands that suites declare (:attr:`harness.suite.Suite.commands`), e.g. the judge's ``mixbench judge``;
    with ``index``, only their names and help (stand-ins that are never run)."""
    taken = set(sub.choices)
    if index is not None:
        for name, help_text in index:
            if name not in taken:
                sub.add_parser(name, help=help_text, add_help=False)
        return
    from harness.registry import SUITES

    for entry in SUITES.entries():
        for command in entry.cls.commands:
            if command.name in taken:
                raise MixbenchError(
                    f"suite '{entry.name}' ({entry.source}) declares the command '{command.name}', which already "
                    "exists; rename the suite's command."
                )
            taken.add(command.name)
            p = sub.add_parser(command.name, parents=[_common()], help=command.help)
            command.configure(p)
            _usual_help(p)
            p.set_defaults(suite_command=command.run)


#: what the usual options of a suite's own subcommand do, for those it declares without help text
_USUAL_HELP = {
    "--no-progress": "no progress bars",
    "--device": "cpu or cuda (default: cuda when available)",
    "--force": "redo runs the store already holds",
    "--checkpoint": "checkpoint folder (written by `mixbench train`)",
    "--batch-size": "batch size (default: the suite's)",
}


def _usual_help(p: argparse.ArgumentParser) -> None:
    """Fill in :data:`_USUAL_HELP` where a suite's option has no help: `--help` says what every option does (the
    text is here, not in the suites, whose source is part of their runs' identity)."""
    for action in p._actions:
        if not action.help:
            action.help = next((_USUAL_HELP[o] for o in action.option_strings if o in _USUAL_HELP), None)


def suite_command_index(plugins: list[str]) -> list[list[str]]:
    """[name, help] of every suite's subcommand, from the listing cache (:mod:`harness.reporting.listings`)."""
    from harness.reporting.listings import cached

    def compute() -> list[list[str]]:
        from harness.registry import SUITES

        return [[c.name, c.help] for e in SUITES.entries() for c in e.cls.commands]

    return cached("suite-commands", plugins, compute)


def suite_command_help(name: str, plugins: list[str]) -> str:
    """``mixbench NAME --help`` for a suite's subcommand, from the listing cache: building its parser imports the
    suite (and torch), which a request for help should not wait for."""
    from harness.reporting.listings import cached

    def compute() -> str:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return sub.choices[name].format_help()

    return cached(f"help-{name}", plugins, compute)


def positive_int(text: str) -> int:
    """argparse ``type=`` for sizes: ``--context 0`` or ``-5`` is refused instead of meaning the default."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}; omit it for the preset's value")
    return value


def _backbone_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backbone", nargs="*", default=[], metavar="KEY=VALUE",
                   help="backbone overrides on the preset's, e.g. n_layers=4 or residual_gates=all (docs/protocol.md;"
                        " a hybrid's depth is a multiple of its period, docs/hybrids.md)")


# ---------------------------------------------------------------------------------------------- reading values


def csv_items(value: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: a comma-separated option's items, blanks dropped."""
    return [v.strip() for v in value.split(",") if v.strip()]


def _given(args: argparse.Namespace, fields: dict[str, str]) -> dict:
    """Config field -> the value of its option, for the options the user gave (not None)."""
    return {field: getattr(args, option) for field, option in fields.items() if getattr(args, option) is not None}


def data_overrides(args: argparse.Namespace) -> dict:
    return _given(args, {"source": "data", "text_field": "text_field", "vocab_size": "vocab_size",
                         "tokenizer_file": "tokenizer_file", "max_train_docs": "max_train_docs",
                         "skip_bad_rows": "skip_bad_rows"})


def train_overrides(args: argparse.Namespace) -> dict:
    return _given(args, {"token_budget": "tokens", "batch_size": "batch_size", "lr": "lr",
                         "eval_every": "eval_every", "checkpoint_every": "checkpoint_every"})


def backbone_overrides(args: argparse.Namespace) -> dict:
    """``--backbone KEY=VALUE`` and ``--context N`` (which wins) as backbone overrides (typed by the config)."""
    from harness.model.specs import parse_assignments

    values = parse_assignments(getattr(args, "backbone", None))
    if getattr(args, "context", None):
        values["context"] = args.context
    return values


def suite_overrides(items: list[str], suites: list[str]) -> dict[str, dict]:
    """``--suite-config SUITE.KEY=VALUE ...`` as {suite: {key: value}}; a bare ``KEY=VALUE`` belongs to the one
    suite of ``--suites`` (with several, it must name its suite)."""
    from harness.model.specs import parse_assignments

    out: dict[str, dict] = {}
    for item in items:
        key = item.split("=", 1)[0]
        suite, dot, _ = key.partition(".")
        if not dot:
            if len(suites) != 1:
                raise MixbenchError(f"--suite-config {item}: name the suite (SUITE.{key}=...) since --suites runs "
                                    f"{', '.join(suites)}.")
            suite, item = suites[0], item
        else:
            item = item[len(suite) + 1:]
        if suite not in suites:
            raise MixbenchError(f"--suite-config {suite}.{item}: suite '{suite}' is not among --suites "
                                f"({', '.join(suites)}).")
        out.setdefault(suite, {}).update(parse_assignments([item]))
    return out
