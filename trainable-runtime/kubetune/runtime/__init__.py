"""The trial pod's side of kubetune: the in-pod runtime, ``python -m kubetune.runtime``, and the API it runs.

The operator runs ``python -m kubetune.runtime`` as every trial pod's command. Modules: :mod:`.main` (process
entry: threads, signals, exit codes), :mod:`.loop` (restore, ``train()`` loop, stop criteria, decisions,
checkpoints), :mod:`.worker` (a gang's worker pods), :mod:`.gang_config` (a gang's shared config),
:mod:`.results` (``result.json`` and ``progress.csv``), :mod:`.tensorboard` (event files), :mod:`.loader`
(loading the user's trainable), :mod:`.pbt_explore` (PBT's user functions, called in the exploited trial's
pod), :mod:`.reporter` (the collector client), :mod:`.sysusage` (Ray's system-usage result keys). The API the
user's trainable calls: :mod:`.trainable` (the class API), :mod:`.function_trainable` and :mod:`.session` (the
function API), :mod:`.context` (``tune.get_context``); users import them as ``kubetune`` (``tune.Trainable``,
``tune.report``) and through Ray's paths :mod:`kubetune.trainable`, :mod:`kubetune.session`, :mod:`kubetune.track`.
Storage is :mod:`kubetune.storage` and :mod:`kubetune.checkpoint_store`. Never imports the user's side
(:mod:`kubetune.sdk`) nor its dependencies (kubernetes, rich, pandas).
"""
