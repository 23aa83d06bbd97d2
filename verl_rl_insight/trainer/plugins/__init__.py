"""Built-in plugins: one module per subsystem, registered like any third-party plugin."""
