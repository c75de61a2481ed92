"""Collector tokens: minting, verification, forgery and stale attempts, and the key Secret's encoding."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re

import pytest

from kubetune_operator.tokens import (
    KEY_BYTES,
    SECRET_DATA_KEY,
    key_from_secret_data,
    key_secret_data,
    mint_token,
    new_key,
    token_claims,
    verify_token,
)

KEY = bytes(range(32))


def test_token_names_its_claims_and_is_deterministic():
    token = mint_token(KEY, "team-a", "mnist-00003", 0, "u")
    assert re.fullmatch(r"[A-Za-z0-9_-]+\.[0-9a-f]{64}", token)
    assert token == mint_token(KEY, "team-a", "mnist-00003", 0, "u")
    assert token_claims(KEY, token) == ("team-a", "mnist-00003", 0, "u")


def test_token_mac_is_hmac_sha256_of_the_fields():
    message = json.dumps(["kubetune.io/v1alpha1 collector token", "team-a", "mnist-00003", 2, "u"]).encode()
    mac = mint_token(KEY, "team-a", "mnist-00003", 2, "u").split(".")[1]
    assert mac == hmac.new(KEY, message, hashlib.sha256).hexdigest()


def test_claims_changed_under_a_genuine_mac_are_refused():
    mac = mint_token(KEY, "team-a", "mnist-00003", 1, "u").split(".")[1]
    for claims in (
        ["team-a", "mnist-00003", 2, "u"],
        ["team-b", "mnist-00003", 1, "u"],
        ["team-a", "mnist-00003", True, "u"],
        ["team-a", "mnist-00003", -1, "u"],
        ["team-a", "mnist-00003", 1, "another uid"],
        ["team-a", "mnist-00003", 1],
        {"a": 1},
    ):
        encoded = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        assert token_claims(KEY, f"{encoded}.{mac}") is None, claims


def test_verify_accepts_the_right_token():
    token = mint_token(KEY, "team-a", "mnist-00003", 1, "u")
    assert verify_token(KEY, token, "team-a", "mnist-00003", 1, "u")


@pytest.mark.parametrize(
    "namespace, trial, attempt",
    [
        ("team-b", "mnist-00003", 1),  # another namespace
        ("team-a", "mnist-00004", 1),  # another trial
        ("team-a", "mnist-00003", 0),  # an earlier attempt's pod
        ("team-a", "mnist-00003", 2),  # a later attempt
    ],
)
def test_token_is_bound_to_namespace_trial_and_attempt(namespace, trial, attempt):
    token = mint_token(KEY, "team-a", "mnist-00003", 1, "u")
    assert not verify_token(KEY, token, namespace, trial, attempt, "u")


def test_stale_attempt_token_is_rejected_after_a_retry():
    old = mint_token(KEY, "ns", "t-00000", 0, "u")
    assert verify_token(KEY, old, "ns", "t-00000", 0, "u")
    assert not verify_token(KEY, old, "ns", "t-00000", 1, "u")


def test_forged_tokens_are_rejected():
    token = mint_token(KEY, "ns", "t", 0, "u")
    flipped = token[:-1] + ("0" if token[-1] != "0" else "1")
    other_key = mint_token(bytes(32), "ns", "t", 0, "u")
    plain_sha = hashlib.sha256(b"ns/t/0").hexdigest()
    bare_mac = token.split(".")[1]
    for forged in (
        flipped,
        token[:-1],
        token + "0",
        token.upper(),
        other_key,
        plain_sha,
        "",
        " " + token,
        bare_mac,
        token + ".x",
        "." + bare_mac,
    ):
        assert not verify_token(KEY, forged, "ns", "t", 0, "u"), forged


@pytest.mark.parametrize(
    "junk", [None, 42, b"bytes", "\u00e9" * 64, "\ud800" * 64, "\ud800.\ud800", "!!.00", "a" * 5000]
)
def test_malformed_tokens_are_false_not_errors(junk):
    assert verify_token(KEY, junk, "ns", "t", 0, "u") is False


def test_fields_cannot_be_shifted_between_namespace_and_trial():
    assert mint_token(KEY, "a", "b-c", 0, "u") != mint_token(KEY, "a-b", "c", 0, "u")
    assert mint_token(KEY, "a", "b", 10, "u") != mint_token(KEY, "a", "b1", 0, "u")


def test_short_keys_are_refused():
    with pytest.raises(ValueError):
        mint_token(b"short", "ns", "t", 0, "u")
    with pytest.raises(ValueError):
        verify_token(b"\x00" * (KEY_BYTES - 1), "00" * 32, "ns", "t", 0, "u")


def test_new_key_is_random_and_long_enough():
    keys = {new_key() for _ in range(8)}
    assert len(keys) == 8 and all(len(k) == KEY_BYTES for k in keys)


def test_key_secret_round_trip():
    key = new_key()
    data = key_secret_data(key)
    assert list(data) == [SECRET_DATA_KEY] and base64.b64decode(data[SECRET_DATA_KEY]) == key
    assert key_from_secret_data(data) == key


@pytest.mark.parametrize(
    "data",
    [
        None,
        {},
        {SECRET_DATA_KEY: ""},
        {SECRET_DATA_KEY: "not base64!"},
        {SECRET_DATA_KEY: base64.b64encode(b"short").decode()},
        {"other": "eA=="},
    ],
)
def test_bad_key_secrets_are_refused(data):
    with pytest.raises(ValueError):
        key_from_secret_data(data)
