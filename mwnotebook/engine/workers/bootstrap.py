"""Code the cluster runs in its workers besides the user's cells: the set-up after each start
(TensorFlow preload, mixed precision, XLA), and the hold/release of replaced objects between cells.
(The environment each worker starts with is decided in :mod:`mwnotebook.config.worker_env`.)"""

from __future__ import annotations

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import recipe_code

#: Imports TensorFlow without running any TF op, so that a later MultiWorkerMirroredStrategy can
#: still configure the process's collectives.
PRELOAD_CODE = "import tensorflow as _mw_tf  # preloaded by mwnotebook\n"


#: Installs the hold on replaced objects (see mwnotebook/worker/_lifetime.py) and the per-cell answers
#: in each execute_reply's metadata (mwnotebook/processes/runtime/reply.py). A remote host without
#: mwnotebook installed (or with an older one) still works: without the protection, or answering
#: through user expressions.
LIFETIME_CODE = ("try:\n    import mwnotebook.worker._lifetime as _mwl\n    _mwl.install()\n    del _mwl\n"
                 "except ImportError:\n    pass\n"
                 "try:\n    import mwnotebook.processes.runtime.reply as _mwr\n    _mwr.install()\n    del _mwr\n"
                 "except ImportError:\n    pass\n")

#: What mwnotebook's worker kernel does before ipykernel starts (``processes/worker_kernel.py``
#: ``serve``: a plain ``model.fit`` reports live curves with global batch values, ``tqdm.auto`` is
#: text, TensorFlow logs at a script's level), for a kernel that did not start as that kernel. Remote
#: agents and templates start that kernel wherever it is importable (processes/shipped/remote_agent.py
#: ``has_worker_kernel``), so this is a no-op there (the hooks are loaded); it is kept for a kernel
#: that imports mwnotebook only once running (a ``sys.path`` change in a cell or a recipe), which is
#: then a plain ``ipykernel_launcher`` with the hooks and without the rest of the worker runtime.
HOOKS_CODE = ("import sys as _mws\n"
              "if 'mwnotebook.processes.worker_hooks' not in _mws.modules:\n"
              "    try:\n"
              "        import mwnotebook.processes.worker_kernel as _mwk, mwnotebook.processes.worker_hooks as _mwh\n"
              "        _mwk.script_level_tensorflow_logs()\n        _mwh.install()\n        del _mwk, _mwh\n"
              "    except ImportError:\n        pass\n"
              "del _mws\n")

#: Run silently on every worker once a cell has ended on all of them.
RELEASE_CODE = ("try:\n    import mwnotebook.worker._lifetime as _mwl\n    _mwl.release()\n    del _mwl\n"
                "except ImportError:\n    pass\n")


#: Evaluated by each worker after every cell (an execute request's user_expressions): "True" when
#: replaced objects must be freed between cells (see mwnotebook/worker/_lifetime.py). Workers that
#: answer in their reply's metadata are not asked (mwnotebook/engine/workers/worker.py).
SETTLE_EXPRESSION = "__import__('mwnotebook.worker._lifetime', fromlist=['settle']).settle()"


def setup_code(spec: ClusterSpec) -> str:
    """Code executed silently in every worker right after it starts."""
    parts = [LIFETIME_CODE, HOOKS_CODE]
    if spec.preload or spec.mixed_precision or spec.xla:
        parts.append(PRELOAD_CODE)
    parts.append(recipe_code(spec))
    return "".join(parts)
