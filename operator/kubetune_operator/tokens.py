"""Per-trial collector tokens: (namespace, trial, attempt, Trial uid), signed with HMAC-SHA256 under the operator's key.

The reconcile loop mints a token for each trial pod (``KUBETUNE_TOKEN``, see
:func:`kubetune_operator.builders.build_pod`). A token names what it is worth
(``<base64url JSON [namespace, trial, attempt, uid]>.<64 hex digits of HMAC>``), so
the collector checks the ``Authorization: Bearer`` header of a results request
(:func:`token_claims`) before it reads the body, then that the body names the
same namespace, trial and attempt. The Trial's uid tells an Experiment deleted
and created again under its name from the earlier one. A token is worth one attempt of
one trial: a pod of an earlier attempt, or of another trial, cannot report for
this one. The key lives in a Secret only the operator reads
(:func:`key_secret_data` / :func:`key_from_secret_data`); tokens carry no expiry
because an attempt's pod is short-lived and a new attempt gets a new token.
Never log keys or tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Mapping

#: Bytes of key :func:`new_key` makes; shorter keys are refused (RFC 2104 §3: at least the hash's output length).
KEY_BYTES = 32
#: Key of the HMAC key in the Secret's ``data``.
SECRET_DATA_KEY = "hmac-key"
_DOMAIN = "kubetune.io/v1alpha1 collector token"


def new_key() -> bytes:
    """Return a fresh random key of :data:`KEY_BYTES` bytes from the OS's CSPRNG."""
    return secrets.token_bytes(KEY_BYTES)


def _message(namespace: str, trial: str, attempt: int, uid: str) -> bytes:
    # JSON keeps the fields unambiguous whatever characters they hold.
    return json.dumps([_DOMAIN, namespace, trial, int(attempt), uid]).encode()


def _mac(key: bytes, namespace: str, trial: str, attempt: int, uid: str) -> str:
    if len(key) < KEY_BYTES:
        raise ValueError(f"HMAC key must have at least {KEY_BYTES} bytes")
    return hmac.new(key, _message(namespace, trial, attempt, uid), hashlib.sha256).hexdigest()


def mint_token(key: bytes, namespace: str, trial: str, attempt: int, uid: str) -> str:
    """Return the token of ``attempt`` of Trial ``namespace/trial`` whose ``metadata.uid`` is ``uid``.

    Returns:
        ``<claims>.<mac>``: the unpadded base64url of the JSON ``[namespace, trial, attempt, uid]``, a dot,
        and the 64 lower-case hex digits of HMAC-SHA256 (RFC 2104) over the domain and those fields;
        safe in URLs and headers.

    Raises:
        ValueError: ``key`` is shorter than :data:`KEY_BYTES` bytes.
    """
    claims = base64.urlsafe_b64encode(json.dumps([namespace, trial, int(attempt), uid]).encode()).rstrip(b"=")
    return f"{claims.decode()}.{_mac(key, namespace, trial, attempt, uid)}"


def token_claims(key: bytes, token: object) -> tuple[str, str, int, str] | None:
    """Return ``(namespace, trial, attempt, uid)`` of a genuine ``token``, else None; MACs compared in constant time.

    Any non-string or malformed ``token`` is None, never an exception.

    Raises:
        ValueError: ``key`` is shorter than :data:`KEY_BYTES` bytes (a configuration error).
    """
    if len(key) < KEY_BYTES:
        raise ValueError(f"HMAC key must have at least {KEY_BYTES} bytes")
    if not isinstance(token, str) or token.count(".") != 1 or len(token) > 2048:
        return None
    encoded, mac = token.split(".")
    try:
        claims = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except ValueError:
        return None
    if not (
        isinstance(claims, list)
        and len(claims) == 4
        and isinstance(claims[0], str)
        and isinstance(claims[1], str)
        and type(claims[2]) is int
        and claims[2] >= 0
        and isinstance(claims[3], str)
    ):
        return None
    expected = _mac(key, *claims)
    if not hmac.compare_digest(expected.encode(), mac.encode("utf-8", "surrogatepass")):
        return None
    return claims[0], claims[1], claims[2], claims[3]


def verify_token(key: bytes, token: object, namespace: str, trial: str, attempt: int, uid: str) -> bool:
    """True if ``token`` is the token of ``attempt`` of Trial ``namespace/trial`` with ``uid``
    (see :func:`token_claims`).

    Raises:
        ValueError: ``key`` is shorter than :data:`KEY_BYTES` bytes (a configuration error).
    """
    return token_claims(key, token) == (namespace, trial, attempt, uid)


def key_secret_data(key: bytes) -> dict[str, str]:
    """Return the ``data`` of the key Secret for ``key`` (base64, as the API expects)."""
    return {SECRET_DATA_KEY: base64.b64encode(key).decode()}


def key_from_secret_data(data: Mapping[str, str] | None) -> bytes:
    """Return the key stored in a Secret's ``data`` (as read from the API: base64 values).

    Raises:
        ValueError: the entry is missing, not base64, or shorter than :data:`KEY_BYTES` bytes.
    """
    encoded = (data or {}).get(SECRET_DATA_KEY)
    if not encoded:
        raise ValueError(f"the key Secret has no data[{SECRET_DATA_KEY!r}]")
    try:
        key = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise ValueError(f"data[{SECRET_DATA_KEY!r}] of the key Secret is not base64") from None
    if len(key) < KEY_BYTES:
        raise ValueError(f"the key in the Secret has {len(key)} bytes, fewer than {KEY_BYTES}")
    return key
