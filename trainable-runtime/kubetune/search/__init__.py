"""Parameter spaces, basic variant generation and the searcher specifications (Ray's ``tune.search``).

``kubetune.search.sample`` holds the domains (``uniform``, ``choice``, ...), their
JSON form and :func:`parse_space`; ``kubetune.search.variants`` holds the
restart-safe :class:`VariantSpace`; ``kubetune.search.algorithms`` the searchers a script
chooses (``OptunaSearch``, ``BasicVariantGenerator``, ``ConcurrencyLimiter``), which the operator
runs. Users write ``from kubetune.search import choice, loguniform, grid_search`` as they would
``from ray import tune``; the operator's searchers import the same names. Ray's searchers
kubetune lacks raise an error that says why and what to use instead.
"""

from kubetune.algorithm_spec import unsupported_names
from kubetune.search.algorithms import BasicVariantGenerator, ConcurrencyLimiter, OptunaSearch, Searcher
from kubetune.search.bohb import TuneBOHB
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
    space_spec,
    space_warnings,
    uniform,
)
from kubetune.search.variants import RecursiveDependencyError, VariantSpace, format_tag, generate_variants

__all__ = [
    "DOMAIN_NAMES",
    "Categorical",
    "Domain",
    "Float",
    "Function",
    "Integer",
    "Normal",
    "choice",
    "grid_search",
    "is_grid",
    "lograndint",
    "loguniform",
    "parse_space",
    "space_warnings",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "space_spec",
    "uniform",
    "VariantSpace",
    "format_tag",
    "generate_variants",
    "RecursiveDependencyError",
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "OptunaSearch",
    "Searcher",
    "TuneBOHB",
]

_OTHER = "the operator runs only the basic, optuna, bohb and katib-hyperband searchers"
__getattr__ = unsupported_names(
    __name__,
    {
        **{
            name: (_OTHER, "OptunaSearch (its TPE sampler is Bayesian optimization)")
            for name in (
                "HyperOptSearch",
                "BayesOptSearch",
                "AxSearch",
                "HEBOSearch",
                "NevergradSearch",
                "ZOOptSearch",
                "SkOptSearch",
                "DragonflySearch",
                "SigOptSearch",
                "FLAMLSearch",
                "BlendSearch",
                "CFO",
            )
        },
        "Repeater": (
            "a searcher cannot be wrapped: the operator runs it",
            "a grid_search over a seed key of the config (each config once per seed) and average the results "
            "by config in ExperimentAnalysis.dataframe()",
        ),
        "SearchGenerator": ("a searcher cannot be wrapped: the operator runs it", "the searcher itself as search_alg"),
    },
)
