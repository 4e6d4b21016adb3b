"""Job logs are read from their end (issue 50 item 2): the kubelet's `limitBytes` keeps the FIRST bytes of what it
selects, so once a job had logged 16 KiB its status, throughput and `%gpu_logs` froze on old lines, while the dev
agent's log source answered with the last bytes and no test could see it. Now the agent answers as the kubelet does
(`tailLines`, then `limitBytes` from the selection's start) and the service asks for the end (log_tail.read_tail)."""
from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.services.jobs.kube import read_log
from jupyterhub_gpu.services.jobs.log_tail import last_bytes, read_tail
from jupyterhub_gpu_dev.agent_logs import AgentLogs, kubelet_selection


def kubelet(data: bytes, calls: list | None = None):
    async def fetch(tail_lines, limit_bytes):
        if calls is not None:
            calls.append((tail_lines, limit_bytes))
        return kubelet_selection(io.BytesIO(data), tail_lines, limit_bytes)
    return fetch


def test_the_agent_answers_tail_lines_then_limit_bytes_from_the_selections_start_as_the_kubelet():
    data = b"a\nbb\nccc\n"
    assert kubelet_selection(io.BytesIO(data), None, None) == data
    assert kubelet_selection(io.BytesIO(data), None, 3) == b"a\nb"  # limitBytes alone: the FIRST bytes
    assert kubelet_selection(io.BytesIO(data), 2, None) == b"bb\nccc\n"
    assert kubelet_selection(io.BytesIO(data), 2, 3) == b"bb\n"  # the selection's start, not the log's end
    assert kubelet_selection(io.BytesIO(data), 0, None) == b""
    assert kubelet_selection(io.BytesIO(data), 9, None) == data
    assert kubelet_selection(io.BytesIO(b"a\nhalf"), 1, None) == b"half"  # a line without its newline yet
    assert kubelet_selection(io.BytesIO(b""), 5, 10) == b""


async def test_a_job_that_logged_more_than_the_tail_shows_its_newest_lines(tmp_path):
    lines = [f"step {i} " + "x" * 60 for i in range(5000)]  # ~340 KiB
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "team-ds_p.log").write_text("\n".join(lines) + "\n")
    source = AgentLogs(state_dir=str(tmp_path))
    head = await source.fetch("team-ds", "p", None, 16 * 1024)
    assert head.startswith(b"step 0 ") and b"step 4999" not in head  # what limitBytes alone answered: frozen
    tail = await read_log(source, "team-ds", "p", 16 * 1024)
    assert tail.endswith("step 4999 " + "x" * 60 + "\n") and len(tail.encode()) <= 16 * 1024
    assert tail.startswith("step ") and tail.splitlines()[0] in lines  # whole lines
    assert await read_log(source, "team-ds", "gone", 1024) == ""


async def test_long_lines_take_a_second_call_with_fewer_lines_and_still_end_at_the_newest():
    data = ("".join(f"{i} " + "y" * 5000 + "\n" for i in range(200))).encode()
    calls: list = []
    text = await read_tail(kubelet(data, calls), 16 * 1024)
    assert text.endswith("199 " + "y" * 5000 + "\n") and len(calls) == 2 and calls[1][0] < calls[0][0], calls


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)),
                        max_size=300), max_size=400), st.booleans(), st.integers(16, 4096))
async def test_the_tail_is_always_the_logs_last_bytes_from_a_whole_line(lines, ends_with_newline, tail_bytes):
    data = "\n".join(lines).encode() + (b"\n" if ends_with_newline and lines else b"")
    got = (await read_tail(kubelet(data), tail_bytes)).encode()
    assert len(got) <= tail_bytes
    if len(data) <= tail_bytes:
        assert got == data
        return
    whole = data.decode(errors="ignore")
    assert whole.endswith(got.decode())  # the end of the log, newest line included; a character cut in two dropped
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    if len(last) < tail_bytes:  # from a line's start (a lone line longer than the window shows its end)
        assert got == b"" or data[: len(data) - len(got)].endswith(b"\n"), got[:40]
    if max(map(len, data.split(b"\n"))) * 8 < tail_bytes:  # usual lines: the whole window
        assert got == last_bytes(data, tail_bytes).encode()
