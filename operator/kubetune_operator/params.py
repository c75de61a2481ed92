"""Typed parameters: the annotated types that search algorithms, schedulers and stoppers declare their
parameters with, the decorator that checks them, and the one-line reason a check gives.

An algorithm's constructor is decorated with :data:`checked` (pydantic's ``validate_call``) and its
numeric parameters annotated with :data:`Number`, :data:`Positive`, :data:`NonNegative`, :data:`Count`
or their own ``Field`` bounds, so a wrong type or range is refused before the constructor runs, with
the parameter's name (a ``pydantic.ValidationError``, which is a ``ValueError``). Checks that relate
several parameters (``grace_period <= max_t``) stay in the constructor. :func:`describe` turns a
``ValidationError`` into the line the operator puts in an ``InvalidSpec`` condition
(:mod:`kubetune_operator.algorithms`, :mod:`kubetune_operator.builtin_stoppers`) or a collector's 400
(:mod:`kubetune_operator.collector`). Pure: pydantic only.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError, validate_call

__all__ = ["Number", "Positive", "NonNegative", "Count", "Flag", "checked", "describe"]

#: A finite int or float, kept as given (not a bool, not a numeric string).
Number = Annotated[Union[StrictInt, StrictFloat], Field(allow_inf_nan=False)]

#: A finite number > 0.
Positive = Annotated[Union[StrictInt, StrictFloat], Field(gt=0, allow_inf_nan=False)]

#: A finite number >= 0.
NonNegative = Annotated[Union[StrictInt, StrictFloat], Field(ge=0, allow_inf_nan=False)]

#: An int >= 1 (not a bool, not a float with an integer value).
Count = Annotated[StrictInt, Field(ge=1)]

#: ``true`` or ``false`` only.
Flag = StrictBool

#: Decorates a constructor so its annotated parameters are checked on every call (pydantic's
#: ``validate_call``; values of other annotations, such as a search space, pass as they are).
checked = validate_call(config=ConfigDict(arbitrary_types_allowed=True))

#: The tags pydantic puts after a parameter's name in the location of a :data:`Number` error.
_BRANCHES = {"int", "float"}


def describe(exc: ValidationError, whole: str = "value") -> str:
    """One line for ``exc``: each failing parameter or field, and why, without the values given.

    Args:
        exc: the error of a :data:`checked` call or of a model's validation.
        whole: the name of an error about the whole input (no field), e.g. ``"body"``.

    Example: ``max_t: Input should be greater than 0; brackets: Input should be a valid integer``.
    """
    reasons: dict[str, None] = {}
    for error in exc.errors(include_url=False):
        loc, message = list(error["loc"]), error["msg"]
        if error["type"] in ("int_type", "float_type") and loc and loc[-1] in _BRANCHES:
            loc, message = loc[:-1], "Input should be a valid number"  # both members of Number refused it
        reasons.setdefault(f"{'.'.join(str(part) for part in loc) or whole}: {message}", None)
    return "; ".join(reasons)
