"""The jobs the server's own Prometheus scrapes (prometheus.yml): names that no registered
target may take (server/stores/targets.py), kept here so that both read them without one
importing the other."""

HUB_JOB = "rl_insight_hub"  # the job of the hub's scrapes (the targets' job cannot take this label: no honor_labels)
TARGETS_JOB = "rl_insight_targets"  # the registered targets, through http_sd
PROMETHEUS_JOB = "rl_insight_prometheus"  # Prometheus' own remote-write figures
# every job this server's Prometheus scrapes itself: a registered target may not take one (its
# series would pass for the hub's, e.g. a fake scrape number confirming a scrape never stored)
OWN_JOBS = (HUB_JOB, TARGETS_JOB, PROMETHEUS_JOB)
