import threading

from designer.ui.bounded_cache import BoundedCache


def test_bytes_entries_and_age_bound_the_cache(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("designer.ui.bounded_cache.time.monotonic", lambda: clock[0])
    cache = BoundedCache(max_bytes=100, max_entries=3, ttl_seconds=60)
    for key in "abc":
        cache.get(key, lambda: 30, lambda value: value)
    assert cache.keys() == ["a", "b", "c"] and cache.nbytes() == 90
    cache.get("a", lambda: 0, lambda value: value)  # a hit: no new value, a is most recent
    cache.get("d", lambda: 30, lambda value: value)  # 120 bytes: the least recent (b) goes
    assert cache.keys() == ["c", "a", "d"]
    assert cache.get("huge", lambda: 500, lambda value: value) == 500
    assert cache.keys() == ["c", "a", "d"], "a value larger than the whole cache is not kept"
    clock[0] = 61.0
    made = []
    cache.get("a", lambda: made.append(1) or 30, lambda value: value)
    assert made == [1] and cache.keys() == ["a"], "entries older than the TTL are dropped"


def test_sessions_share_it_safely():
    cache = BoundedCache(max_bytes=1 << 20, max_entries=8, ttl_seconds=60)
    results = []

    def worker(n):
        for i in range(200):
            results.append(cache.get(i % 16, lambda i=i: i % 16, lambda value: 1))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 800 and len(cache.keys()) <= 8
