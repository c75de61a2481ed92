"""Ray's package ``ray.tune.integration``: the callbacks a trainable hands to a training library so that the
library's rounds become kubetune results (:mod:`kubetune.integration.xgboost`, :mod:`kubetune.integration.lightgbm`,
:mod:`kubetune.integration.keras`).

They run in the trial pod, inside the user's function trainable, and report through ``kubetune.report``; each
module imports its library, which the trial image must have (``pip install 'kubetune[integrations]'``; Keras 3 also
needs the backend it is configured with, which kubetune does not choose).
"""
