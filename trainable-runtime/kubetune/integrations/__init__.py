"""Ray's package ``ray.air.integrations`` (Ray 2.x): the experiment trackers a trainable sets up for itself
(:mod:`kubetune.integrations.mlflow`, :mod:`kubetune.integrations.wandb`) and the Keras callback that reports a
``model.fit`` (:mod:`kubetune.integrations.keras`).

Their ``setup_*`` functions run in the trial pod, called by the user's function trainable or ``Trainable.setup``:
each starts the tracker's run for this trial, named after it, as Ray's do. Their logger callbacks are Ray's driver
code, which ``tune.run`` and ``Tuner`` refuse (:mod:`kubetune.logger`). The trackers' modules import their library
only when a ``setup_*`` function is called, so importing the module needs neither; the trial image must have the
library (``pip install 'kubetune[mlflow]'`` or ``'kubetune[wandb]'``). The Keras module imports Keras, which the trial
image must have (``pip install 'kubetune[integrations]'``).
"""
