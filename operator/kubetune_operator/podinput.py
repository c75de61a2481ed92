"""What trial pods tell the operator, checked at the boundary: the results, the checkpoint reference, the
explored config (PBT's step in the pod) and the display name (``trial_name_creator``) of a collector batch, and the
runtime's termination message.

Any code in a trial pod can read its attempt's collector token and write its termination message, so neither
is trusted: each value is checked here (type, finiteness, range, size) before it reaches the controller's
state, the journal or a status patch. Callers: :mod:`kubetune_operator.collector` (a batch with a refused
value is answered 400 with :func:`result_problem`'s, :func:`explored_problem`'s, :func:`display_name_problem`'s
or :func:`checkpoint_problem`'s reason, and reported on the Trial) and
:class:`~kubetune_operator.controller.ExperimentController` (:func:`parse_outcome` of an ended pod: refused
fields are left out and reported). Pure: no I/O. docs/operations.md, "Values from trial pods", states the
same rules.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kubetune.limits import INT64, MAX_DEPTH, MAX_FIELD_BYTES, display_name_problem, json_size

#: display_name_problem is kubetune.limits' rule, which the pod checks too before it reports a name.
__all__ = ["checkpoint_problem", "display_name_problem", "explored_problem", "parse_outcome", "result_problem"]

#: Largest ``training_iteration`` (and checkpoint iteration) taken: 2**53 - 1, exact in every JSON reader.
MAX_ITERATION = 2**53 - 1
#: Progress keys that are a finite number >= 0 when a result has them (not null): what schedulers and stoppers
#: measure time with (``time_attr``) besides ``training_iteration``.
PROGRESS_NUMBERS = ("time_total_s", "time_this_iter_s", "timesteps_total", "episodes_total")
#: Longest checkpoint URI taken, in characters.
MAX_URI_CHARS = 2048


def is_iteration(value: Any) -> bool:
    """Whether ``value`` is an int (not a bool) from 0 to :data:`MAX_ITERATION`."""
    return type(value) is int and 0 <= value <= MAX_ITERATION


def result_problem(result: Any) -> str | None:
    """Why the operator cannot take ``result`` (one reported result, as parsed from JSON), or None.

    Taken: a JSON object nested at most :data:`MAX_DEPTH` deep whose integers fit in 64 bits, with
    ``training_iteration`` (when present) an integer from 0 to :data:`MAX_ITERATION`, the
    :data:`PROGRESS_NUMBERS` (when present and not null) finite numbers >= 0, and ``done`` (when present) a
    boolean. Other values may be NaN or infinite, as Ray allows in results: the schedulers read them as Ray's
    do, and a status only ever shows finite values (``status.compact_result``, ``status.metric_value``).
    The collector checks every result it is sent: about 1.5 us for a result of 8 flat keys, 3.7 us for one
    as the runtime fills it in (20 keys, one nested).

    Returns:
        A line naming the key and what it must be, without the value sent, e.g.
        ``training_iteration must be an integer from 0 to 9007199254740991``.
    """
    if type(result) is not dict:
        return "a result must be a JSON object"
    iteration = result.get("training_iteration")
    if iteration is not None and not is_iteration(iteration):
        return f"training_iteration must be an integer from 0 to {MAX_ITERATION}"
    for key in PROGRESS_NUMBERS:
        value = result.get(key)
        if value is not None and not (type(value) in (int, float) and math.isfinite(value) and value >= 0):
            return f"{key} must be a finite number >= 0"
    if type(result.get("done", False)) is not bool:
        return "done must be true or false"
    return _value_problem(result, "", 0)


def explored_problem(config: Any) -> str | None:
    """Why the operator cannot take ``config``, a config a trial pod chose in PBT's explore step (it becomes
    the Trial's ``status.config``), or None.

    Taken: a JSON object nested at most :data:`MAX_DEPTH` deep whose integers fit in 64 bits, without
    NaN or an infinity (a status is strict JSON), at most :data:`kubetune.limits.MAX_FIELD_BYTES` as compact
    JSON (the CRD's limit on a config).
    """
    if type(config) is not dict:
        return "the config must be a JSON object"
    problem = _value_problem(config, "", 0)
    if problem is not None:
        return problem
    if json_size(config, MAX_FIELD_BYTES) > MAX_FIELD_BYTES:  # measured as the SDK measures spec.config
        return f"the config is over {MAX_FIELD_BYTES} bytes of JSON"
    try:
        json.dumps(config, allow_nan=False)
    except ValueError:
        return "the config holds NaN or an infinity, which a Trial's status cannot"
    return None


def _value_problem(value: Any, where: str, depth: int) -> str | None:
    """Why a parsed JSON ``value`` at ``where`` is nested too deep or holds an integer beyond 64 bits, or None
    (exact types: JSON parsers make no subclasses)."""
    if depth > MAX_DEPTH:
        return f"{where or 'the result'} is nested more than {MAX_DEPTH} levels deep"
    if type(value) is dict:
        for key, item in value.items():
            kind = type(item)
            if kind is float or kind is str or kind is bool or item is None:
                continue
            if kind is int and -INT64 <= item < INT64:
                continue
            problem = _value_problem(item, f"{where}/{key}" if where else str(key), depth + 1)
            if problem:
                return problem
    elif type(value) is list:
        for item in value:
            problem = _value_problem(item, where, depth + 1)
            if problem:
                return problem
    elif type(value) is int and not -INT64 <= value < INT64:
        return f"{where}: an integer beyond 64 bits"
    return None


def checkpoint_problem(uri: Any, iteration: Any, trial_dir: str) -> str | None:
    """Why a reported checkpoint reference cannot be the trial's, or None.

    Args:
        uri: the checkpoint folder's URI: at most :data:`MAX_URI_CHARS` characters, a folder directly in
            ``trial_dir`` (the trial's own folder, where its runtime commits checkpoints).
        iteration: the ``training_iteration`` it was saved at: None or an integer from 0 to :data:`MAX_ITERATION`.
        trial_dir: the trial's folder URI (``builders.experiment_trial_dir``).
    """
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
        return f"checkpoint.uri must be a URI of 1 to {MAX_URI_CHARS} characters"
    prefix = trial_dir.rstrip("/") + "/"
    name = uri[len(prefix) :].rstrip("/")
    if not uri.startswith(prefix) or not name or "/" in name or name in (".", ".."):
        return "checkpoint.uri must name a folder in the trial's own folder"
    if iteration is not None and not is_iteration(iteration):
        return f"checkpoint.iteration must be an integer from 0 to {MAX_ITERATION}"
    return None


def parse_outcome(message: str | None, trial_dir: str) -> tuple[dict, list[str]]:
    """The runtime's outcome in a termination message (``kubetune.env``, ``OUTCOME_*``), checked field by field.

    Args:
        message: the trial container's termination message (JSON on exit 0, else a traceback's tail).
        trial_dir: the trial's folder URI, where a reported checkpoint must be.

    Returns:
        ``(outcome, problems)``: ``outcome`` holds the fields that pass (``outcome`` a string, ``iteration``
        an integer as :func:`is_iteration`, ``checkpoint`` and ``iteration`` as :func:`checkpoint_problem`,
        ``result`` as :func:`result_problem`); ``{}`` when the message is not a JSON object. ``problems``
        says why each field sent was left out.
    """
    try:
        sent = json.loads(message or "")
    except ValueError:
        return {}, []
    if not isinstance(sent, dict):
        return {}, []
    outcome: dict = {}
    problems: list[str] = []
    if isinstance(sent.get("outcome"), str):
        outcome["outcome"] = sent["outcome"]
    elif "outcome" in sent:
        problems.append("outcome must be a string")
    checkpoint, iteration = sent.get("checkpoint"), sent.get("iteration")
    if checkpoint is not None:
        problem = checkpoint_problem(checkpoint, iteration, trial_dir)
        if problem:
            problems.append(problem)
        else:
            outcome["checkpoint"], outcome["iteration"] = checkpoint, iteration
    elif iteration is not None and is_iteration(iteration):
        outcome["iteration"] = iteration
    elif iteration is not None:
        problems.append(f"iteration must be an integer from 0 to {MAX_ITERATION}")
    result = sent.get("result")
    if result is not None:
        problem = result_problem(result)
        if problem:
            problems.append(f"result: {problem}")
        else:
            outcome["result"] = result
    return outcome, problems
