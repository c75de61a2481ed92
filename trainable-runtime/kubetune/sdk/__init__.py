"""The user's side of kubetune: what runs on the user's machine, never in a trial pod.

Modules: :mod:`.tuner` (``tune.run``, ``Tuner``: checking the arguments, building and creating the
Experiment, following it), :mod:`.client` (the Kubernetes API: create, watch, fetch), :mod:`.progress` (the
status table), :mod:`.analysis` (results read back from storage: ``ExperimentAnalysis``, ``ResultGrid``),
:mod:`.schedulers` and :mod:`.stopper` (Ray's scheduler and stopper classes as specifications the operator
runs), :mod:`.resume` (``ResumeConfig``), :mod:`.factories` (``tune.create_scheduler``/``create_searcher``) and
:mod:`.cli` (the ``kubetune`` command). Users reach them through ``import kubetune as tune`` and Ray's paths
(:mod:`kubetune.tuner`, :mod:`kubetune.analysis`, :mod:`kubetune.schedulers`, :mod:`kubetune.stopper`). Needs
the ``sdk`` extra (kubernetes, rich, pandas); the trial pod's runtime (:mod:`kubetune.runtime`) never imports it.
"""
