"""Ray's scheduler and stopper defaults are written twice, and this test keeps them equal.

The SDK's classes (``kubetune.sdk.schedulers``, ``kubetune.sdk.stopper``: what a Ray script builds) and the
operator's (``kubetune_operator.schedulers``, its stoppers: what runs) each state Ray's defaults in their
signatures, readable where each is read. The SDK sends only what the script set (``None`` is not sent), so the
operator's default is the one that runs: any difference would silently change what a default means. One table,
:data:`PAIRS`, names every SDK class with a CRD name; the operator class is the one that name selects, as in the
operator; the test compares the defaults of every parameter both have.
"""

import inspect

import pytest

from kubetune.algorithm_spec import AlgorithmSpec
from kubetune.sdk import schedulers, stopper
from kubetune_operator.algorithms import SCHEDULERS, scheduler_class
from kubetune_operator.builtin_stoppers import STOPPERS

#: SDK class → (parameters only the SDK has, parameters only the operator has), each with why.
PAIRS = {
    schedulers.FIFOScheduler: ({}, {}),
    schedulers.AsyncHyperBandScheduler: ({}, {}),
    schedulers.HyperBandScheduler: ({}, {}),
    schedulers.HyperBandForBOHB: ({}, {}),
    schedulers.MedianStoppingRule: ({"min_time_slice": "must be 0, refused by the SDK"}, {}),
    schedulers.PopulationBasedTraining: ({}, {}),
    schedulers.PopulationBasedTrainingReplay: (
        {"policy_file": "the SDK reads the file"},
        {"policy": "the file's steps", "time_attr": "Ray's replay's, never set"},
    ),
    schedulers.PB2: ({"custom_explore_fn": "must be None, refused by the SDK"}, {}),
    stopper.MaximumIterationStopper: ({}, {}),
    stopper.TrialPlateauStopper: ({}, {}),
    stopper.ExperimentPlateauStopper: ({}, {}),
}
#: Operator names with no SDK class, each with why.
OPERATOR_ONLY = {"katib-medianstop": "Katib's medianstop, by the Katib API or spec.scheduler; Ray has none"}
#: What the operator passes every scheduler (the Experiment's ``spec.metric`` and ``spec.mode``).
EXPERIMENT_LEVEL = {"metric", "mode"}


def operator_class(sdk_class: type) -> type:
    if issubclass(sdk_class, schedulers.TrialScheduler):
        return scheduler_class(sdk_class.name)
    return STOPPERS[sdk_class.name]


def defaults(cls: type) -> dict:
    return {name: p.default for name, p in inspect.signature(cls).parameters.items()}


def named_classes(module) -> set:
    return {
        value
        for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, AlgorithmSpec) and value.name
    }


def test_every_sdk_scheduler_and_stopper_and_every_operator_name_has_a_row():
    assert named_classes(schedulers) | named_classes(stopper) == set(PAIRS)
    assert {cls.name for cls in PAIRS} | set(OPERATOR_ONLY) == set(SCHEDULERS) | set(STOPPERS)
    assert not {cls.name for cls in PAIRS} & set(OPERATOR_ONLY)


@pytest.mark.parametrize("sdk_class", list(PAIRS), ids=lambda cls: cls.__name__)
def test_the_sdk_and_the_operator_have_the_same_defaults(sdk_class):
    sdk_only, operator_only = PAIRS[sdk_class]
    sdk, operator = defaults(sdk_class), defaults(operator_class(sdk_class))
    assert set(sdk) - set(operator) == set(sdk_only)
    assert set(operator) - set(sdk) - EXPERIMENT_LEVEL == set(operator_only)
    for name in set(sdk) & set(operator):
        if sdk[name] is None:
            continue  # not sent: the operator's default applies
        assert sdk[name] == operator[name], (
            f"{sdk_class.__name__}({name}=...): SDK {sdk[name]!r}, operator {operator[name]!r}"
        )
