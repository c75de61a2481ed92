"""Katib's ``DBManager`` gRPC service, as much of it as a trial's ``kubeflow.katib.report_metrics()`` calls: its
``ReportObservationLog``, served on the pod's loopback interface by the metrics sidecar of a ``Push`` trial with
``metricsCollector.katibDBManager`` (docs/katib.md, "Katib's report_metrics in a trial").

Owns the wire format of that call (Katib's ``api.v1.beta1`` package, ``pkg/apis/manager/v1beta1/api.proto``: the
message and field numbers of ``ReportObservationLogRequest``, built here as protobuf descriptors, so no generated
code is kept) and :func:`serve`. Each call becomes one line of ``name=value`` pairs in the order reported, which
the sidecar reads as it reads an HTTP push (:class:`kubetune.runtime.sidecar.PushSource`). Katib's other calls
(``GetObservationLog``, ``DeleteObservationLog``) answer ``UNIMPLEMENTED``. Called by
:mod:`kubetune.runtime.sidecar`.
"""

from __future__ import annotations

import math
from concurrent import futures
from typing import Callable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kubetune.env import KATIB_DB_PORT

__all__ = ["PORT", "SERVICE", "serve"]

#: Where Katib's SDK dials by default (``katib-db-manager.kubeflow:6789``); the pod resolves that name to 127.0.0.1.
PORT = KATIB_DB_PORT
#: Katib's gRPC service name.
SERVICE = "api.v1.beta1.DBManager"
_STRING, _MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL, _REPEATED = (
    descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
)


def _messages() -> tuple[type, type]:
    """The request and reply classes of ``ReportObservationLog`` (Katib's field names and numbers)."""
    proto = descriptor_pb2.FileDescriptorProto(name="kubetune_katib_db.proto", package="api.v1.beta1", syntax="proto3")
    shapes = {
        "Metric": [("name", 1, _STRING, _OPTIONAL, None), ("value", 2, _STRING, _OPTIONAL, None)],
        "MetricLog": [("time_stamp", 1, _STRING, _OPTIONAL, None), ("metric", 2, _MESSAGE, _OPTIONAL, "Metric")],
        "ObservationLog": [("metric_logs", 1, _MESSAGE, _REPEATED, "MetricLog")],
        "ReportObservationLogRequest": [
            ("trial_name", 1, _STRING, _OPTIONAL, None),
            ("observation_log", 2, _MESSAGE, _OPTIONAL, "ObservationLog"),
        ],
        "ReportObservationLogReply": [],
    }
    for name, fields in shapes.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".api.v1.beta1.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"api.v1.beta1.{name}"))
        for name in ("ReportObservationLogRequest", "ReportObservationLogReply")
    )


Request, Reply = _messages()


def serve(trial: str, put: Callable[[str], None], port: int = PORT) -> grpc.Server:
    """Serve ``ReportObservationLog`` on ``127.0.0.1:port`` for ``trial``.

    Args:
        trial: the trial's name (Katib's SDK sends ``KATIB_TRIAL_NAME``); a report for another name is refused.
        put: called with each report as one line, ``name=value`` pairs separated by spaces.
        port: the port (Katib's 6789).

    Returns:
        The started server (``stop(grace)`` ends it).

    Raises:
        RuntimeError: the port cannot be bound.
    """

    def report(request, context):
        if request.trial_name != trial:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"this pod runs trial {trial!r}, not {request.trial_name!r}"
            )
        pairs = []
        for log in request.observation_log.metric_logs:
            name, value = log.metric.name, log.metric.value
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not name or any(c.isspace() or c == "=" for c in name) or not math.isfinite(number):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a metric: {name!r}={value!r}")
            pairs.append(f"{name}={value}")
        if pairs:
            put(" ".join(pairs))
        return Reply()

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ReportObservationLog": grpc.unary_unary_rpc_method_handler(
                report, request_deserializer=Request.FromString, response_serializer=Reply.SerializeToString
            )
        },
    )
    # no SO_REUSEPORT (gRPC's default): a second server on the port must fail, not share a trial's reports
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handler,))
    try:
        server.add_insecure_port(f"127.0.0.1:{port}")
    except RuntimeError as exc:  # grpcio's own error says little more than the address
        raise RuntimeError(f"cannot listen on 127.0.0.1:{port} for Katib's report_metrics: {exc}") from None
    server.start()
    return server
