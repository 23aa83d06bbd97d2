"""``rl-insight profile analyze``: which rank, in which RL phase, held a profiled step.

Reads every rank's trace of one step as verl's profiler wrote it (torch profiler ``.json.gz``,
NVTX ``nsys export --type jsonlines``, Ascend MSTX ``trace_view.json``), streaming, one process
per file; the per-phase figures and the one-line answer are pure functions of what the readers
return (``analysis.py``)."""
