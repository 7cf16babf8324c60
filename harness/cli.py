"""The ``mixbench`` command line (docs/DESIGN.md §8).

User mistakes surface as :class:`MixbenchError`: one line on stderr, exit status 2, nothing written.
Exit status 1 means a gate failed (``check``); 0 means success.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings
from pathlib import Path

from harness.model.devices import resolve_device
from harness.errors import MixbenchError
from harness.cli_parser import (
    backbone_overrides, build_parser, csv_items, data_overrides, refuse_unknown_command, suite_command_help,
    suite_command_index, suite_overrides, train_overrides,
)


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


def cmd_mixers(args: argparse.Namespace) -> int:
    from harness.reporting.listings import cached, list_mixers, printed

    if args.table is not None:
        from harness.config import get_preset
        from harness.reporting import mixer_table

        get_preset(args.table)  # an unknown preset is refused before it names a cache file
        # building every mixer takes 15-20 s: cached like the listings, under the fingerprint of the mixers'
        # code and the installed packages (their kernels change the defaults)
        print(cached(f"mixer-table-{args.table}", args.plugin, lambda: mixer_table.table_text(args.table)), end="")
        return 0

    print(cached(f"mixers-{args.config or ''}", args.plugin, printed(lambda: list_mixers(args.config))), end="")
    return 0


def cmd_suites(args: argparse.Namespace) -> int:
    from harness.reporting.listings import cached, list_suites, printed

    print(cached(f"suites-{','.join(args.names)}", args.plugin, printed(lambda: list_suites(args.names))), end="")
    return 0


def _check_output_file(path: Path, option: str) -> None:
    """A file we are about to write: not a folder, in a folder that exists."""
    if path.is_dir():
        raise MixbenchError(f"{option} {path} is a folder; give a file name, e.g. {path / 'leaderboard.md'}.")
    if not path.parent.is_dir():
        raise MixbenchError(f"{option} {path}: the folder {path.parent} does not exist; create it or pick another path.")


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
    overrides = coerce_values(BackboneConfig, backbone_overrides(args), "backbone")
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

    backbone = backbone_overrides(args)
    spec = make_run_spec(
        args.mixer, args.preset, parse_assignments(args.mixer_config), backbone,
        {**train_overrides(args), "seed": args.seed}, data_overrides(args), match=args.match,
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
        train_overrides=train_overrides(args) if hasattr(args, "tokens") else {},
        data_overrides=data_overrides(args) if hasattr(args, "data") else {},
        backbone_overrides=backbone_overrides(args),
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
    if args.mixer_config and len(csv_items(args.mixers)) != 1:
        raise MixbenchError("--mixer-config applies to one mixer; pass a single name with --mixers.")
    try:
        seeds = [int(s) for s in csv_items(args.seeds)]
    except ValueError:
        raise MixbenchError(f"--seeds takes comma-separated integers, got '{args.seeds}'.") from None
    controls = [] if args.no_controls else (None if args.controls is None else csv_items(args.controls))
    suites = csv_items(args.suites)
    return _run_grid(args, csv_items(args.mixers), suites, seeds, suite_overrides=suite_overrides(args.suite_config, suites),
                     controls=controls)


def cmd_show(args: argparse.Namespace) -> int:
    from harness.store.results import ResultsStore
    from harness.reporting.run_report import show_text

    print(show_text(ResultsStore(args.results), args.run_id))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.store.results import ResultsStore
    from harness.reporting.run_report import compare_text

    print(compare_text(ResultsStore(args.results), args.a, args.b, csv_items(args.suites) if args.suites else None, args.all))
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from harness.reporting.leaderboard import leaderboard_text

    if args.output:
        _check_output_file(Path(args.output), "--output")
    view = "suite" if args.suite else ("full" if args.all else "compact")
    text = leaderboard_text(args.results, args.format, view, args.suite, csv_items(args.suites) if args.suites else None,
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
        seeds = [int(s) for s in csv_items(args.seeds)]
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
    mixers += [m for m in csv_items(args.add_mixers) if m not in mixers]
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

    mixers = csv_items(args.mixers) if args.mixers is not None else quickstart_mixers()
    controls = [] if args.no_controls else resolve_controls(None if args.controls is None else csv_items(args.controls))
    mixers = [*mixers, *(c for c in controls if c not in mixers)]
    if args.mixer_config and len(mixers) != 1:
        raise MixbenchError("--mixer-config applies to one mixer; pass a single name with --mixers and --no-controls.")
    grid = {}
    for key, raw in parse_assignments(args.grid).items():
        values = csv_items(raw)
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
            refuse_unknown_command(parser, command)
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
