"""Parameter spaces and basic variant generation, shared by the SDK and the operator.

``kubetune.search.sample`` holds the domains (``uniform``, ``choice``, ...), their
JSON form and :func:`parse_space`; ``kubetune.search.variants`` holds the
restart-safe :class:`BasicVariantGenerator`. Users write
``from kubetune.search import choice, loguniform, grid_search`` as they would
``from ray import tune``; the operator's searchers import the same names.
"""

from kubetune.search.sample import (
    DOMAIN_NAMES,
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
    choice,
    grid_search,
    is_grid,
    lograndint,
    loguniform,
    parse_space,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    space_warnings,
    uniform,
)
from kubetune.search.variants import BasicVariantGenerator, format_tag, generate_variants

__all__ = [
    "DOMAIN_NAMES", "Categorical", "Domain", "Float", "Function", "Integer", "Normal", "choice", "grid_search",
    "is_grid", "lograndint", "loguniform", "parse_space", "space_warnings", "qlograndint", "qloguniform", "qrandint", "qrandn",
    "quniform", "randint", "randn", "sample_from", "uniform", "BasicVariantGenerator", "format_tag",
    "generate_variants",
]
