"""The in-pod runtime of a kubetune trial: ``python -m kubetune.runtime``.

The operator runs it as every trial pod's command. Modules: :mod:`.main` (process entry: threads,
signals, exit codes), :mod:`.loop` (restore, ``train()`` loop, stop criteria, decisions,
checkpoints), :mod:`.results` (``result.json`` and ``progress.csv``), :mod:`.loader` (loading the
user's trainable). Storage is :mod:`kubetune.storage` and :mod:`kubetune.checkpoint_store`; the collector
client is :mod:`kubetune.reporter`.
"""
