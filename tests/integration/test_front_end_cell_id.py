"""The id of the running notebook cell, as JupyterLab and Notebook 7 send it (``metadata.cellId``
of the execute request), read inside a real ipykernel: the run history matches an edited cell's
earlier runs by it (mwnotebook/frontend/notebook/magics.py front_end_cell_id)."""

from __future__ import annotations

import queue

from jupyter_client.manager import start_new_kernel

READ_ID = ("from mwnotebook.frontend.notebook.magics import front_end_cell_id\n"
           "print('cell id:', front_end_cell_id(get_ipython()))")


def _run(client, code: str, metadata: dict) -> str:
    """Send one execute request with the front end's ``metadata``; its stdout."""
    message = client.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                     "user_expressions": {}, "allow_stdin": False,
                                                     "stop_on_error": True}, metadata=metadata)
    client.shell_channel.send(message)
    sent = message["header"]["msg_id"]
    text = []
    while True:
        reply = client.get_iopub_msg(timeout=60)  # hang bound, not a timing
        if reply["parent_header"].get("msg_id") != sent:
            continue
        if reply["msg_type"] == "stream":
            text.append(reply["content"]["text"])
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            return "".join(text)


def test_the_cell_id_the_front_end_sends_is_read_in_the_kernel() -> None:
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        assert "cell id: 5f1c-edited-cell" in _run(client, READ_ID, {"cellId": "5f1c-edited-cell"})
        assert "cell id: None" in _run(client, READ_ID, {})  # nbclient sends none
    finally:
        try:
            client.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            pass
        client.stop_channels()
        manager.shutdown_kernel(now=True)
