"""return_free_memory: memory that Python and numpy freed goes back to the system (glibc, as on CI)."""
import json
import subprocess
import sys

_PROBE = r"""
import json, numpy as np
from reporter.models.heap import return_free_memory
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 1e6
base = rss()
a = [np.ones(120) for _ in range(300_000)]  # ~290 MB of small blocks, from malloc's heap (not mmap)
keep = np.ones(120)  # a live block above them: without a trim, the freed pages stay in the process
peak = rss()
del a
freed = rss()
ok = return_free_memory()
print(json.dumps({"base": base, "peak": peak, "freed": freed, "trimmed": rss(), "ok": ok}))
"""


def test_freed_heap_memory_is_returned_to_the_system():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout)
    assert m["ok"] is True
    assert m["peak"] - m["base"] > 250  # the blocks were really allocated
    assert m["freed"] - m["base"] > 200  # freeing alone kept most of them (the reason for the trim)
    assert m["trimmed"] - m["base"] < 80, m  # the trim gave them back
