"""Children of ``multiprocessing`` write what they queued when they end, however they were started
(fork, forkserver, spawn) and however they end: a ``Process`` joined, a ``Pool`` closed and
joined, or ``with Pool()``, whose exit terminates its workers with SIGTERM.

A script of the site's own (``tests/support/pool_children.py``) sets Django up and starts four
children, each of which serves pages to new guests through Django's test client, on a real
redis-server, with ``COUNT_HITS`` on and a ``FLUSH_INTERVAL`` long enough that no flushing thread
writes anything before the children end: what Redis holds is what they wrote as they ended.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.processes import ROOT, load_env, run

SCRIPT = ROOT / "tests" / "support" / "pool_children.py"
#: What the script prints, one line per way of running children.
FORMS = ("Process", "Pool", "with-Pool")
CHILDREN, PAGES = 4, 5

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="fork and forkserver are Unix's"),
]


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_children_write_every_visit_and_page_hit_as_they_end(real_redis_url, tmp_path, method):
    result = run(
        [sys.executable, str(SCRIPT), method, str(CHILDREN), str(PAGES)],
        env=load_env(real_redis_url, tmp_path),
    )

    assert result.returncode == 0, result.stderr
    served = CHILDREN * PAGES
    assert result.stdout.splitlines() == [f"{form} {served} {served}" for form in FORMS], (
        result.stderr
    )
