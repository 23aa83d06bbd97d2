"""The run explorer's JSON API (issue 33; the shapes: EXPLORER_API.md): the runs, one run's page
(keys, panels, findings, marks, card), its curves by step, one step (swimlane, slowest replica,
GPU faults, findings) and a step's samples, from the server's own stores and its Prometheus."""
