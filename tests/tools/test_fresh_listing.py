"""When a server's last tool listing may stand in for asking again (tools/fresh_listing.py): only a
trusted server's own `ttlMs`, counted from when the listing was asked, never past MAX_FRESH_S, and
never after the server said its tools changed. The clock is a list the test moves."""

from __future__ import annotations

import math

import pytest

from boundloop.tools.fresh_listing import MAX_FRESH_S, FreshListing

TOOLS = ["lookup"]


def listing(*, trusted: bool = True) -> tuple[FreshListing[list[str]], list[float]]:
    now = [100.0]
    return FreshListing(trusted=trusted, clock=lambda: now[0]), now


def test_a_trusted_servers_listing_stands_for_its_ttl_counted_from_when_it_was_asked():
    fresh, now = listing()
    asked = fresh.ask()
    now[0] += 0.3  # the listing took 0.3 s to come back: that time is part of its ttl
    fresh.keep(TOOLS, 1_000, asked)
    assert fresh.standing() == TOOLS
    now[0] = 100.999
    assert fresh.standing() == TOOLS
    now[0] = 101.0
    assert fresh.standing() is None


def test_an_untrusted_servers_ttl_is_not_taken():
    fresh, _ = listing(trusted=False)
    fresh.keep(TOOLS, 60_000, fresh.ask())
    assert fresh.standing() is None


@pytest.mark.parametrize("ttl_ms", [0, -1, -60_000, math.nan])
def test_no_ttl_a_negative_one_or_nan_lets_nothing_stand(ttl_ms):
    fresh, _ = listing()
    fresh.keep(TOOLS, ttl_ms, fresh.ask())  # type: ignore[arg-type]
    assert fresh.standing() is None


@pytest.mark.parametrize("ttl_ms", [3_600_000, 10**18, math.inf])
def test_a_long_ttl_stands_no_longer_than_the_cap(ttl_ms):
    fresh, now = listing()
    fresh.keep(TOOLS, ttl_ms, fresh.ask())  # type: ignore[arg-type]
    now[0] += MAX_FRESH_S - 0.01
    assert fresh.standing() == TOOLS
    now[0] += 0.01
    assert fresh.standing() is None


def test_a_change_announced_while_a_listing_was_on_its_way_keeps_that_listing_from_standing():
    fresh, _ = listing()
    asked = fresh.ask()
    fresh.forget()  # tools/list_changed arrived before the answer was kept: it may predate the change
    fresh.keep(TOOLS, 60_000, asked)
    assert fresh.standing() is None
    fresh.keep(TOOLS, 60_000, fresh.ask())  # a listing asked after the change stands
    assert fresh.standing() == TOOLS


def test_forget_ends_a_standing_listing_at_once():
    fresh, _ = listing()
    fresh.keep(TOOLS, 60_000, fresh.ask())
    fresh.forget()
    assert fresh.standing() is None

