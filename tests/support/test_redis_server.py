from __future__ import annotations

import pytest

from tests.support.redis_server import database_of_worker


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/0", "", "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0", "gw0", "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379", "gw3", "redis://127.0.0.1:6379/3"),
        (
            "redis://:secret@db.example:6380/5?protocol=3",
            "gw1",
            "redis://:secret@db.example:6380/1?protocol=3",
        ),
    ],
)
def test_each_xdist_worker_takes_a_database_of_its_own_on_redis_url(url, worker, expected):
    assert database_of_worker(url, worker) == expected
