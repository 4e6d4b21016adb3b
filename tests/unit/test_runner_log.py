"""The runner's log and progress lines (pure): the user's cell numbers, no papermill boilerplate."""
from __future__ import annotations

from jupyterhub_gpu.runner.main import injected_at, log_line, user_cell

TAGGED = [{"cell_type": "markdown"}, {"cell_type": "code", "metadata": {"tags": ["parameters"]}},
          {"cell_type": "code"}, {"cell_type": "code"}]


def test_the_injected_parameters_cell_is_not_counted():
    at = injected_at(TAGGED, {"steps": 3})
    assert at == 3  # papermill inserts it right after the tagged cell
    assert [user_cell(n, at) for n in range(1, 6)] == [1, 2, None, 3, 4]
    untagged = injected_at([{"cell_type": "code"}], {"steps": 3})
    assert untagged == 1 and [user_cell(n, untagged) for n in (1, 2)] == [None, 1]
    assert injected_at(TAGGED, {}) is None and user_cell(4, None) == 4


def test_log_drops_papermill_boilerplate_and_rich_output_stand_ins():
    for noise in ("Input Notebook:  /tmp/x.input.ipynb", "Output Notebook: /out/x.ipynb",
                  "Executing notebook with kernel: python3", "Ending Cell 3-----",
                  "Input notebook does not contain a cell with tag 'parameters'",
                  "<IPython.core.display.HTML object>", "<IPython.core.display.Markdown object>",
                  "<Figure size 640x480 with 1 Axes>", "   "):
        assert log_line(noise) is None, noise
    assert log_line("step 1\n<IPython.core.display.HTML object>\nstep 2\n") == "step 1\nstep 2"
    assert log_line("loss <0.5> object") == "loss <0.5> object"
    assert log_line("ValueError: boom") == "ValueError: boom"
