"""A run's timeline as a file: spans read from the server (or its Tempo), written in the Chrome
trace-event format that Perfetto UI and chrome://tracing open."""
