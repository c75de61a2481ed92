"""kubetune's Kubernetes operator: Experiments and Trials run by kopf.

Pure building blocks (manifest builders, status math, collector tokens,
settings) live in their own modules and import nothing from kopf, so unit
tests call them without a cluster; the kopf handlers and the collector build
on them.
"""
