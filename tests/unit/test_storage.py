"""Contract tests of kubetune.storage: the same suite over file:// and s3:// (moto's real HTTP server)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError
from conftest_storage import aws_env, moto_endpoint, new_bucket, s3_client  # noqa: F401 - fixtures

from kubetune.storage import FileStorage, S3Storage, file_uri_path, join_uri, open_storage, split_s3_uri

MIB = 1 << 20


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path, aws_env):  # noqa: F811 - fixture
    """``(storage, base_uri)`` for each scheme; S3 with a 5 MiB multipart threshold and part size."""
    if request.param == "file":
        base = f"file://{tmp_path / 'bucket'}/prefix"
        return open_storage(base), base
    endpoint = request.getfixturevalue("moto_endpoint")
    base = f"s3://{new_bucket(endpoint)}/prefix"
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=4)
    return open_storage(base, endpoint=endpoint, transfer_config=config), base


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_upload_and_download_dir_round_trip_nested_and_multipart_files(store, tmp_path):
    storage, base = store
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_bytes(b"top")
    (src / ".tune_metadata").write_bytes(b"\x80\x04meta")
    (src / "a" / "b" / "deep.bin").write_bytes(os.urandom(1000))
    (src / "a" / "empty.txt").write_bytes(b"")
    (src / "big.bin").write_bytes(os.urandom(12 * MIB + 17))  # three parts at 5 MiB

    uploaded = storage.upload_dir(src, join_uri(base, "ckpt"))
    assert uploaded == sorted(_tree(src))
    dest = tmp_path / "dest"
    downloaded = storage.download_dir(join_uri(base, "ckpt") + "/", dest)

    assert sorted(downloaded) == sorted(_tree(src))
    assert _tree(dest) == _tree(src)
    if isinstance(storage, S3Storage):
        bucket, key = split_s3_uri(join_uri(base, "ckpt", "big.bin"))
        etag = s3_client(storage.client.meta.endpoint_url).head_object(Bucket=bucket, Key=key)["ETag"]
        assert etag.strip('"').endswith("-3"), f"not a 3-part multipart upload: ETag {etag}"


def test_bytes_exists_list_and_delete(store):
    storage, base = store
    storage.put_bytes(join_uri(base, "ckpt_1", "x"), b"1")
    storage.put_bytes(join_uri(base, "ckpt_1", "sub", "y"), b"2")
    storage.put_bytes(join_uri(base, "ckpt_10", "x"), b"10")
    storage.put_bytes(join_uri(base, "ckpt_1", "x"), b"1 again")

    assert storage.get_bytes(join_uri(base, "ckpt_1", "x")) == b"1 again"
    assert storage.exists(join_uri(base, "ckpt_1", "sub", "y"))
    assert not storage.exists(join_uri(base, "ckpt_1"))  # a "directory" is not an object
    assert not storage.exists(join_uri(base, "missing"))
    assert storage.list(join_uri(base, "ckpt_1")) == [
        join_uri(base, "ckpt_1", "sub", "y"),
        join_uri(base, "ckpt_1", "x"),
    ]
    assert len(storage.list(base)) == 3
    assert storage.list(join_uri(base, "nothing")) == []

    assert storage.delete_prefix(join_uri(base, "ckpt_1")) == 2
    assert storage.list(base) == [join_uri(base, "ckpt_10", "x")]
    storage.delete(join_uri(base, "ckpt_10", "x"))
    storage.delete(join_uri(base, "ckpt_10", "x"))  # absent: no error
    assert storage.list(base) == []


def test_append_line_adds_each_line_once_when_writers_interleave(store):
    """Another writer appends between this writer's read and its write: the conditional write is refused
    (S3: If-None-Match on a new object, If-Match on the ETag read), this writer reads again and both lines
    are kept; a line already there is not added again (a retried pod)."""
    storage, base = store
    uri = join_uri(base, "pbt_global.txt")
    if isinstance(storage, S3Storage):
        other, get, pending = (
            open_storage(base, endpoint=storage.client.meta.endpoint_url),
            storage.client.get_object,
            [],
        )

        def read_then_the_other_appends(**kwargs):
            try:
                return get(**kwargs)
            finally:
                if pending:
                    other.append_line(uri, pending.pop())

        storage.client.get_object = read_then_the_other_appends
        for k in (1, 2):  # 1: the object appears after this writer found none; 2: it changes after the read
            pending.append(f"other {k}")
            storage.append_line(uri, f"mine {k}")
        assert storage.get_bytes(uri).decode().splitlines() == ["other 1", "mine 1", "other 2", "mine 2"]
    else:
        writers = [
            threading.Thread(target=lambda w=w: [storage.append_line(uri, f"w{w} {i}") for i in range(20)])
            for w in range(4)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        lines = storage.get_bytes(uri).decode().splitlines()
        assert sorted(lines) == sorted(f"w{w} {i}" for w in range(4) for i in range(20))
    before = storage.get_bytes(uri)
    storage.append_line(uri, before.decode().splitlines()[1])
    assert storage.get_bytes(uri) == before


def test_missing_objects_raise_file_not_found(store, tmp_path):
    storage, base = store
    with pytest.raises(FileNotFoundError):
        storage.get_bytes(join_uri(base, "absent.json"))
    with pytest.raises(FileNotFoundError):
        storage.download_dir(join_uri(base, "absent"), tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        storage.download_file(join_uri(base, "absent.bin"), tmp_path / "f")


def test_single_file_round_trip(store, tmp_path):
    storage, base = store
    (tmp_path / "r.json").write_text('{"a": 1}\n')
    storage.upload_file(tmp_path / "r.json", join_uri(base, "t", "result.json"))
    storage.download_file(join_uri(base, "t", "result.json"), tmp_path / "out" / "r.json")
    assert (tmp_path / "out" / "r.json").read_text() == '{"a": 1}\n'


def test_s3_error_that_is_not_transient_raises_at_once(moto_endpoint, aws_env):  # noqa: F811
    storage = open_storage("s3://no-such-bucket-kubetune", endpoint=moto_endpoint, outage_timeout_s=60)
    with pytest.raises(ClientError) as info:
        storage.put_bytes("s3://no-such-bucket-kubetune/x", b"1")
    assert info.value.response["Error"]["Code"] == "NoSuchBucket"


def test_s3_endpoint_comes_from_kubetune_env(moto_endpoint, aws_env, monkeypatch):  # noqa: F811
    bucket = new_bucket(moto_endpoint)
    monkeypatch.setenv("KUBETUNE_STORAGE_ENDPOINT", moto_endpoint)
    storage = open_storage(f"s3://{bucket}")
    storage.put_bytes(f"s3://{bucket}/k", b"v")
    assert s3_client(moto_endpoint).get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_s3_unreachable_endpoint_retries_until_the_outage_timeout(aws_env, caplog):  # noqa: F811
    storage = open_storage("s3://b", endpoint="http://127.0.0.1:9", outage_timeout_s=3.0)
    storage.backoff_s = (0.05, 0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kubetune.storage"), pytest.raises(Exception) as info:
        storage.get_bytes("s3://b/x")
    assert "Could not connect" in str(info.value)  # the last error itself, not a wrapper
    retries = [r.getMessage() for r in caplog.records if "storage unavailable during get of s3://b/x" in r.getMessage()]
    assert retries and "retry 1 in" in retries[0]  # botocore's own 5 tries come first, each time
    assert time.monotonic() - started < 3.0 + 5  # no sleep that ends past the timeout (plus botocore's own tries)


def test_uri_validation(tmp_path):
    assert isinstance(open_storage(f"file://{tmp_path}"), FileStorage)
    assert file_uri_path("file:///a/b%20c") == Path("/a/b c")
    assert split_s3_uri("s3://bucket/a/b") == ("bucket", "a/b")
    assert join_uri("s3://b/p/", "/x/", "y") == "s3://b/p/x/y"
    for bad in ("file://relative/path", "file:relative"):
        with pytest.raises(ValueError):
            file_uri_path(bad)
    with pytest.raises(ValueError):
        open_storage("gs://bucket/x")
    with pytest.raises(ValueError):
        split_s3_uri("s3:///key-without-bucket")
