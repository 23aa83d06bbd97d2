"""One module per verl target; each turns verl calls into plugin hook calls and nothing more.

Every module has ``install(module)`` (called by a wrapt post-import hook with the imported
verl module) and ``uninstall(module)``.
"""
