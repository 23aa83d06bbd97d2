"""``rl-insight watch``: one run, live, in a terminal, from the server's Prometheus."""
