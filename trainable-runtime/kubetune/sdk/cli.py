"""The ``kubetune`` command: run, watch and read Experiments from a shell, with kubectl's conventions.

Owns argument parsing, output formats (``-o json|yaml|wide``, ``csv`` for ``analysis``) and exit
codes; the work is done by :mod:`kubetune.sdk.client` (API calls), :mod:`kubetune.sdk.progress` (the live
table), :mod:`kubetune.sdk.analysis` (results from storage), :mod:`kubetune.sdk.tuner` (``run
module:Trainable``), :mod:`kubetune.sdk.plots` (``plot``), :mod:`kubetune.sdk.dashboard` (``dashboard``)
and :mod:`kubetune.sdk.katib_convert` (``convert katib``, no cluster). Installed as a console script by the
``kubetune`` package.

Exit codes (:data:`EXIT_CODES`): 0 success (for ``run --watch`` and ``watch``: the Experiment
succeeded); 1 the Experiment failed, or a trial failed where the command reports on trials; 2 bad
usage, a spec the API server or the operator refused, or a document ``convert`` cannot convert; 3 not
found (an Experiment, Trial or pod, or an Experiment deleted while watched); 4 the cluster cannot be used
(no kubeconfig, an unknown context, the API server unreachable or refusing the request, kubetune's CRDs not
installed); 5 the storage cannot be written (``run``: unreachable, refused, no such bucket; nothing is created); 70 an
unexpected error (a bug; ``KUBETUNE_DEBUG=1`` prints its traceback instead); 130 interrupted (the
Experiment keeps running). Every error is one line on stderr, ``error: ...``, that says what to do.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any, Sequence

import yaml

from kubetune.env import STORAGE_URI
from kubetune.resultkeys import is_multi_objective, spec_objectives
from kubetune.sdk.experiment_summary import age

OK, FAILED, USAGE, NOT_FOUND, CLUSTER, STORAGE, UNEXPECTED, INTERRUPTED = 0, 1, 2, 3, 4, 5, 70, 130
#: Exit code → what it means (the module docstring says when each is used).
EXIT_CODES = {
    OK: "success",
    FAILED: "the Experiment (or a trial) failed",
    USAGE: "bad usage, or a spec the API server or the operator refused",
    NOT_FOUND: "not found",
    CLUSTER: "the cluster cannot be used",
    STORAGE: "the storage cannot be written",
    UNEXPECTED: "an unexpected error (a bug: KUBETUNE_DEBUG=1 prints its traceback)",
    INTERRUPTED: "interrupted; the Experiment keeps running",
}


def _cluster(args: argparse.Namespace):
    """The cluster of ``--context``, checked (:meth:`kubetune.sdk.client.Cluster.check`) before any other call."""
    from kubetune.sdk.client import Cluster

    cluster = Cluster.connect(args.context, args.namespace)
    cluster.check()
    return cluster


def _print(obj: Any, output: str | None) -> None:
    if output == "json":
        print(json.dumps(obj, indent=2, sort_keys=True, default=str))
    else:
        print(yaml.safe_dump(obj, sort_keys=False).rstrip())


def _table(rows: list[list[Any]]) -> None:
    rows = [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _experiment_row(exp: dict, wide: bool) -> list:
    status = exp.get("status") or {}
    counts, best = status.get("trials") or {}, status.get("bestTrial") or {}
    row = [
        exp["metadata"]["name"],
        status.get("phase", "Pending"),
        counts.get("running", 0),
        counts.get("succeeded", 0),
        counts.get("failed", 0),
        best.get("metricValue"),
    ]
    if wide:
        metric, _ = spec_objectives(exp["spec"])
        row += [",".join(metric) if is_multi_objective(metric) else metric, best.get("name")]
    return row + [_reason(status), age(exp["metadata"].get("creationTimestamp"))]


def _reason(status: dict) -> str | None:
    """The reason of the first condition worth a look that is not ``Complete`` (``InvalidSpec``,
    ``StorageUnreachable``, ``MetricMissing``...), or None."""
    from kubetune.sdk.progress import noteworthy

    return next((c.get("reason") for c, _ in noteworthy(status.get("conditions")) if c.get("type") != "Complete"), None)


def cmd_get(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    experiments = [cluster.get(args.name)] if args.name else cluster.list()
    if args.output in ("json", "yaml"):
        _print(experiments[0] if args.name else {"items": experiments}, args.output)
        return OK
    wide = args.output == "wide"
    header = ["NAME", "PHASE", "RUNNING", "SUCCEEDED", "FAILED", "BEST"] + (["METRIC", "BEST-TRIAL"] if wide else [])
    if not experiments:
        print(f"No experiments in namespace {cluster.namespace}.", file=sys.stderr)
        return OK
    _table([header + ["REASON", "AGE"]] + [_experiment_row(e, wide) for e in experiments])
    if args.name:
        from kubetune.sdk.progress import condition_line, noteworthy

        for cond, _ in noteworthy((experiments[0].get("status") or {}).get("conditions")):
            print(condition_line(cond))
        trials = cluster.trials(experiments[0])
        if trials:
            print()
            _table(_trial_rows(trials))
    return OK


def _trial_rows(trials: list[dict]) -> list[list[Any]]:
    """The trial table of ``kubetune get NAME``: header, then a row per Trial; a DISPLAY-NAME column after TRIAL
    when a Trial has a display name (``status.displayName``, from the experiment's ``trial_name_creator``)."""
    named = any((t.get("status") or {}).get("displayName") for t in trials)
    rows: list[list[Any]] = [["TRIAL", *(["DISPLAY-NAME"] if named else []), "PHASE", "ITER", "METRIC", "REASON"]]
    for t in trials:
        status = t.get("status") or {}
        rows.append(
            [
                t["metadata"]["name"],
                *([status.get("displayName")] if named else []),
                status.get("phase", "Pending"),
                status.get("iteration"),
                status.get("metricValue"),
                status.get("reason"),
            ]
        )
    return rows


def _follow(cluster, name: str) -> int:
    from kubetune.sdk.client import follow
    from kubetune.sdk.progress import StatusTable

    with StatusTable() as table:
        final, _ = follow(cluster, name, table.update)
    return OK if final["status"]["phase"] == "Succeeded" else FAILED


def cmd_watch(args: argparse.Namespace) -> int:
    return _follow(_cluster(args), args.name)


def cmd_run(args: argparse.Namespace) -> int:
    if ":" in args.target and not args.target.endswith((".yaml", ".yml", ".json")):
        return _run_trainable(args)
    with open(args.target) as f:
        body = yaml.safe_load(f)
    cluster = _cluster(args)
    body.setdefault("metadata", {})
    if args.name:
        body["metadata"]["name"] = args.name
    created = cluster.create(body)
    name = created["metadata"]["name"]
    print(f"experiment.kubetune.io/{name} created", file=sys.stderr)
    return _follow(cluster, name) if args.watch else OK


def _run_trainable(args: argparse.Namespace) -> int:
    from kubetune.sdk.tuner import run

    storage = {"uri": args.storage, "credentialsSecret": args.secret}  # None: $KUBETUNE_STORAGE_*
    analysis = run(
        args.target,
        name=args.name,
        config=json.loads(args.config or "{}"),
        num_samples=args.num_samples,
        metric=args.metric,
        mode=args.mode,
        stop=json.loads(args.stop) if args.stop else None,
        namespace=args.namespace,
        context=args.context,
        image=args.image,
        storage=storage,
        raise_on_failed_trial=False,
        verbose=1 if args.watch else 0,
    )
    if args.metric and args.mode:
        print(json.dumps({"best_config": analysis.get_best_config(args.metric, args.mode)}, sort_keys=True))
    failed = [t for t in analysis.trials if t.error]
    if not failed:
        return OK
    first = failed[0]
    last = (first.error.strip().splitlines() or ["failed"])[-1]
    return _error(
        f"{len(failed)} of {len(analysis.trials)} trials failed; {first.trial_id}: {last} "
        f"(kubetune logs {first.trial_id} shows its log)",
        FAILED,
    )


def cmd_logs(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    trial = cluster.trial(args.trial)
    status = trial.get("status") or {}
    if args.attempt is not None:
        pod = f"{args.trial}-{args.attempt}"
    elif status.get("podName"):
        pod = status["podName"]
    else:
        print(f"trial {args.trial} has no pod yet", file=sys.stderr)
        return NOT_FOUND
    from kubernetes.client import ApiException

    try:
        if args.follow:
            for chunk in cluster.pod_log(pod, follow=True):
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        else:
            sys.stdout.write(cluster.pod_log(pod))
    except ApiException as exc:
        if exc.status != 404:
            raise
        print(
            f"pod {pod} of trial {args.trial} is gone (spec.podRetentionPolicy deletes the pods of succeeded "
            "attempts by default); the trial's results are in storage: kubetune analysis",
            file=sys.stderr,
        )
        return NOT_FOUND
    return OK


def cmd_best(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    exp = cluster.get(args.name)
    best = (exp.get("status") or {}).get("bestTrial")
    if not best:
        print(f"experiment {args.name} has no best trial yet (needs spec.metric and a result)", file=sys.stderr)
        return NOT_FOUND
    if "config" not in best:
        trial = cluster.trial(best["name"])  # status.config: the values drawn, or PBT's config, when they differ
        best = {**best, "config": (trial.get("status") or {}).get("config") or trial["spec"].get("config")}
    _print({"metric": exp["spec"].get("metric"), "mode": exp["spec"].get("mode"), **best}, args.output or "yaml")
    return OK


def cmd_analysis(args: argparse.Namespace) -> int:
    from kubetune.sdk.tuner import experiment_analysis

    cluster = _cluster(args)
    exp = cluster.get(args.name)
    frame = experiment_analysis(exp, cluster.trials(exp)).dataframe()
    if args.output == "json":
        print(frame.to_json(orient="records", indent=2))
    else:
        sys.stdout.write(frame.to_csv(index=False))
    return OK


def _stored_analysis(args: argparse.Namespace, previous=None, listed=None):
    """The experiment ``args.name`` read from storage: with ``--storage-only`` from ``--storage`` (or
    ``$KUBETUNE_STORAGE_URI``)/``<namespace>``/``<name>`` alone, the metric and mode from ``--metric`` and
    ``--mode``; otherwise as ``kubetune analysis`` finds it (the Experiment's spec gives the storage, the
    objective, the search space and which trials failed), ``--metric``/``--mode`` overriding its objective.
    ``previous``, ``listed``: an earlier reading and the listing of its folder just made, passed on to
    :class:`kubetune.sdk.analysis.ExperimentAnalysis`.

    Raises:
        ValueError: ``--storage-only`` without a storage URI or without ``--metric`` and ``--mode``.
        ExperimentNotFound: nothing is stored for the experiment (``--storage-only``).
    """
    from kubetune.sdk.analysis import ExperimentAnalysis
    from kubetune.sdk.client import ExperimentNotFound
    from kubetune.sdk.tuner import experiment_analysis
    from kubetune.storage import join_uri

    if not args.storage_only:
        cluster = _cluster(args)
        exp = cluster.get(args.name)
        return experiment_analysis(exp, cluster.trials(exp), previous=previous, listed=listed)
    root = args.storage or os.environ.get(STORAGE_URI)
    if not root:
        raise ValueError(f"--storage-only needs the storage URI: --storage s3://bucket/prefix or ${STORAGE_URI}")
    if not (args.metric and args.mode):
        raise ValueError("--storage-only needs --metric and --mode: storage does not hold the Experiment's spec")
    path = join_uri(root, args.namespace or "default", args.name)
    try:
        return ExperimentAnalysis(path, args.metric, args.mode)
    except FileNotFoundError as exc:
        raise ExperimentNotFound(f"no experiment stored at {path} ({exc}); -n sets the namespace") from exc


def _quiet_optuna() -> None:
    """Keep Optuna's INFO lines (a study created in memory) off the command's stderr."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def cmd_plot(args: argparse.Namespace) -> int:
    from kubetune.sdk.plots import KINDS, save

    _quiet_optuna()
    kinds = [kind.replace("-", "_") for kind in args.kind] if args.kind else list(KINDS)
    save(_stored_analysis(args), args.out, kinds, args.metric, args.mode)
    print(f"wrote {args.out} ({', '.join(kinds)})", file=sys.stderr)
    return OK


def _seconds(text: str) -> float:
    """A command-line duration: a number of seconds above 0."""
    seconds = float(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return seconds


def cmd_dashboard(args: argparse.Namespace) -> int:
    from kubetune.sdk.dashboard import Dashboard

    if args.name is None:
        return _dashboard_list(args)
    if len(args.namespace or ()) > 1:
        raise ValueError("kubetune dashboard NAME takes one --namespace (several go with the list: no NAME)")
    args.namespace = args.namespace[0] if args.namespace else None
    _quiet_optuna()
    analysis = _stored_analysis(args)
    cluster_views = {}
    if not args.storage_only:  # the Experiment is in the cluster: its conditions, Events, Trials' status and logs
        from kubetune.sdk.client import READ_TIMEOUT_S
        from kubetune.sdk.cluster_notes import ClusterNotes

        cluster = _cluster(args)
        cluster_views = {
            "notes": ClusterNotes(cluster),
            "experiment": lambda: cluster.get(args.name, timeout_s=READ_TIMEOUT_S),
        }
    try:
        dashboard = Dashboard(
            analysis,
            args.metric,
            args.mode,
            host=args.host,
            port=args.port,
            # the cluster says which trials failed: ask it again; storage alone: the same folder again
            reread=None if args.storage_only else lambda previous, listed: _stored_analysis(args, previous, listed),
            **{key: value for key, value in (("refresh_s", args.refresh), ("settle_s", args.settle)) if value},
            **cluster_views,
        )
    except OSError as exc:
        return _error(f"cannot listen on {args.host}:{args.port}: {exc}; --port chooses another port", USAGE)
    print(
        f"Optuna Dashboard of {len(analysis.trials)} trials, refreshed from storage every {dashboard.refresh_s:g} s: "
        f"{dashboard.url} (Ctrl-C ends it)",
        file=sys.stderr,
    )
    return _serve_until_interrupted(dashboard, open_browser=not args.no_browser)


def _serve_until_interrupted(dashboard, open_browser: bool) -> int:
    """Serve ``dashboard`` until Ctrl-C or SIGTERM (a pod of the chart's Deployment ending), then end the process at
    once (``os._exit``): a refresh still in flight, which may be waiting out a storage outage or an API server that
    does not answer, is abandoned rather than waited for. The dashboard writes nothing, so nothing is lost."""
    from kubetune.sdk.dashboard import serve

    # Ctrl-C ends it even where it was started with SIGINT ignored (an asynchronous command of a non-interactive
    # shell: Python then installs no handler for it), and so does SIGTERM
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        serve(dashboard, open_browser=open_browser)
    except KeyboardInterrupt:
        print(file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(OK)


def _dashboard_list(args: argparse.Namespace) -> int:
    """``kubetune dashboard`` with no NAME: every Experiment the kubeconfig's identity may list, one study each
    (:mod:`kubetune.sdk.experiment_studies`), cluster-wide or in the ``--namespace`` namespaces (default the
    context's) it may read."""
    from kubetune.sdk.client import Cluster
    from kubetune.sdk.cluster_notes import ClusterNotes
    from kubetune.sdk.dashboard import DEFAULT_LIST_REFRESH_S, ExperimentsDashboard
    from kubetune.sdk.experiment_studies import ExperimentStudies, readable_experiments
    from kubetune.sdk.tuner import experiment_analysis

    if args.storage_only or args.metric or args.mode:
        raise ValueError(
            "--storage-only, --metric and --mode go with NAME: the list shows each Experiment by its own spec"
        )
    _quiet_optuna()
    cluster = Cluster.connect(args.context)
    cluster.check()
    namespaces = list(dict.fromkeys(args.namespace or [cluster.namespace]))
    studies = ExperimentStudies(
        lambda: readable_experiments(cluster.list_all_namespaces, cluster.list, namespaces),
        lambda experiment, previous, listed: experiment_analysis(
            experiment, cluster.trials(experiment), previous=previous, listed=listed
        ),
        **({"settle_s": args.settle} if args.settle else {}),
        notes=ClusterNotes(cluster),
    )
    try:
        dashboard = ExperimentsDashboard(
            studies, host=args.host, port=args.port, refresh_s=args.refresh or DEFAULT_LIST_REFRESH_S
        )
    except OSError as exc:
        return _error(f"cannot listen on {args.host}:{args.port}: {exc}; --port chooses another port", USAGE)
    print(
        f"Optuna Dashboard of the Experiments you may list (every namespace, else {', '.join(namespaces)}), "
        f"refreshed every {dashboard.refresh_s:g} s: {dashboard.url} (Ctrl-C ends it)",
        file=sys.stderr,
    )
    return _serve_until_interrupted(dashboard, open_browser=not args.no_browser)


def _suspend(value: bool):
    def command(args: argparse.Namespace) -> int:
        _cluster(args).set_suspend(args.name, value)
        print(f"experiment.kubetune.io/{args.name} {'suspended' if value else 'resumed'}", file=sys.stderr)
        return OK

    return command


def cmd_delete(args: argparse.Namespace) -> int:
    _cluster(args).delete(args.name)
    print(f"experiment.kubetune.io/{args.name} deleted (its results stay in storage)", file=sys.stderr)
    return OK


def cmd_convert_katib(args: argparse.Namespace) -> int:
    """Convert every Katib Experiment of ``args.files``; write them to stdout, or one file per Experiment under
    ``args.output_dir``. Nothing is written unless every document converts."""
    from kubetune.sdk.katib_convert import convert_text

    conversions = []
    for path in args.files:
        with open(path) as f:
            conversions += [(path, c) for c in convert_text(f.read(), path)]
    names = [c.experiment["metadata"]["name"] for _, c in conversions]
    if args.output_dir is None:
        sys.stdout.write("---\n".join(c.to_yaml() for _, c in conversions))
    else:
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"several Experiments are named {', '.join(twice)}; each is written to NAME.yaml")
        os.makedirs(args.output_dir, exist_ok=True)
        for _, conversion in conversions:
            target = os.path.join(args.output_dir, f"{conversion.experiment['metadata']['name']}.yaml")
            with open(target, "w") as f:
                f.write(conversion.to_yaml())
    for path, conversion in conversions:
        where = f" -> {args.output_dir}/{conversion.source}.yaml" if args.output_dir is not None else ""
        print(f"{path}: {conversion.source}{where}: {len(conversion.notes)} notes", file=sys.stderr)
    return OK


def parser() -> argparse.ArgumentParser:
    """Return the command's argument parser."""
    top = argparse.ArgumentParser(prog="kubetune", description="Run, watch and read kubetune Experiments.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--context", help="kubeconfig context (default: the current one)")
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    sub = top.add_subparsers(dest="command", required=True)

    def add(
        name: str, func, help_: str, output: Sequence[str] = (), parents=(), base=common
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[base, *parents], help=help_, description=help_)
        p.set_defaults(func=func)
        if output:
            p.add_argument("-o", "--output", choices=output)
        return p

    p = add("run", cmd_run, "create an Experiment from a manifest, or run module:Trainable with tune.run")
    p.add_argument("target", help="experiment.yaml, or an import path module:Trainable available in the image")
    p.add_argument("--name", help="Experiment name (default: the manifest's, or <trainable>-<date>)")
    p.add_argument(
        "--watch",
        action="store_true",
        help="show the live table until the Experiment ends (module:Trainable runs always wait for the end; "
        "--watch shows the table)",
    )
    p.add_argument("--config", help="module:Trainable only: the parameter space as JSON")
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--metric")
    p.add_argument("--mode", choices=("min", "max"))
    p.add_argument("--stop", help="stop criteria as JSON, e.g. '{\"training_iteration\": 10}'")
    p.add_argument("--image")
    p.add_argument("--storage", help="storage URI, e.g. s3://bucket/prefix (default: $KUBETUNE_STORAGE_URI)")
    p.add_argument(
        "--secret",
        help="Secret with the trial pods' storage credentials, spec.storage.credentialsSecret "
        "(default: $KUBETUNE_STORAGE_CREDENTIALS_SECRET)",
    )
    p = add("get", cmd_get, "list Experiments, or show one with its trials", ("json", "yaml", "wide"))
    p.add_argument("name", nargs="?")
    add("watch", cmd_watch, "show an Experiment's live table until it ends").add_argument("name")
    p = add("logs", cmd_logs, "print a trial pod's log")
    p.add_argument("trial")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    add(
        "best", cmd_best, "print the best trial: name, config, metric value, checkpoint", ("json", "yaml")
    ).add_argument("name")
    add(
        "analysis", cmd_analysis, "print one row per trial (Ray's dataframe) from storage", ("csv", "json")
    ).add_argument("name")
    stored = argparse.ArgumentParser(add_help=False)
    stored.add_argument("--metric", help="the result key drawn (default: the Experiment's spec.metric)")
    stored.add_argument("--mode", choices=("min", "max"), help="default: the Experiment's spec.mode")
    stored.add_argument(
        "--storage-only",
        action="store_true",
        help="read storage alone, no cluster (needs --metric and --mode): --storage/<namespace>/<name>, "
        "the namespace -n's or default",
    )
    stored.add_argument("--storage", help="--storage-only: the storage URI (default: $KUBETUNE_STORAGE_URI)")
    p = add(
        "plot",
        cmd_plot,
        "draw an Experiment's learning curves, parallel coordinates and importance to a file",
        parents=[stored],
    )
    p.add_argument("name")
    p.add_argument("--out", required=True, help="the image file: .png, .svg or .pdf")
    p.add_argument(
        "--kind",
        action="append",
        choices=("learning-curves", "parallel-coordinates", "importance"),
        help="what to draw; repeat for several (default: all three, one below the other)",
    )
    namespaces = argparse.ArgumentParser(add_help=False)
    namespaces.add_argument("--context", help="kubeconfig context (default: the current one)")
    namespaces.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="with NAME: its namespace (default: the context's); without: a namespace to list when the cluster-wide "
        "list is refused; repeat for several (default: the context's)",
    )
    p = add(
        "dashboard",
        cmd_dashboard,
        "serve Optuna Dashboard of an Experiment, or of every Experiment you may list, refreshed while it runs, "
        "until Ctrl-C",
        parents=[stored],
        base=namespaces,
    )
    p.add_argument("name", nargs="?", help="the Experiment (default: every Experiment you may list)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8080, help="the port (default 8080; 0 picks a free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open the browser")
    p.add_argument(
        "--refresh",
        type=_seconds,
        metavar="SECONDS",
        help="seconds between two reads of storage while serving (default 1; 5 for the list)",
    )
    p.add_argument(
        "--settle",
        type=_seconds,
        metavar="SECONDS",
        help=(
            "seconds without a write to the experiment's storage after which its trials show their final states; "
            "until then they show Running (default 300)"
        ),
    )
    add("suspend", _suspend(True), "suspend an Experiment: running trials checkpoint and stop").add_argument("name")
    add("resume", _suspend(False), "resume a suspended Experiment").add_argument("name")
    add("delete", cmd_delete, "delete an Experiment with its trials and pods").add_argument("name")
    help_ = "rewrite another tool's Experiments as kubetune Experiments (no cluster needed)"
    kinds = sub.add_parser("convert", help=help_, description=help_).add_subparsers(
        dest="source", required=True, metavar="katib"
    )
    help_ = (
        "convert Katib kubeflow.org/v1beta1 Experiments (every document of each FILE), each change of meaning "
        "or dropped field a comment; docs/katib.md"
    )
    p = kinds.add_parser("katib", help=help_, description=help_)
    p.set_defaults(func=cmd_convert_katib)
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files of Katib Experiments")
    p.add_argument(
        "-o", "--output-dir", metavar="DIR", help="write one NAME.yaml per Experiment here (default: stdout)"
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit code (see the module docstring)."""
    args = parser().parse_args(argv)
    from kubernetes.client import ApiException

    from kubetune.sdk.client import ClusterUnavailable, ExperimentNotFound, InvalidExperiment, api_message
    from kubetune.storage import StorageUnavailable

    try:
        return args.func(args)
    except ApiException as exc:
        code = NOT_FOUND if exc.status == 404 else USAGE if exc.status in (400, 409, 422) else CLUSTER
        return _error(api_message(exc), code)
    except ClusterUnavailable as exc:
        return _error(str(exc), CLUSTER)
    except StorageUnavailable as exc:
        return _error(str(exc), STORAGE)
    except ExperimentNotFound as exc:
        return _error(str(exc), NOT_FOUND)
    except (InvalidExperiment, ValueError, FileNotFoundError) as exc:
        return _error(str(exc), USAGE)
    except KeyboardInterrupt as exc:
        name = getattr(exc, "name", None)
        print(file=sys.stderr)
        if name:
            ns = exc.namespace
            return _error(
                f"interrupted; experiment {ns}/{name} keeps running: kubetune watch {name} -n {ns} re-attaches, "
                f"kubetune delete {name} -n {ns} stops it",
                INTERRUPTED,
            )
        return _error(
            "interrupted; an Experiment already created keeps running (kubetune get lists them, "
            "kubetune delete NAME stops one)",
            INTERRUPTED,
        )
    except Exception as exc:
        if os.environ.get("KUBETUNE_DEBUG"):
            raise
        return _error(
            f"unexpected {type(exc).__name__}: {exc} (a bug in kubetune: KUBETUNE_DEBUG=1 prints its traceback; "
            "please report it)",
            UNEXPECTED,
        )


def _error(message: str, code: int) -> int:
    """Print ``message`` as one ``error:`` line on stderr; return ``code``."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
