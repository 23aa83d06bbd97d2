"""One module per verl target; each turns verl calls into plugin hook calls and nothing more.

Every module has ``install(module)`` (called by a wrapt post-import hook with the imported
verl module) and ``uninstall(module)``.
"""


def unwrap(owner: object, name: str) -> None:
    """Undo ``wrapt.wrap_function_wrapper(owner, name, ...)`` (isinstance checks against wrapt's
    proxy classes are unreliable across its C and Python implementations: duck-type instead)."""
    attr = vars(owner).get(name)
    if attr is not None and hasattr(attr, "_self_wrapper") and hasattr(attr, "__wrapped__"):
        setattr(owner, name, attr.__wrapped__)
