"""The ``mixbench`` command line (DESIGN §8).

User mistakes surface as :class:`MixbenchError`: one line on stderr, exit status 2, nothing written.
Exit status 1 means a gate failed (``check``); 0 means success.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.errors import MixbenchError
from harness.plan_commands import add_executor_args, add_nightly_parser
from harness.quickstart import QUICKSTART_MIXERS, QUICKSTART_SUITES


def _common(results: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE", help="import a module that registers mixers or suites (repeatable)")
    if results:
        p.add_argument("--results", default=os.environ.get("MIXBENCH_RESULTS", "results"), help="results store: a folder or an fsspec URL (default: results/)")
    return p


def _training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="quick", help="tiny | quick | paper-small | paper-large (default: quick)")
    p.add_argument("--data", default=None, help="'embedded' (default), a local file/folder, or hub:NAME")
    p.add_argument("--text-field", default=None, help="field holding the text in json/parquet data (default: text)")
    p.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (default: the preset's)")
    p.add_argument("--tokenizer-file", default=None, help="a pretrained tokenizers JSON instead of training a BPE")
    p.add_argument("--tokens", type=int, default=None, help="training token budget (default: the preset's)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--max-train-docs", type=int, default=None, help="train on at most this many documents (0 = all)")
    p.add_argument("--context", type=int, default=None, help="training context length (default: the preset's)")
    p.add_argument("--eval-every", type=int, default=None, help="steps between validation passes (0 = at the end)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between resumable snapshots (0 = at the end)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--kernel", default=None, help="force a mixer kernel (default: the fastest for the device)")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE", help="mixer config fields")
    p.add_argument("--force", action="store_true", help="redo work that already exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mixbench", description="Compare token mixers on one backbone.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("mixers", parents=[_common(False)], help="list registered mixers, kernels and capabilities")

    p = sub.add_parser("check", parents=[_common(False)], help="conformance gate for a mixer (exit 0 only if all pass)")
    p.add_argument("mixer")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--mixer-config", nargs="*", default=[], metavar="KEY=VALUE")

    p = sub.add_parser("train", parents=[_common(False)], help="train a model into a checkpoint folder")
    p.add_argument("--mixer", required=True)
    p.add_argument("--out", required=True, help="checkpoint folder (resumed if it holds a partial run)")
    p.add_argument("--seed", type=int, default=0)
    _training_args(p)

    p = sub.add_parser("eval", parents=[_common()], help="score a checkpoint with a suite")
    p.add_argument("--suite", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--suite-config", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--device", default=None)
    p.add_argument("--kernel", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--no-progress", action="store_true")

    p = sub.add_parser("run", parents=[_common()], help="train and score a grid of mixers at a preset")
    p.add_argument("--mixers", default=",".join(QUICKSTART_MIXERS), help="comma-separated mixer names")
    p.add_argument("--suites", default="perplexity", help="comma-separated suite names (default: perplexity)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    _training_args(p)
    p.add_argument("plan", nargs="?", default=None, help="a plan file (YAML) instead of the grid options")
    p.add_argument("--keep-going", action="store_true", help="run the other jobs when one fails (exit 1 at the end)")
    add_executor_args(p)
    add_nightly_parser(sub, [_common()])

    p = sub.add_parser("leaderboard", parents=[_common()], help="print the leaderboard built from the store")
    p.add_argument("--format", default="md", help="md | csv | json | html | latex")
    p.add_argument("--suites", default=None, help="only these suites (comma-separated)")
    p.add_argument("--all-metrics", action="store_true", help="every metric, not only the headline ones")
    p.add_argument("--output", default=None, help="write to this file instead of stdout")

    p = sub.add_parser("lm-eval", parents=[_common()], help="score a checkpoint with lm-eval tasks (zero/few-shot)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    p.add_argument("--include-path", default="", help="folder of task YAMLs searched before the built-in tasks")
    p.add_argument("--limit", type=float, default=None, help="examples per task: a count, or a fraction below 1")
    p.add_argument("--num-fewshot", type=int, default=None, help="few-shot examples (default: each task's own)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default=None)
    p.add_argument("--force", action="store_true")

    p = sub.add_parser("judge", parents=[_common()], help="rate the judge suite's generations pairwise with an LLM judge")
    p.add_argument("--preset", default=None, help="only this preset (default: every preset with generations)")
    p.add_argument("--judge-url", default=None, help="OpenAI-compatible base URL, e.g. http://host:8000/v1 (default: $MIXBENCH_JUDGE_URL, else the built-in local judge)")
    p.add_argument("--judge-model", default=None, help="model name at --judge-url (default: $MIXBENCH_JUDGE_MODEL)")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the judge's API key (default: MIXBENCH_JUDGE_API_KEY)")
    p.add_argument("--baseline", default=None, help="compare each mixer with this one instead of every pair")
    p.add_argument("--concurrency", type=int, default=None, help="parallel judge calls (default: 4; the local judge uses 1)")
    p.add_argument("--judge-cache", default=None, help="SQLite verdict cache (default: $MIXBENCH_CACHE/judge/verdicts.sqlite)")
    p.add_argument("--force", action="store_true", help="rewrite the rating runs (cached verdicts are still reused)")
    p.add_argument("--no-progress", action="store_true")

    p = sub.add_parser("publish", parents=[_common()], help="write the results store as a static site (leaderboard, suites, plots)")
    p.add_argument("--out", default="site", help="site folder, replaced as a whole (default: site/)")

    p = sub.add_parser("quickstart", parents=[_common()], help="the embedded default: train, score, print the leaderboard")
    p.add_argument("--preset", default="quick")
    p.add_argument("--device", default=None)
    p.add_argument("--no-progress", action="store_true")
    _suite_commands(sub)
    return parser


def _suite_commands(sub) -> None:
    """Subcommands that suites declare (:attr:`harness.suite.Suite.commands`), e.g. the judge's ``mixbench judge``."""
    from harness.registry import SUITES

    taken = set(sub.choices)
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
            p.set_defaults(suite_command=command.run)


def _plugins_in(argv: list[str]) -> list[str]:
    """``--plugin`` values, read before the parser is built so plugin suites can add their commands."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            found.append(arg.split("=", 1)[1])
    return found


def _device(requested: str | None) -> str:
    import torch

    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise MixbenchError(f"--device {requested} was requested but CUDA is not available; use --device cpu.")
    if not requested.startswith(("cpu", "cuda")):
        raise MixbenchError(f"unknown device '{requested}'; use cpu or cuda.")
    return requested


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _data_overrides(args: argparse.Namespace) -> dict:
    pairs = {
        "source": args.data,
        "text_field": args.text_field,
        "vocab_size": args.vocab_size,
        "tokenizer_file": args.tokenizer_file,
        "max_train_docs": args.max_train_docs,
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
    import dataclasses

    from harness.registry import MIXERS

    for entry in MIXERS.entries():
        fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(entry.config_cls))
        print(f"{entry.name}")
        print(f"  kernels:      {', '.join(entry.cls.kernels)} (reference: {entry.cls.kernels[0]})")
        print(f"  capabilities: {', '.join(entry.cls.capabilities())}")
        print(f"  config:       {fields or '(none)'}")
        print(f"  source:       {entry.source}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from harness.conformance import run_checks
    from harness.registry import MIXERS
    from harness.specs import parse_assignments

    MIXERS.get(args.mixer).make_config(parse_assignments(args.mixer_config))
    report = run_checks(args.mixer, args.preset, parse_assignments(args.mixer_config))
    print(report.render())
    return 0 if report.passed else 1


def cmd_train(args: argparse.Namespace) -> int:
    from harness.data import load_corpus
    from harness.specs import bind_vocab, make_run_spec, parse_assignments
    from harness.training import train

    backbone = {"context": args.context} if args.context else {}
    spec = make_run_spec(
        args.mixer, args.preset, parse_assignments(args.mixer_config), backbone,
        {**_train_overrides(args), "seed": args.seed}, _data_overrides(args),
    )
    device = _device(args.device)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise MixbenchError(f"--out {out} is a file; pass a folder for the checkpoint.")
    from harness.distributed import main_first, session

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
    from harness.evaluate import evaluate
    from harness.results import ResultsStore
    from harness.specs import parse_assignments

    store = ResultsStore(args.results)
    outcome = evaluate(
        args.checkpoint, args.suite, store, parse_assignments(args.suite_config), device=_device(args.device),
        kernel=args.kernel, force=args.force, progress=not args.no_progress,
    )
    if outcome.skipped:
        print(f"run {outcome.run_id} ({args.suite}) is already in {args.results}; nothing to do (--force reruns).")
    else:
        print(f"run {outcome.run_id} ({args.suite}) written to {args.results} in {outcome.seconds:.1f} s")
    return 0


def _run_grid(
    args: argparse.Namespace, mixers: list[str], suites: list[str], seeds: list[int],
    suite_overrides: dict[str, dict] | None = None,
) -> int:
    from harness.results import ResultsStore
    from harness.runner import GridRequest, run_grid
    from harness.specs import parse_assignments

    req = GridRequest(
        preset=args.preset,
        mixers=mixers,
        suites=suites,
        seeds=seeds,
        mixer_configs={m: parse_assignments(getattr(args, "mixer_config", [])) for m in mixers}
        if len(mixers) == 1 else {},
        train_overrides=_train_overrides(args) if hasattr(args, "tokens") else {},
        data_overrides=_data_overrides(args) if hasattr(args, "data") else {},
        backbone_overrides={"context": args.context} if getattr(args, "context", None) else {},
        suite_overrides=suite_overrides or {},
        device=_device(args.device),
        kernel=getattr(args, "kernel", None),
        force=getattr(args, "force", False),
        progress=not args.no_progress,
    )
    store = ResultsStore(args.results)
    from harness.plan_commands import executor_from_args

    with executor_from_args(args) as executor:
        timer = run_grid(req, store, executor, keep_going=getattr(args, "keep_going", False))
    print(timer.render())
    return 1 if timer.failures else 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.plan is not None:
        from harness.plan_commands import cmd_run_plan

        return cmd_run_plan(args)
    if args.mixer_config and len(_csv(args.mixers)) != 1:
        raise MixbenchError("--mixer-config applies to one mixer; pass a single name with --mixers.")
    try:
        seeds = [int(s) for s in _csv(args.seeds)]
    except ValueError:
        raise MixbenchError(f"--seeds takes comma-separated integers, got '{args.seeds}'.") from None
    return _run_grid(args, _csv(args.mixers), _csv(args.suites), seeds)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from harness.leaderboard import leaderboard_text

    text = leaderboard_text(args.results, args.format, _csv(args.suites) if args.suites else None, args.all_metrics)
    if args.output:
        Path(args.output).write_text(text)
        print(f"leaderboard written to {args.output}")
    else:
        print(text)
    return 0


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from harness.lm_eval_adapter.runner import LmEvalConfig, run_lm_eval
    from harness.results import ResultsStore

    cfg = LmEvalConfig(tuple(_csv(args.tasks)), args.include_path, args.limit, args.num_fewshot, args.batch_size)
    outcome = run_lm_eval(args.checkpoint, cfg, ResultsStore(args.results), _device(args.device), args.force)
    if outcome.skipped:
        print(f"run {outcome.run_id} (lm-eval) is already in {args.results}; nothing to do (--force reruns).")
    else:
        print(f"run {outcome.run_id} (lm-eval) written to {args.results} in {outcome.seconds:.1f} s")
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    from harness.results import ResultsStore
    from suites.judge.arena import ArenaConfig, judge_runs

    cfg = ArenaConfig.from_env(
        judge_url=args.judge_url, judge_model=args.judge_model, api_key_env=args.api_key_env,
        baseline=args.baseline, concurrency=args.concurrency, cache=args.judge_cache,
    )
    result = judge_runs(ResultsStore(args.results), cfg, args.preset, force=args.force, progress=not args.no_progress)
    print(result.render())
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    from harness.plan_commands import cmd_nightly as run_nightly

    return run_nightly(args)


def cmd_publish(args: argparse.Namespace) -> int:
    from harness.publish import publish_site
    from harness.results import ResultsStore

    site = publish_site(ResultsStore(args.results), Path(args.out))
    print(f"site written to {site}; open {site / 'index.html'}")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from harness.leaderboard import leaderboard_text
    from harness.quickstart import quickstart_suite_configs

    code = _run_grid(args, list(QUICKSTART_MIXERS), list(QUICKSTART_SUITES), [0], quickstart_suite_configs())
    print()
    print(leaderboard_text(args.results, "md", None, False))
    return code


COMMANDS = {
    "mixers": cmd_mixers,
    "check": cmd_check,
    "train": cmd_train,
    "eval": cmd_eval,
    "run": cmd_run,
    "leaderboard": cmd_leaderboard,
    "lm-eval": cmd_lm_eval,
    "judge": cmd_judge,
    "publish": cmd_publish,
    "quickstart": cmd_quickstart,
    "nightly": cmd_nightly,
}


def main(argv: list[str] | None = None) -> int:
    import torch

    from harness.registry import load_plugins

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        load_plugins(_plugins_in(argv))
        args = build_parser().parse_args(argv)
    except MixbenchError as exc:
        print(f"mixbench: error: {exc}", file=sys.stderr)
        return 2
    # Decaying states (ProtoT's sums, SSM states) pass through denormal floats, which x86 computes ~100x slower;
    # flushing them to zero changes no result above 1e-38.
    torch.set_flush_denormal(True)
    try:
        if getattr(args, "suite_command", None) is not None:
            return args.suite_command(args)
        return COMMANDS[args.command](args)
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


if __name__ == "__main__":
    sys.exit(main())
