"""``rl-insight mcp``: the runs, findings, curves, steps, samples and profiles as Model Context
Protocol tools, on the official ``mcp`` SDK, reading a running server through its HTTP API."""
