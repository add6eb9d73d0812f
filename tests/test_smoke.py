from __future__ import annotations

import whos_online


def test_guest_and_user_are_listed(backend, client, alice):
    client.get("/plain/")
    assert whos_online.online_counts().guests == 1
    client.force_login(alice)
    response = client.get("/")
    counts = whos_online.online_counts()
    assert counts.users == 1
    assert [u.name for u in whos_online.online_users()] == ["alice"]
    assert b"alice" in response.content


def test_recorded_request_is_one_round_trip(
    backend, client, redis_calls, django_assert_num_queries, db
):
    client.get("/plain/", REMOTE_ADDR="198.51.100.1")  # loads the script into a fresh server
    redis_calls.clear()
    client.cookies.clear()
    with django_assert_num_queries(0):
        client.get("/plain/", REMOTE_ADDR="198.51.100.2")
    assert redis_calls.trips == [["EVALSHA"]]
    redis_calls.clear()
    client.get("/plain/", REMOTE_ADDR="198.51.100.2")
    assert redis_calls.trips == []
