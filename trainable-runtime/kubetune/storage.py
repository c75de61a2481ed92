"""Object storage for trial directories: ``s3://`` (boto3) and ``file://`` (a local or mounted path).

Owns every byte kubetune moves to and from object storage. Callers: the in-pod runtime
(``kubetune.runtime``: params, results, checkpoints, error.txt), the checkpoint commit protocol
(``kubetune.checkpoint_store``), ``kubetune.Trainable`` when given a ``remote_checkpoint_dir``, and the
operator or SDK when they read a trial's files.

Every method takes full URIs. A URI that names a "directory" (``upload_dir``, ``download_dir``,
``list``, ``delete_prefix``) means every object whose key starts with ``<uri>/``; object stores have
no directories, so ``s3://b/ckpt_1`` never matches ``s3://b/ckpt_10/x``.

S3 behaviour:
    * transfers go through boto3's transfer manager (``s3transfer``): multipart above
      ``TransferConfig.multipart_threshold``, parts and files concurrent up to ``max_concurrency``;
    * botocore retries each request in ``standard`` mode, 5 attempts (``AWS_RETRY_MODE=adaptive`` adds
      client-side rate limiting; ``AWS_MAX_ATTEMPTS`` changes the count): throttling, 5xx,
      connection resets and timeouts;
    * on top of that, each operation is retried by tenacity with exponential backoff and full jitter
      ("Exponential Backoff And Jitter", AWS Architecture Blog, 2015) for up to ``outage_timeout_s``,
      so an outage of the endpoint stalls the caller instead of failing it. Only the files of a
      directory transfer that failed are sent again;
    * :meth:`S3Storage.watch_reachability` tells a listener (the trial runtime's reporter) once every
      request has failed for ``UNREACHABLE_AFTER_S`` seconds, with the endpoint and the last error, and
      again at the first answer: a stall is reported, not only logged.

Credentials come from the arguments of :func:`open_storage`, else boto3's default chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` from the experiment's ``credentialsSecret``, IRSA,
workload identity, instance profiles). They are never logged.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import unquote, urlparse

import tenacity

from kubetune import env as trial_env

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default time an operation keeps retrying through an outage before it raises, in seconds.
DEFAULT_OUTAGE_TIMEOUT_S = 600.0
#: How long the SDK's uploads (``tune.run``, ``kubetune run``) retry an unreachable store before they say so,
#: in seconds: a user waits on them, a trial pod does not.
SDK_OUTAGE_TIMEOUT_S = 30.0
#: How long requests fail in a row before :meth:`S3Storage.watch_reachability` reports it, in seconds.
UNREACHABLE_AFTER_S = 20.0
#: Exception codes S3 (or an S3-compatible store) uses for throttling or a transient server fault.
TRANSIENT_ERROR_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "SlowDown",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "RequestLimitExceeded",
        "TooManyRequestsException",
    }
)
_TMP_MARK = ".kt-tmp-"
#: Read-modify-write rounds of :meth:`S3Storage.append_line` before it gives up.
APPEND_ATTEMPTS = 20


def join_uri(base: str, *parts: str) -> str:
    """Join ``base`` and path ``parts`` with single slashes: ``join_uri("s3://b/p/", "x")`` is ``s3://b/p/x``."""
    out = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


def split_s3_uri(uri: str) -> tuple[str, str]:
    """Return ``(bucket, key)`` of ``s3://bucket/key``.

    Raises:
        ValueError: ``uri`` is not an ``s3://`` URI with a bucket.
    """
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI with a bucket: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def file_uri_path(uri: str) -> Path:
    """Return the absolute local path of ``file:///abs/path``.

    Raises:
        ValueError: ``uri`` is not a ``file://`` URI with an absolute path on this host.
    """
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
        raise ValueError(f"not a file:/// URI with an absolute path: {uri!r}")
    return Path(unquote(parsed.path))


def _relative_files(local_dir: str | os.PathLike) -> list[str]:
    """Relative POSIX paths of every regular file under ``local_dir``, sorted."""
    root = Path(local_dir)
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _safe_local_path(root: Path, relative: str) -> Path:
    """``root / relative``, refusing keys that would escape ``root`` (``..``, absolute)."""
    target = (root / relative).resolve()
    if root.resolve() not in target.parents:
        raise ValueError(f"object key escapes the target directory: {relative!r}")
    return target


class Storage(ABC):
    """One object store, addressed by full URIs of its scheme. Instances are thread-safe."""

    scheme: str

    @abstractmethod
    def upload_file(self, local_path: str | os.PathLike, uri: str) -> None:
        """Copy one local file to the object ``uri`` (replacing it)."""

    @abstractmethod
    def download_file(self, uri: str, local_path: str | os.PathLike) -> None:
        """Copy the object ``uri`` to ``local_path`` (parents created). Raises FileNotFoundError if absent."""

    @abstractmethod
    def upload_dir(self, local_dir: str | os.PathLike, uri: str) -> list[str]:
        """Copy every file under ``local_dir`` to ``<uri>/<relative path>``; return the relative paths.

        Raises:
            NotADirectoryError: ``local_dir`` is not a directory.
        """

    @abstractmethod
    def download_dir(self, uri: str, local_dir: str | os.PathLike) -> list[str]:
        """Copy every object under ``<uri>/`` to ``local_dir`` keeping the layout; return the relative paths.

        Raises:
            FileNotFoundError: no object under ``<uri>/``.
        """

    @abstractmethod
    def put_bytes(self, uri: str, data: bytes) -> None:
        """Write ``data`` as the object ``uri`` (replacing it; readers see the old or the new bytes)."""

    @abstractmethod
    def get_bytes(self, uri: str) -> bytes:
        """Return the object ``uri``. Raises FileNotFoundError if absent."""

    @abstractmethod
    def append_line(self, uri: str, line: str) -> None:
        """Append ``line`` (one line, ``\\n`` added) to the text object ``uri`` (created when absent), unless the
        object already holds that line: writers that append at the same time each get their line in once,
        in some order (a retried writer does not add it twice).

        Raises:
            RuntimeError: the appends kept conflicting (S3: more than ``APPEND_ATTEMPTS`` conditional writes
                refused).
        """

    @abstractmethod
    def exists(self, uri: str) -> bool:
        """Whether the object ``uri`` exists (objects only; a "directory" is not an object)."""

    @abstractmethod
    def list(self, uri_prefix: str) -> list[str]:
        """URIs of every object under ``<uri_prefix>/``, recursive, sorted."""

    @abstractmethod
    def stamps(self, uri_prefix: str) -> dict[str, tuple[float, str]]:
        """What every object under ``<uri_prefix>/`` is now, by one listing (what a live view compares to know
        what was written since it last looked).

        Returns:
            ``{uri: (last-modified time in unix seconds, version)}``: the version is a text that changes whenever
            the object is written again (S3's ETag with the size; a file's size with its modification time in
            nanoseconds: S3 keeps times to the second, so two writes in one second differ only by it); ``{}``
            when nothing is stored there.
        """

    @abstractmethod
    def delete(self, uri: str) -> None:
        """Delete the object ``uri``; deleting an absent object is not an error."""

    @abstractmethod
    def delete_prefix(self, uri: str) -> int:
        """Delete every object under ``<uri>/``; return how many were deleted."""


class FileStorage(Storage):
    """``file:///abs/path`` URIs: a local directory or a mounted volume (tests, single-node runs).

    Writes go to a temporary file in the same directory and are renamed into place, so a reader never
    sees a partly written object (the same guarantee S3 gives for a PUT).
    """

    scheme = "file"

    def upload_file(self, local_path, uri):
        self._copy_atomic(Path(local_path), file_uri_path(uri))

    def download_file(self, uri, local_path):
        self._copy_atomic(file_uri_path(uri), Path(local_path))

    def upload_dir(self, local_dir, uri):
        files = _relative_files(local_dir)
        root = file_uri_path(uri)
        for rel in files:
            self._copy_atomic(Path(local_dir) / rel, _safe_local_path(root, rel))
        return files

    def download_dir(self, uri, local_dir):
        root = file_uri_path(uri)
        files = [u[len(join_uri(uri)) + 1 :] for u in self.list(uri)]
        if not files:
            raise FileNotFoundError(f"no objects under {uri}")
        for rel in files:
            self._copy_atomic(root / rel, _safe_local_path(Path(local_dir), rel))
        return files

    def put_bytes(self, uri, data):
        path = file_uri_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}{_TMP_MARK}{uuid.uuid4().hex}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def get_bytes(self, uri):
        path = file_uri_path(uri)
        if not path.is_file():
            raise FileNotFoundError(uri)
        return path.read_bytes()

    def append_line(self, uri, line):
        """As :meth:`Storage.append_line`, under an exclusive ``flock`` of the file (writers on this host or on
        a shared volume whose locks reach every writer)."""
        import fcntl

        path = file_uri_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            f.seek(0)
            if line not in f.read().splitlines():
                f.write(line + "\n")

    def exists(self, uri):
        return file_uri_path(uri).is_file()

    def list(self, uri_prefix):
        root = file_uri_path(join_uri(uri_prefix))
        if not root.is_dir():
            return []
        base = join_uri(uri_prefix)
        return sorted(
            f"{base}/{p.relative_to(root).as_posix()}"
            for p in root.rglob("*")
            if p.is_file() and _TMP_MARK not in p.name
        )

    def stamps(self, uri_prefix):
        found = {}
        for uri in self.list(uri_prefix):
            try:
                stat = file_uri_path(uri).stat()
            except FileNotFoundError:  # deleted since the listing
                continue
            found[uri] = (stat.st_mtime, f"{stat.st_size}:{stat.st_mtime_ns}")
        return found

    def delete(self, uri):
        file_uri_path(uri).unlink(missing_ok=True)

    def delete_prefix(self, uri):
        root = file_uri_path(join_uri(uri))
        count = len(self.list(uri))
        shutil.rmtree(root, ignore_errors=True)
        return count

    @staticmethod
    def _copy_atomic(src: Path, dst: Path) -> None:
        if not src.is_file():
            raise FileNotFoundError(str(src))
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f"{dst.name}{_TMP_MARK}{uuid.uuid4().hex}")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


class StorageUnavailable(ConnectionError):
    """The SDK could not write to the experiment's storage (unreachable, refused, no such bucket); the
    message names the URI and the cause."""


def storage_errors() -> tuple[type[BaseException], ...]:
    """The exception types a :class:`Storage` operation raises when the store cannot be used: boto3's,
    botocore's and s3transfer's errors, and ``OSError`` (``file://``)."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError
    from s3transfer.exceptions import RetriesExceededError

    return Boto3Error, BotoCoreError, ClientError, RetriesExceededError, OSError


def is_transient(exc: BaseException) -> bool:
    """Whether an S3 error is worth retrying: connection failures, timeouts, throttling, 5xx.

    Args:
        exc: an exception raised by boto3, botocore or s3transfer.
    """
    from botocore.exceptions import (
        ChecksumError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        IncompleteReadError,
    )
    from s3transfer.exceptions import RetriesExceededError

    if isinstance(
        exc,
        (
            ConnectionError,
            HTTPClientError,
            IncompleteReadError,
            ChecksumError,
            RetriesExceededError,
            ConnectionResetError,
            TimeoutError,
        ),
    ):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or status == 429 or error.get("Code") in TRANSIENT_ERROR_CODES
    return False


def _is_conflict(exc: BaseException) -> bool:
    """A conditional write refused because the object changed (or appeared) since it was read."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code"))
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def _is_not_found(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code"))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("404", "NoSuchKey", "NotFound") or status == 404


class S3Storage(Storage):
    """``s3://bucket/key`` URIs on AWS S3 or any S3-compatible endpoint (MinIO, Ceph, GCS interop, moto).

    Args:
        client: a boto3 S3 client (thread-safe; shared by every operation).
        transfer_config: ``boto3.s3.transfer.TransferConfig`` for uploads and downloads.
        outage_timeout_s: how long one operation keeps retrying transient errors, in seconds.
        backoff_s: ``(first, cap)`` of the outer retry's exponential backoff, in seconds.
        endpoint_set: the endpoint was given (else boto3's default, AWS S3: messages say so).
    """

    scheme = "s3"

    def __init__(
        self,
        client,
        transfer_config,
        *,
        outage_timeout_s: float = DEFAULT_OUTAGE_TIMEOUT_S,
        backoff_s: tuple[float, float] = (0.5, 10.0),
        endpoint_set: bool = True,
    ):
        self.client = client
        self.transfer_config = transfer_config
        self.outage_timeout_s = outage_timeout_s
        self.backoff_s = backoff_s
        self.endpoint_set = endpoint_set

    def watch_reachability(self, report: Callable[[str | None], None], after_s: float = UNREACHABLE_AFTER_S) -> None:
        """Call ``report(message)`` once every request to the endpoint has failed for ``after_s`` seconds (no
        connection, a timeout, 5xx or throttling: botocore's retried attempts count), and ``report(None)`` at
        the first answer after that (any status below 500). Called from the thread that made the request.

        Args:
            report: the listener; the message names the endpoint, says when it is boto3's default because
                none was set, and gives the last error (no credentials: botocore's messages hold none).
            after_s: seconds of failures before the first report.
        """
        lock = threading.Lock()
        state = {"since": None, "reported": False}
        endpoint = self.client.meta.endpoint_url
        aws = not self.endpoint_set and "amazonaws.com" in endpoint
        where = f"{endpoint} (AWS S3: spec.storage.endpoint is not set)" if aws else endpoint

        def attempted(caught_exception=None, response=None, **_) -> None:
            status = (response[0].status_code if response else 0) or 0
            if caught_exception is None and status < 500 and status != 429:
                return
            error = caught_exception or f"HTTP {status}"
            now = time.monotonic()
            with lock:
                state["since"] = state["since"] or now
                due = not state["reported"] and now - state["since"] >= after_s
                state["reported"] |= due
            if due:
                report(
                    f"storage endpoint {where} has not answered for {now - state['since']:.0f} s: "
                    f"{type(error).__name__ if caught_exception else 'server error'}: {error}"
                )

        def answered(http_response=None, **_) -> None:
            if http_response is None or http_response.status_code >= 500 or http_response.status_code == 429:
                return
            with lock:
                was, state["since"], state["reported"] = state["reported"], None, False
            if was:
                report(None)

        self.client.meta.events.register_first("needs-retry.s3", attempted)  # before the retry handler answers
        self.client.meta.events.register("after-call.s3", answered)

    # -- retry -----------------------------------------------------------------------------------

    def _retrying(self, what: Callable[[], str]) -> tenacity.Retrying:
        """tenacity's retry loop for one operation: transient errors only, exponential backoff with full
        jitter from ``backoff_s``, no sleep that would end past ``outage_timeout_s``; then the last error
        is raised. ``what()`` names the operation in the warning logged before each retry."""
        first, cap = self.backoff_s

        def warn(state: tenacity.RetryCallState) -> None:
            log.warning(
                "storage unavailable during %s (%s); retry %d in %.1f s",
                what(),
                type(state.outcome.exception()).__name__,
                state.attempt_number,
                state.upcoming_sleep,
            )

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            wait=tenacity.wait_random_exponential(multiplier=first, max=cap),
            stop=tenacity.stop_before_delay(self.outage_timeout_s),
            before_sleep=warn,
            reraise=True,
        )

    def _retry(self, what: str, op: Callable[[], T]) -> T:
        """Run ``op`` until it succeeds, raises a non-transient error, or the outage timeout passes."""
        return self._retrying(lambda: what)(op)

    def _transfer_all(self, what: str, jobs: list[tuple[str, str, str]], upload: bool) -> None:
        """Run ``(local_path, bucket, key)`` jobs through one transfer manager; resend failed ones."""
        from boto3.s3.transfer import create_transfer_manager

        total, left = len(jobs), list(jobs)

        def transfer() -> None:  # the jobs left; those that fail stay left for the next attempt
            nonlocal left
            failed: list[tuple[str, str, str]] = []
            error: BaseException | None = None
            with create_transfer_manager(self.client, self.transfer_config) as manager:
                futures = [
                    (
                        job,
                        manager.upload(job[0], job[1], job[2]) if upload else manager.download(job[1], job[2], job[0]),
                    )
                    for job in left
                ]
                for job, future in futures:
                    try:
                        future.result()
                    except Exception as exc:  # noqa: BLE001 - classified below
                        if not upload and _is_not_found(exc):
                            raise FileNotFoundError(f"s3://{job[1]}/{job[2]}") from exc
                        if not is_transient(exc):
                            raise
                        failed.append(job)
                        error = exc
            left = failed
            if error is not None:
                raise error

        self._retrying(lambda: f"{what} ({len(left)} of {total} files left)")(transfer)

    # -- files -----------------------------------------------------------------------------------

    def upload_file(self, local_path, uri):
        bucket, key = split_s3_uri(uri)
        if not Path(local_path).is_file():
            raise FileNotFoundError(str(local_path))
        self._transfer_all(f"upload of {uri}", [(str(local_path), bucket, key)], upload=True)

    def download_file(self, uri, local_path):
        bucket, key = split_s3_uri(uri)
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        self._transfer_all(f"download of {uri}", [(str(local_path), bucket, key)], upload=False)

    def upload_dir(self, local_dir, uri):
        files = _relative_files(local_dir)
        bucket, key = split_s3_uri(join_uri(uri))
        jobs = [(str(Path(local_dir) / rel), bucket, f"{key}/{rel}" if key else rel) for rel in files]
        self._transfer_all(f"upload to {uri}", jobs, upload=True)
        return files

    def download_dir(self, uri, local_dir):
        base = join_uri(uri)
        files = [u[len(base) + 1 :] for u in self.list(base)]
        if not files:
            raise FileNotFoundError(f"no objects under {uri}")
        root = Path(local_dir)
        bucket, key = split_s3_uri(base)
        jobs = []
        for rel in files:
            target = _safe_local_path(root, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            jobs.append((str(target), bucket, f"{key}/{rel}" if key else rel))
        self._transfer_all(f"download of {uri}", jobs, upload=False)
        return files

    # -- objects ---------------------------------------------------------------------------------

    def put_bytes(self, uri, data):
        bucket, key = split_s3_uri(uri)
        self._retry(f"put of {uri}", lambda: self.client.put_object(Bucket=bucket, Key=key, Body=data))

    def get_bytes(self, uri):
        bucket, key = split_s3_uri(uri)

        def get() -> bytes:
            try:
                return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
            except Exception as exc:
                if _is_not_found(exc):
                    raise FileNotFoundError(uri) from exc
                raise

        return self._retry(f"get of {uri}", get)

    def append_line(self, uri, line):
        """As :meth:`Storage.append_line`, by read-modify-write with S3's conditional writes: the PUT carries
        ``If-Match`` with the ETag read (``If-None-Match: *`` when there was no object), and one refused
        (412 ``PreconditionFailed``, 409 ``ConditionalRequestConflict``: another writer came first) reads
        again. A store that ignores these headers lets a concurrent append lose a line."""
        bucket, key = split_s3_uri(uri)
        for _ in range(APPEND_ATTEMPTS):
            try:
                got = self._retry(f"get of {uri}", lambda: self.client.get_object(Bucket=bucket, Key=key))
                text, condition = got["Body"].read().decode(), {"IfMatch": got["ETag"]}
            except Exception as exc:
                if not _is_not_found(exc):
                    raise
                text, condition = "", {"IfNoneMatch": "*"}
            if line in text.splitlines():
                return
            body = (text + line + "\n").encode()
            try:
                self._retry(
                    f"append to {uri}", lambda: self.client.put_object(Bucket=bucket, Key=key, Body=body, **condition)
                )
                return
            except Exception as exc:
                if not _is_conflict(exc):
                    raise
            time.sleep(random.uniform(0.01, 0.1))  # let the writer that came first finish
        raise RuntimeError(f"append to {uri}: {APPEND_ATTEMPTS} conditional writes were refused")

    def exists(self, uri):
        bucket, key = split_s3_uri(uri)

        def head() -> bool:
            try:
                self.client.head_object(Bucket=bucket, Key=key)
                return True
            except Exception as exc:
                if _is_not_found(exc):
                    return False
                raise

        return self._retry(f"head of {uri}", head)

    def list(self, uri_prefix):
        return sorted(self.stamps(uri_prefix))

    def stamps(self, uri_prefix):
        bucket, key = split_s3_uri(join_uri(uri_prefix))
        prefix = f"{key}/" if key else ""

        def list_all() -> dict[str, tuple[float, str]]:
            found = {}
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    found[f"s3://{bucket}/{obj['Key']}"] = (
                        obj["LastModified"].timestamp(),
                        f"{obj['Size']}:{obj['ETag']}",
                    )
            return found

        return self._retry(f"list of {uri_prefix}", list_all)

    def delete(self, uri):
        bucket, key = split_s3_uri(uri)
        self._retry(f"delete of {uri}", lambda: self.client.delete_object(Bucket=bucket, Key=key))

    def delete_prefix(self, uri):
        uris = self.list(uri)
        for start in range(0, len(uris), 1000):  # DeleteObjects takes at most 1000 keys
            chunk = [split_s3_uri(u) for u in uris[start : start + 1000]]
            bucket = chunk[0][0]
            objects = [{"Key": k} for _, k in chunk]

            def delete_chunk() -> None:
                reply = self.client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
                if reply.get("Errors"):
                    first = reply["Errors"][0]
                    raise OSError(f"could not delete s3://{bucket}/{first.get('Key')}: {first.get('Code')}")

            self._retry(f"delete under {uri}", delete_chunk)
        return len(uris)


def open_storage(
    uri: str,
    endpoint: str | None = None,
    region: str | None = None,
    *,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    transfer_config=None,
    outage_timeout_s: float = DEFAULT_OUTAGE_TIMEOUT_S,
) -> Storage:
    """Open the storage for ``uri``'s scheme.

    Args:
        uri: any URI of the store: ``s3://bucket[/prefix]`` or ``file:///abs/path``.
        endpoint: S3 endpoint URL (MinIO, Ceph, moto, ...); default env ``KUBETUNE_STORAGE_ENDPOINT``,
            else botocore's own (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, AWS). With an endpoint,
            requests use path-style URLs and send checksums only where S3 requires them (boto3 >= 1.36
            sends CRC32 trailers by default, which several S3-compatible stores reject); the
            ``AWS_REQUEST_CHECKSUM_CALCULATION``/``AWS_RESPONSE_CHECKSUM_VALIDATION`` variables still win.
        region: default env ``KUBETUNE_STORAGE_REGION``, else boto3's (``AWS_REGION``, config file).
        access_key_id, secret_access_key, session_token: explicit credentials; default boto3's chain.
        transfer_config: a ``boto3.s3.transfer.TransferConfig``; default 8 MiB multipart threshold and
            part size, 10 concurrent requests.
        outage_timeout_s: how long an S3 operation keeps retrying an unavailable endpoint, in seconds.

    Returns:
        A :class:`Storage` (``S3Storage`` or ``FileStorage``).

    Raises:
        ValueError: unsupported scheme or malformed URI.
    """
    scheme = urlparse(uri).scheme
    if scheme == "file":
        file_uri_path(uri)
        return FileStorage()
    if scheme != "s3":
        raise ValueError(f"unsupported storage URI scheme {scheme!r} in {uri!r} (s3:// or file:///)")
    split_s3_uri(uri)

    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    endpoint = endpoint or os.environ.get(trial_env.STORAGE_ENDPOINT) or None
    region = region or os.environ.get(trial_env.STORAGE_REGION) or None
    if transfer_config is None:
        transfer_config = TransferConfig(
            multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=10, use_threads=True
        )
    compatible: dict = {}
    if endpoint:  # S3-compatible stores: path-style URLs; CRC checksums only where the API requires them
        compatible["s3"] = {"addressing_style": "path"}
        for option, variable in (
            ("request_checksum_calculation", "AWS_REQUEST_CHECKSUM_CALCULATION"),
            ("response_checksum_validation", "AWS_RESPONSE_CHECKSUM_VALIDATION"),
        ):
            compatible[option] = os.environ.get(variable, "when_required")
    config = Config(
        retries={
            "mode": os.environ.get("AWS_RETRY_MODE", "standard"),
            "max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS", "5")),
        },
        max_pool_connections=max(10, transfer_config.max_request_concurrency) + 10,
        connect_timeout=10,
        read_timeout=60,
        **compatible,
    )
    session = boto3.session.Session(
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        aws_session_token=session_token,
        region_name=region,
    )
    client = session.client("s3", endpoint_url=endpoint, config=config)
    return S3Storage(client, transfer_config, outage_timeout_s=outage_timeout_s, endpoint_set=bool(endpoint))
