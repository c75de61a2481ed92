"""The local Kubernetes control plane for kubetune's tests and demo.

Real etcd, kube-apiserver, kube-scheduler and kube-controller-manager built
from Go modules (:mod:`devcluster.build`), fake GPU nodes served by a process
kubelet (:mod:`devcluster.kubelet`), and moto's S3 server, started and stopped
by :class:`devcluster.cluster.Cluster` (used by the CLI, the pytest fixture and
the demo).
"""

from .cluster import Cluster, ClusterConfig

__all__ = ["Cluster", "ClusterConfig"]
