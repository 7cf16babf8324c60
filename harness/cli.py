"""The ``mixbench`` command line (docs/DESIGN.md §8).

User mistakes surface as :class:`MixbenchError`: one line on stderr, exit status 2, nothing written.
Exit status 1 means a gate failed (``check``); 0 means success.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
import warnings
from pathlib import Path

from harness.model.devices import resolve_device
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
    p.add_argument("--context", type=_positive_int, default=None, help="training context length (default: the preset's)")
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
    p.add_argument("--seeds", type=_positive_int, default=3,
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


def _refuse_unknown_command(parser: argparse.ArgumentParser, command: str) -> None:
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


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings of mixbench's own (a corrupt run skipped, a plot left out) as one line, without a source path;
    other packages' warnings keep their form."""
    if issubclass(category, UserWarning) and "/harness/" in str(filename).replace("\\", "/"):
        print(f"mixbench: warning: {message}", file=file or sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _plugins_in(argv: list[str]) -> list[str]:
    """``--plugin`` values, read before the parser is built so plugin suites can add their commands."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            found.append(arg.split("=", 1)[1])
    return found


_device = resolve_device


def _positive_int(text: str) -> int:
    """argparse ``type=`` for sizes: ``--context 0`` or ``-5`` is refused instead of meaning the default."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}; omit it for the preset's value")
    return value


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _data_overrides(args: argparse.Namespace) -> dict:
    pairs = {
        "source": args.data,
        "text_field": args.text_field,
        "vocab_size": args.vocab_size,
        "tokenizer_file": args.tokenizer_file,
        "max_train_docs": args.max_train_docs,
        "skip_bad_rows": args.skip_bad_rows,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def _train_overrides(args: argparse.Namespace) -> dict:
    pairs = {
        "token_budget": args.tokens,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "eval_every": args.eval_every,
        "checkpoint_every": args.checkpoint_every,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def cmd_mixers(args: argparse.Namespace) -> int:
    from harness.reporting.listings import cached, printed

    if args.table is not None:
        from harness.config import get_preset
        from harness.reporting import mixer_table

        get_preset(args.table)  # an unknown preset is refused before it names a cache file
        # building every mixer takes 15-20 s: cached like the listings, under the fingerprint of the mixers'
        # code and the installed packages (their kernels change the defaults)
        print(cached(f"mixer-table-{args.table}", args.plugin, lambda: mixer_table.table_text(args.table)), end="")
        return 0

    print(cached(f"mixers-{args.config or ''}", args.plugin, printed(lambda: _list_mixers(args))), end="")
    return 0


def _list_mixers(args: argparse.Namespace) -> None:
    from harness.registry import MIXERS
    from harness.values import describe_fields

    if args.config is not None:
        entry = MIXERS.get(args.config)
        print(f"{entry.name} config (--mixer-config KEY=VALUE, or mixers: {{{entry.name}: {{...}}}} in a plan):")
        print("\n".join(describe_fields(entry.config_cls)))
        return
    entries = MIXERS.entries()
    for entry in [e for e in entries if not e.cls.control]:
        _describe_mixer(entry)
    for pattern, description in MIXERS.patterns.items():
        print(f"{pattern}\n  {description}")
    controls = [e for e in entries if e.cls.control]
    if controls:
        print("\ncontrols (trained and scored beside the mixers of every grid, never ranked; docs/controls.md):")
    for entry in controls:
        _describe_mixer(entry)


def _describe_mixer(entry) -> None:
    import dataclasses

    from harness.store.provenance import package_versions

    fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(entry.config_cls))
    kind = " (control: context-free)" if entry.cls.context_free else (" (control)" if entry.cls.control else "")
    print(f"{entry.name}{kind}")
    if entry.cls.control and entry.cls.__doc__:
        print(f"  what it is:   {' '.join(entry.cls.__doc__.split())}")
    print(f"  kernels:      {', '.join(entry.cls.kernels)} (reference: {entry.cls.kernels[0]})")
    print(f"  capabilities: {', '.join(entry.cls.capabilities())}")
    print(f"  config:       {fields or '(none)'}")
    if getattr(entry.cls, "paper", ""):
        print(f"  paper:        {entry.cls.paper}")
    versions = package_versions(tuple(getattr(entry.cls, "packages", ())))
    if versions:
        print(f"  packages:     {', '.join(f'{name} {version}' for name, version in versions.items())}")
    print(f"  source:       {entry.source}")


def cmd_suites(args: argparse.Namespace) -> int:
    from harness.reporting.listings import cached, printed

    print(cached(f"suites-{','.join(args.names)}", args.plugin, printed(lambda: _list_suites(args))), end="")
    return 0


def _list_suites(args: argparse.Namespace) -> None:
    from harness.registry import SUITES
    from harness.values import describe_fields

    for i, name in enumerate(args.names or SUITES.names()):
        entry = SUITES.get(name)
        doc = (entry.cls.__doc__ or sys.modules[entry.cls.__module__].__doc__ or "").strip().split("\n\n")[0]
        print(("\n" if i else "") + f"{entry.name}  ({entry.source}; scope {entry.cls.scope})")
        if doc:
            print(f"  {' '.join(doc.split())}")
        print("\n".join(describe_fields(entry.config_cls)))
    print("\nset fields with --suite-config KEY=VALUE (lists: a,b,c) or suites: {NAME: {KEY: VALUE}} in a plan.")


def _check_output_file(path: Path, option: str) -> None:
    """A file we are about to write: not a folder, in a folder that exists."""
    if path.is_dir():
        raise MixbenchError(f"{option} {path} is a folder; give a file name, e.g. {path / 'leaderboard.md'}.")
    if not path.parent.is_dir():
        raise MixbenchError(f"{option} {path}: the folder {path.parent} does not exist; create it or pick another path.")


def _backbone_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backbone", nargs="*", default=[], metavar="KEY=VALUE",
                   help="backbone overrides on the preset's, e.g. n_layers=4 or residual_gates=all (docs/protocol.md;"
                        " a hybrid's depth is a multiple of its period, docs/hybrids.md)")


def _backbone_overrides(args: argparse.Namespace) -> dict:
    """``--backbone KEY=VALUE`` and ``--context N`` (which wins) as backbone overrides (typed by the config)."""
    from harness.model.specs import parse_assignments

    values = parse_assignments(getattr(args, "backbone", None))
    if getattr(args, "context", None):
        values["context"] = args.context
    return values


def cmd_check(args: argparse.Namespace) -> int:
    from harness.config import BackboneConfig, ModelSpec, get_preset
    from harness.model.conformance import GateConfig, run_checks
    from harness.model.gate import store_verdict
    from harness.model.specs import parse_assignments
    from harness.registry import MIXERS
    from harness.values import build_config, coerce_values

    config = parse_assignments(args.mixer_config)
    MIXERS.get(args.mixer).make_config(config)
    gate = {"lengths": args.lengths, "batch_sizes": args.batch_sizes, "tolerance": args.tolerance}
    gate_config = build_config(GateConfig, {k: v for k, v in gate.items() if v is not None}, "check")
    preset = get_preset(args.preset)
    overrides = coerce_values(BackboneConfig, _backbone_overrides(args), "backbone")
    spec = ModelSpec(args.mixer, config, BackboneConfig(**{"vocab_size": preset.vocab_size, **preset.backbone,
                                                           **overrides}))
    device = _device(args.device)
    t0 = time.perf_counter()
    report = run_checks(args.mixer, args.preset, config, gate_config, backbone=spec.backbone, device=device)
    store_verdict(spec, device, gate_config, report, time.perf_counter() - t0)
    print(report.render())
    print(f"verdict cached: eval and run at preset {args.preset} with this mixer config reuse it.")
    return 0 if report.passed else 1


def cmd_train(args: argparse.Namespace) -> int:
    from harness.corpus.data import load_corpus
    from harness.model.specs import bind_vocab, make_run_spec, parse_assignments
    from harness.running.training import train

    backbone = _backbone_overrides(args)
    spec = make_run_spec(
        args.mixer, args.preset, parse_assignments(args.mixer_config), backbone,
        {**_train_overrides(args), "seed": args.seed}, _data_overrides(args), match=args.match,
    )
    device = _device(args.device)
    from harness.model.memory import check_training

    check_training(spec.model.backbone, spec.train.batch_size, device, f"training {args.mixer}")
    from harness.running.training_time import check_training_time, training_label

    check_training_time(spec, device, args.yes, training_label(spec))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MixbenchError(f"--out {out} is a file; pass a folder for the checkpoint.")
    from harness.running.distributed import main_first, session

    with session(device) as (dist, device):  # under torchrun: join the process group, DDP over the ranks
        main_rank = dist is None or dist.is_main
        with main_first(dist):  # rank 0 fills the tokenizer and token caches, then the other ranks read them
            corpus = load_corpus(spec.data, progress=not args.no_progress and main_rank)
        spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
        result = train(
            spec, out, corpus, device=device, kernel=args.kernel, progress=not args.no_progress, force=args.force,
            dist=dist,
        )
    if not main_rank:
        return 0
    if result.skipped:
        print(f"{out} already holds the finished run (step {result.steps}); nothing to do (--force retrains).")
    else:
        val = f", validation loss {result.val_loss:.4f}" if result.val_loss is not None else ""
        print(
            f"trained {spec.model.mixer} for {result.steps} steps in {result.seconds:.1f} s "
            f"({result.tokens_per_s:,.0f} tokens/s): final loss {result.final_loss:.4f}{val}; checkpoint {result.checkpoint}"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from harness.running.evaluate import EvalOptions, evaluate
    from harness.running.planned import PlannedRun
    from harness.store.results import ResultsStore
    from harness.model.specs import parse_assignments

    given = [name for name in ("checkpoint", "mixer", "hf_model") if getattr(args, name) is not None]
    if len(given) != 1:
        raise MixbenchError("eval needs one of --checkpoint DIR, --hf-model PATH_OR_NAME (a transformers model), or "
                            "--mixer NAME for a suite that trains its own models.")
    if args.hf_model is None and (args.revision or args.trust_remote_code or args.data):
        raise MixbenchError("--revision, --trust-remote-code and --data go with --hf-model (a checkpoint names its "
                            "own data).")
    run = PlannedRun.make(args.suite, parse_assignments(args.suite_config), device=_device(args.device))
    store = ResultsStore(args.results)
    options = EvalOptions(kernel=args.kernel, force=args.force, progress=not args.no_progress, skip_gate=args.skip_gate)
    if args.hf_model is not None:
        from harness.config import DataConfig
        from harness.running.external_eval import evaluate_external

        data = DataConfig(source=args.data) if args.data else None
        outcome = evaluate_external(args.hf_model, run, store, options, revision=args.revision, data=data,
                                    trust_remote_code=args.trust_remote_code)
    else:
        outcome = evaluate(args.checkpoint, run, store, options,
                           mixer=args.mixer, mixer_config=parse_assignments(args.mixer_config), preset=args.preset)
    if outcome.skipped:
        print(f"run {outcome.run_id} ({args.suite}) is already in {args.results}; nothing to do (--force reruns).")
    else:
        print(f"run {outcome.run_id} ({args.suite}) written to {args.results} in {outcome.seconds:.1f} s")
    return 0  # its metrics follow, as after every command that scores (harness.reporting.scored)


def cmd_export(args: argparse.Namespace) -> int:
    from harness.hf.export import export_checkpoint, push_to_hub
    from harness.store.results import ResultsStore

    from harness.store.output_folder import Keep

    store = ResultsStore(args.results)
    keep = [Keep(store.local_path, f"the results store {args.results}")] if store.local_path else []
    results = None if args.no_card_results else store
    done = export_checkpoint(args.checkpoint, args.out, results=results, force=args.force, keep=keep)
    card = f"{done.runs_in_card} run(s) of {args.results} in its model card" if results else "no results in its card"
    print(f"exported {args.checkpoint} to {done.folder} ({done.parameters:,} parameters; {card}): "
          f"{', '.join(done.files)}")
    print(f"load it with AutoModelForCausalLM.from_pretrained({str(done.folder)!r}, trust_remote_code=True)")
    if args.push_to_hub:
        print(f"uploaded to {push_to_hub(done.folder, args.push_to_hub, args.private)}")
    return 0


def _run_grid(
    args: argparse.Namespace, mixers: list[str], suites: list[str], seeds: list[int],
    suite_overrides: dict[str, dict] | None = None, keep_going: bool = False, controls: list[str] | None = None,
    budget_suites: dict[float, list[str]] | None = None,
) -> int:
    """Train and score one grid; ``budget_suites`` (fraction of the token budget -> suites) adds the same grid at
    smaller budgets, scored only by those suites (the quickstart's, :func:`harness.running.quickstart.quickstart_budgets`)."""
    from harness.store.results import ResultsStore
    from harness.model.specs import parse_assignments
    from harness.config import get_preset
    from harness.running.runner import GridRequest, JobOptions, run_requests

    req = GridRequest(
        preset=args.preset,
        mixers=mixers,
        suites=suites,
        seeds=seeds,
        mixer_configs={m: parse_assignments(getattr(args, "mixer_config", [])) for m in mixers}
        if len(mixers) == 1 else {},
        train_overrides=_train_overrides(args) if hasattr(args, "tokens") else {},
        data_overrides=_data_overrides(args) if hasattr(args, "data") else {},
        backbone_overrides=_backbone_overrides(args),
        suite_overrides=suite_overrides or {},
        options=JobOptions(device=_device(args.device), kernel=getattr(args, "kernel", None),
                           force=getattr(args, "force", False), progress=not args.no_progress,
                           skip_gate=getattr(args, "skip_gate", False), yes=getattr(args, "yes", False)),
        controls=controls,
        match=getattr(args, "match", None),
    )
    budget = req.train_overrides.get("token_budget") or get_preset(args.preset).train["token_budget"]
    reqs = [req, *(dataclasses.replace(req, suites=names,
                                       train_overrides={**req.train_overrides, "token_budget": int(f * int(budget))})
                   for f, names in (budget_suites or {}).items())]
    store = ResultsStore(args.results)
    from harness.running.plan_commands import executor_from_args

    with executor_from_args(args) as executor:
        timer = run_requests(reqs, store, executor, keep_going=getattr(args, "keep_going", keep_going))
    print(timer.render())
    return 1 if timer.failures else 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.plan is not None:
        from harness.running.plan_commands import check_no_grid_flags, cmd_run_plan

        check_no_grid_flags(args, build_parser().parse_args(["run"]))
        return cmd_run_plan(args)
    if args.mixers is None:
        from harness.running.quickstart import quickstart_mixers

        args.mixers = ",".join(quickstart_mixers())
    if args.mixer_config and len(_csv(args.mixers)) != 1:
        raise MixbenchError("--mixer-config applies to one mixer; pass a single name with --mixers.")
    try:
        seeds = [int(s) for s in _csv(args.seeds)]
    except ValueError:
        raise MixbenchError(f"--seeds takes comma-separated integers, got '{args.seeds}'.") from None
    controls = [] if args.no_controls else (None if args.controls is None else _csv(args.controls))
    suites = _csv(args.suites)
    return _run_grid(args, _csv(args.mixers), suites, seeds, suite_overrides=_suite_overrides(args.suite_config, suites),
                     controls=controls)


def _suite_overrides(items: list[str], suites: list[str]) -> dict[str, dict]:
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


def cmd_show(args: argparse.Namespace) -> int:
    from harness.store.results import ResultsStore
    from harness.reporting.run_report import show_text

    print(show_text(ResultsStore(args.results), args.run_id))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.store.results import ResultsStore
    from harness.reporting.run_report import compare_text

    print(compare_text(ResultsStore(args.results), args.a, args.b, _csv(args.suites) if args.suites else None, args.all))
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from harness.reporting.leaderboard import leaderboard_text

    if args.output:
        _check_output_file(Path(args.output), "--output")
    view = "suite" if args.suite else ("full" if args.all else "compact")
    text = leaderboard_text(args.results, args.format, view, args.suite, _csv(args.suites) if args.suites else None,
                            args.all_configs, args.all_versions, args.all_budgets)
    if args.output:
        Path(args.output).write_text(text)
        print(f"leaderboard written to {args.output}")
    else:
        print(text)
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    from harness.running.plan_commands import cmd_nightly as run_nightly

    return run_nightly(args)


def cmd_publish(args: argparse.Namespace) -> int:
    from harness.reporting.publish import publish_site
    from harness.store.results import ResultsStore

    site = publish_site(ResultsStore(args.results), Path(args.out), force=args.force)
    print(f"site written to {site}; open {site / 'index.html'}")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from harness.reporting.leaderboard import leaderboard_text
    from harness.running.quickstart import quickstart_budgets, quickstart_mixers, quickstart_suites

    suites = quickstart_suites()
    try:
        seeds = [int(s) for s in _csv(args.seeds)]
    except ValueError:
        raise MixbenchError(f"--seeds takes comma-separated integers, got '{args.seeds}'.") from None
    if not seeds:
        raise MixbenchError("--seeds lists no seed; give e.g. --seeds 0 or --seeds 0,1,2.")
    if args.workers is not None and (isinstance(args.workers, bool) or args.workers < 1):
        raise MixbenchError(f"--workers must be a positive integer, got {args.workers}.")
    # on a CPU, small models train faster side by side on one thread each than one at a time on every core
    # (docs/ARCHITECTURE.md, "Quickstart"); a GPU runs them one at a time
    side_by_side = args.workers != 1 and _device(args.device) == "cpu" and (os.cpu_count() or 1) > 1
    args.executor = "process" if side_by_side else "local"
    args.workers = args.workers if side_by_side else None
    count = "one training seed" if len(seeds) == 1 else f"{len(seeds)} training seeds"
    print(f"mixbench quickstart: {count} per model ({','.join(map(str, seeds))}); "
          + ("a difference smaller than the seed spread is not claimed, and the reference board "
             "(`make reference-board`) runs 3 seeds" if len(seeds) == 1
             else "ties and vetoes count the spread between them"),
          flush=True)
    # a failure of one mixer or suite must not cost the rest of the board: it is listed, and the exit code is 1
    mixers = quickstart_mixers()
    mixers += [m for m in _csv(args.add_mixers) if m not in mixers]
    code = _run_grid(args, mixers, list(suites), seeds, suites, keep_going=True,
                     budget_suites=quickstart_budgets())
    from harness.reporting.scored import report_noted

    print("\n" + report_noted())  # the runs' numbers now, so that the board it exists to show comes last
    print()
    print(leaderboard_text(args.results, "md"))
    return code


def cmd_tune(args: argparse.Namespace) -> int:
    from harness.model.specs import parse_assignments
    from harness.registry import resolve_controls
    from harness.running.quickstart import quickstart_mixers
    from harness.running.tune import DEFAULT_GRID, TuneRequest, tune
    from harness.store.results import ResultsStore
    from harness.values import coerce_values

    mixers = _csv(args.mixers) if args.mixers is not None else quickstart_mixers()
    controls = [] if args.no_controls else resolve_controls(None if args.controls is None else _csv(args.controls))
    mixers = [*mixers, *(c for c in controls if c not in mixers)]
    if args.mixer_config and len(mixers) != 1:
        raise MixbenchError("--mixer-config applies to one mixer; pass a single name with --mixers and --no-controls.")
    grid = {}
    for key, raw in parse_assignments(args.grid).items():
        values = _csv(raw)
        if not values:
            raise MixbenchError(f"--grid {key}= lists no values; write e.g. {key}=0.001,0.002.")
        from harness.config import TrainConfig

        grid[key] = tuple(coerce_values(TrainConfig, {key: v}, "tune grid")[key] for v in values)
    req = TuneRequest(
        preset=args.preset, mixers=tuple(mixers), grid=grid or dict(DEFAULT_GRID), seeds=args.seeds,
        extend=args.extend, out=Path(args.out),
        mixer_configs={mixers[0]: parse_assignments(args.mixer_config)} if args.mixer_config else {},
        backbone_overrides=parse_assignments(args.backbone),
        train_overrides={k: v for k, v in {"token_budget": args.tokens, "batch_size": args.batch_size}.items()
                         if v is not None},
        data_overrides={k: v for k, v in {"source": args.data, "vocab_size": args.vocab_size,
                                          "max_train_docs": args.max_train_docs}.items() if v is not None},
        match=args.match, device=_device(args.device), progress=not args.no_progress, skip_gate=args.skip_gate,
        split=args.split, yes=args.yes,
    )
    points = 1
    for values in req.grid.values():
        points *= len(values)
    print(f"tuning {len(mixers)} model(s) at preset {args.preset} on validation: {points} grid point(s) each (more "
          f"where a best value sits at the grid's end), then {args.seeds - 1} more seed(s) of each choice",
          file=sys.stderr, flush=True)
    report = tune(req, ResultsStore(args.results))
    print(report.render())
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from harness.registry import TARGETS
    from harness.running.reproduce import (
        REPRODUCED, parse_subject_swaps, planned_steps, render_listing, render_result, run_target, save_record,
        verdict_note,
    )
    from harness.store.results import ResultsStore

    if args.list:
        print(render_listing(TARGETS.entries(), args.scale))
        return 0
    device = args.device
    if args.plan:
        from harness.running.reproduce import load_reproduce_plan

        plan = load_reproduce_plan(args.plan)
        names = list(plan.targets_at(args.scale))
        names += [t for t in args.targets if t not in names]
        for skipped in (t for t in plan.skips.get(args.scale, ()) if t not in names):
            print(f"[mixbench] {skipped}: left to another scale by {args.plan} at scale {args.scale} (its protocol "
                  "does not fit this scale's budget; name it to run it anyway)", file=sys.stderr)
        device = device or plan.devices.get(args.scale)
    else:
        names = TARGETS.names() if args.all else list(args.targets)
    if not names:
        raise MixbenchError("reproduce needs target names, --all, --plan or --list; `mixbench reproduce --list` "
                            "shows them.")
    device = _device(device)
    targets = [TARGETS.get(n) for n in names]
    targets = [entry.cls(entry.make_config()) for entry in targets]
    if args.subject:
        swaps = parse_subject_swaps(args.subject)
        targets = [t.with_subjects({r: s for r, s in swaps.items() if r in t.subjects}) for t in targets]
        unused = [r for r in swaps if not any(r in t.subjects for t in targets)]
        if unused:
            raise MixbenchError(f"reproduce --subject: no target asked for has the role {', '.join(unused)}; "
                                "`mixbench reproduce --list` shows each target's roles.")
    negatives = args.negatives or bool(args.plan)
    for target in targets:  # every name, mixer and suite config is checked before any work
        planned_steps(target, args.scale, device, negatives)
    store = ResultsStore(args.results)
    results = []
    for target in targets:
        result = run_target(target, args.scale, store, device, progress=not args.no_progress, force=args.force,
                            negatives=negatives)
        save_record(store, target, result)
        print(render_result(result), flush=True)
        results.append(result)
    if len(results) > 1:
        print("\n" + "\n".join(f"{r.name:<28} {r.verdict}" + (f" ({note})" if (note := verdict_note(r.scale)) else "")
                                for r in results))
    return 0 if all(r.verdict == REPRODUCED for r in results) else 1


COMMANDS = {
    "mixers": cmd_mixers,
    "reproduce": cmd_reproduce,
    "suites": cmd_suites,
    "check": cmd_check,
    "show": cmd_show,
    "compare": cmd_compare,
    "train": cmd_train,
    "eval": cmd_eval,
    "export": cmd_export,
    "run": cmd_run,
    "leaderboard": cmd_leaderboard,
    "publish": cmd_publish,
    "quickstart": cmd_quickstart,
    "tune": cmd_tune,
    "nightly": cmd_nightly,
}


#: commands that only read the store: every other command given --results writes runs into it
READ_ONLY = ("leaderboard", "publish")


def _refuse_a_store_that_ends_with_the_process(args: argparse.Namespace) -> None:
    """A ``memory://`` store lives in this process: a command that writes runs into it would report success and
    lose them when it exits."""
    results = str(getattr(args, "results", "") or "")
    if results.startswith("memory://") and args.command not in READ_ONLY:
        raise MixbenchError(
            f"--results {results} is a store in this process's memory: what `mixbench {args.command}` writes there "
            "is gone when the command ends; pass a folder or a shared URL (file://, s3://, ...)."
        )


def main(argv: list[str] | None = None) -> int:
    with warnings.catch_warnings():  # one-line warnings for the command's duration only
        warnings.showwarning = _one_line_warning
        return _main(list(sys.argv[1:] if argv is None else argv))


#: commands that print what the listing cache holds: they never need torch
LISTINGS = ("mixers", "suites")


def _main(argv: list[str]) -> int:
    from harness.registry import load_plugins

    try:
        plugins = _plugins_in(argv)
        load_plugins(plugins)
        index = suite_command_index(plugins)
        command = next((a for a in argv if not a.startswith("-")), None)  # the top level takes no valued option
        runs_a_suite_command = command in {name for name, _ in index}
        if runs_a_suite_command and {"-h", "--help"} & set(argv):
            print(suite_command_help(command, plugins), end="")
            return 0
        parser = build_parser(None if runs_a_suite_command else index)
        if argv and argv[0] == command:
            _refuse_unknown_command(parser, command)
        args = parser.parse_args(argv)
    except MixbenchError as exc:
        print(f"mixbench: error: {exc}", file=sys.stderr)
        return 2
    if args.command not in LISTINGS:
        import torch

        # Decaying states (ProtoT's sums, SSM states) pass through denormal floats, which x86 computes ~100x
        # slower; flushing them to zero changes no result above 1e-38.
        torch.set_flush_denormal(True)
    try:
        _refuse_a_store_that_ends_with_the_process(args)
        return _run_command(args)
    except MixbenchError as exc:
        print(f"mixbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mixbench: interrupted; finished work is kept and the next run resumes it.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mixbench leaderboard | head`: the reader left; say nothing more, like other tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


#: commands whose report ends with the compact board of the rows they trained or scored
BOARD_AFTER = ("run", "nightly")


def _run_command(args: argparse.Namespace) -> int:
    """Run the command; one that scored or found runs then ends with their numbers, the same table for every
    command, suites' own included (:mod:`harness.reporting.scored`)."""
    from harness.reporting.scored import ScoredRuns

    with ScoredRuns() as scored:
        handler = getattr(args, "suite_command", None) or COMMANDS[args.command]
        code = handler(args)
        try:
            report = scored.report(board=args.command in BOARD_AFTER)
        except Exception as exc:  # noqa: BLE001 - the runs are written: showing them must not fail the command
            print(f"mixbench: warning: the numbers of this command's runs cannot be shown ({type(exc).__name__}: "
                  f"{exc})", file=sys.stderr)
            report = ""
    if report:
        print("\n" + report)
    return code


if __name__ == "__main__":
    sys.exit(main())
