"""The keys verl's fully_async trainer builds at run time (``f"fully_async/{key}"``), read from
verl 0.9.1 and main: verl/experimental/fully_async_policy/fully_async_rollouter.py (``get_statistics``,
``get_hybrid_statistics``) and detach_utils.py (``processing_time/*``)."""

QUEUES = (  # fully_async_rollouter.get_statistics(): monitor/*
    ("fully_async/monitor/queue/pending_queue_size", "pending (waiting to be generated)"),
    ("fully_async/monitor/queue/cancel_queue_size", "cancelled (verl main)"),
    ("fully_async/monitor/queue/mq_queue_size", "message queue (generated, not yet trained on)"),
    ("fully_async/monitor/active_tasks_size", "active generation tasks"),
)
STALENESS = (  # count/* and static/*: the rollouter pauses when staleness_samples reaches max_required_samples
    "fully_async/count/staleness_samples",
    "fully_async/static/max_required_samples",
    "fully_async/static/required_samples",
    "fully_async/static/staleness_threshold",
    "fully_async/static/max_queue_size",
    "fully_async/static/max_concurrent_samples",
)
PROCESSING = tuple(f"fully_async/processing_time/{s}" for s in ("avg", "max", "min", "tp50", "tp95", "tp99"))
HYBRID = (  # verl 0.9.1's get_hybrid_statistics() (the trainer's GPUs lent to rollout); main has none yet
    "fully_async/hybrid/num_hybrid_replicas",
    "fully_async/hybrid/last_add_time",
    "fully_async/hybrid/last_remove_time",
)
ASYNC_KEYS = frozenset((*(k for k, _ in QUEUES), *STALENESS, *PROCESSING, *HYBRID))
