"""PromQL the CLI and the server write: run selectors with their values quoted."""

from verl_rl_insight.contract.naming import escape_label_value


def run_selector(project: str, experiment: str | None) -> str:
    """``{project="...",experiment_name="..."}`` (experiment None: the project alone) with the values
    escaped as PromQL strings."""
    if experiment is None:
        return f'{{project="{escape_label_value(project)}"}}'
    return f'{{project="{escape_label_value(project)}",experiment_name="{escape_label_value(experiment)}"}}'
