"""Tuning a classifier on scikit-learn's bundled handwritten digits (the ``make demo`` experiment).

Modules: :mod:`.model` (data split, model, one epoch, evaluation), :mod:`.trainable` (class API),
:mod:`.function_trainable` (function API), :mod:`.demo` (runs ``experiment.yaml`` on a local cluster).
"""
