"""Forked workers keep the template's module objects shared: no walk over every loaded module in the
kernel's start or in autograph (mwnotebook/processes/runtime/module_walk.py).

Real template, real forked kernels. The page check reads physical frame numbers from
``/proc/PID/pagemap``, which Linux shows only to a privileged reader: skipped elsewhere.
"""

from __future__ import annotations

import json

import pytest

from mwnotebook import Cluster

pytestmark = pytest.mark.tf

# Worker 0 lists the addresses of TensorFlow's module objects (touching its own copies only);
# worker 1, forked from the same template at the same addresses and not touched by that listing,
# says how many of those pages still are the template's (its parent's) frames.
LIST_ADDRESSES = """
import os, sys, json
if os.environ["MWNOTEBOOK_WORKER_INDEX"] == "0":
    with open({path!r}, "w") as fh:
        json.dump([id(m) for n, m in list(sys.modules.items()) if n.startswith("tensorflow.")], fh)
"""
COUNT_SHARED = """
import os, struct, json
def _frame(pid, addr):
    with open(f"/proc/{{pid}}/pagemap", "rb") as fh:
        fh.seek(addr // 4096 * 8)
        (v,) = struct.unpack("Q", fh.read(8))
    return v & ((1 << 55) - 1) if v >> 63 else None
if os.environ["MWNOTEBOOK_WORKER_INDEX"] == "1":
    _pages = {{a // 4096 * 4096 for a in json.load(open({path!r}))}}
    _mine = [_frame(os.getpid(), a) for a in _pages]
    _template = [_frame(os.getppid(), a) for a in _pages]
    print(json.dumps({{"pages": len(_pages), "readable": any(_mine),
                      "shared": sum(1 for m, t in zip(_mine, _template) if m and m == t)}}))
"""


def _shared_fraction(cluster: Cluster, path: str) -> float:
    cluster.run(LIST_ADDRESSES.format(path=path))
    answer = json.loads(cluster.run(COUNT_SHARED.format(path=path)).stdout(1))
    if not answer["readable"]:
        pytest.skip("physical frame numbers in /proc/PID/pagemap need a privileged reader")
    assert answer["pages"] > 300, answer  # TensorFlow's modules, on some hundreds of pages
    return answer["shared"] / answer["pages"]


def test_a_forked_workers_start_and_first_tf_function_leave_the_module_objects_shared(tmp_path, no_orphans):
    path = str(tmp_path / "addresses.json")
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        at_ready = _shared_fraction(cluster, path)
        # autograph converting a function used to walk every module (inspect_utils._fix_linecache_record)
        cluster.run("import tensorflow as tf\n@tf.function\ndef _f(x):\n    if x > 0:\n        x = x + 1\n"
                    "    return x\nprint(int(_f(tf.constant(1))))")
        after_autograph = _shared_fraction(cluster, path)
    # Measured: ~0.9 at ready and after the conversion; with the walks, under 0.1 (every page copied).
    print(f"shared: {at_ready:.2f} at ready, {after_autograph:.2f} after autograph")
    assert at_ready > 0.6, at_ready
    assert after_autograph > 0.6, after_autograph


def test_the_kernel_gets_the_module_lists_its_walks_would_have_made(no_orphans):
    probe = """
import sys, json
shell = get_ipython()
kernel = shell.kernel
files = set(kernel._kernel_modules)
walked = {m.__file__ for m in sys.modules.copy().values() if hasattr(m, "__file__") and m.__file__}
later = walked - files
print(json.dumps({
    "tf": sys.modules["tensorflow"].__file__ in files,
    "worker_kernel": sys.modules["mwnotebook.processes.worker_kernel"].__file__ in files,
    "module_walk": sys.modules["mwnotebook.processes.runtime.module_walk"].__file__ in files,
    "later": sorted(later)[:5],
    "debugger_same": getattr(getattr(kernel, "debugger", None), "kernel_modules", kernel._kernel_modules) is kernel._kernel_modules,
    "keys_tf": "tensorflow" in shell._sys_modules_keys,
    "keys_ipykernel": "ipykernel.kernelapp" in shell._sys_modules_keys,
    "new_since_start": isinstance(set(sys.modules) - shell._sys_modules_keys, set),
}))
"""
    with Cluster(workers=1, cpu=True) as cluster:
        answer = json.loads(cluster.run(probe).stdout(0))
        # autograph's linecache fix finds the same modules as a walk over sys.modules would
        answer["autograph"] = json.loads(cluster.run(
            "import sys, json, inspect\nfrom tensorflow.python.autograph.pyct import inspect_utils\n"
            "from mwnotebook.processes.runtime import module_walk\n"
            "from tensorflow.python.ops import array_ops\nfile = inspect.getfile(array_ops.identity)\n"
            "print(json.dumps([sorted(m.__name__ for m in module_walk.modules_with_file(file)),\n"
            "  sorted(m.__name__ for m in list(sys.modules.values()) if getattr(m, '__file__', None) == file),\n"
            "  getattr(inspect_utils._fix_linecache_record, 'mwnotebook_no_module_walk', False)]))").stdout(0))
    assert answer["tf"] and answer["worker_kernel"] and answer["module_walk"], answer
    # modules imported after the kernel started are the only ones missing from its list
    assert all(not f.endswith(("tensorflow/__init__.py", "ipykernel/kernelapp.py")) for f in answer["later"]), answer
    assert answer["debugger_same"], answer
    assert answer["keys_tf"] and answer["keys_ipykernel"] and answer["new_since_start"], answer
    found, walked, replaced = answer["autograph"]
    assert found == walked and found, answer
    assert replaced, answer
