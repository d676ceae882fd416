"""The pure parts of the sign-in limits: their keys, the wait a full one answers, the slots an attempt tries."""

from __future__ import annotations

import pytest

from gateway.settings import SessionSettings
from gateway.sign_in_limits import free_slots, retry_after, scopes
from parley.errors import ConfigError


def test_a_full_limit_waits_for_the_slot_that_frees_first() -> None:
    assert retry_after([], 3) is None
    assert retry_after([50, 10], 3) is None
    assert retry_after([50, 10, 30], 3) == 10.0
    # More taken than the limit (it was lowered): enough must free to leave one.
    assert retry_after([50, 10, 30, 40], 3) == 30.0
    assert retry_after([1] * 100, 0) is None  # 0: no limit
    assert retry_after([0, 5, 9], 3) == 0.0  # full, though a slot is about to free: not None


def test_an_attempt_tries_only_free_slots_below_the_limit() -> None:
    assert sorted(free_slots({0, 2}, 5)) == [1, 3, 4]
    assert free_slots({0, 1, 2}, 3) == []
    assert sorted(free_slots({7}, 3)) == [0, 1, 2]  # a slot above a lowered limit is not tried


def test_limit_scopes_hide_the_address_and_fold_the_email() -> None:
    keys = scopes("10.0.0.1", " Ann@Example.COM ")
    assert len({keys.address, keys.email_address, keys.email}) == 3
    assert not any("10.0.0.1" in key or "ann" in key for key in (keys.address, keys.email_address, keys.email))
    same_email = scopes("10.0.0.2", "ann@example.com")
    assert same_email.email == keys.email and same_email.email_address != keys.email_address
    other_email = scopes("10.0.0.1", "bob@example.com")
    assert other_email.address == keys.address and other_email.email_address != keys.email_address


def test_an_ipv6_host_counts_as_its_slash_64() -> None:
    one, other = scopes("2001:db8:1:2::1", "a@example.com"), scopes("2001:db8:1:2:ffff::9", "a@example.com")
    assert one.address == other.address and one.email_address == other.email_address
    assert scopes("2001:db8:1:3::1", "a@example.com").address != one.address
    assert scopes("::ffff:10.0.0.1", "a@example.com") == scopes("10.0.0.1", "a@example.com")


@pytest.mark.parametrize(
    "name", ["signin_per_address", "signin_per_email_address", "signin_per_email", "signin_familiar_s", "signin_window_s"]
)
def test_settings_refuse_negative_limits(name: str) -> None:
    with pytest.raises(ConfigError, match="PARLEY_SESSION_SIGNIN_"):
        SessionSettings(**{name: -1})
