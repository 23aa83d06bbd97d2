"""The run explorer's routes, folded into the API's table (server/api/routes.py): its JSON API
(the shapes: ``server/explorer/README`` in EXPLORER_API terms, and the OpenAPI document) and its
pages. Curves and figures are for anyone like the rest of the read API; samples (prompts and
responses) need the token or that run's credential; the run card only comes with the token."""

from verl_rl_insight.contract import paths
from verl_rl_insight.server.api import explorer_handlers as handlers
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.openapi import JSON_OK, query
from verl_rl_insight.server.api.route import Doc, Route

_RUN_TEXT = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"}
RUN = (
    query("project", _RUN_TEXT, True, "the run's project"),
    query("experiment_name", _RUN_TEXT, True, "the run's experiment_name"),
)
STEP = query("step", {"type": "integer", "minimum": 0, "maximum": 10**12}, True, "the trainer step")
KEYS = query(
    "keys",
    {"type": "string", "minLength": 1, "maxLength": 64 * 257, "pattern": r"^[^\x00-\x1f\x7f-\x9f]+$"},
    True,
    "verl's keys, comma-separated (critic/score/mean,actor/entropy), at most 64",
)
STEPS = query("steps", {"type": "string", "pattern": r"^[0-9]*:[0-9]*$"}, False, "only steps A:B (both included)")
PAGE = Doc(f"the run explorer's page (one HTML shell; its data is {paths.EXPLORER}/*)")

EXPLORER_ROUTES = (
    Route(
        "GET",
        paths.EXPLORER_RUNS,
        handlers.get_runs,
        Access.ANYONE,
        Doc("the runs, newest first: step, age, state, findings, a sparkline"),
    ),
    Route(
        "GET",
        paths.EXPLORER_RUN,
        handlers.get_run,
        Access.ANYONE,
        Doc(
            "one run: its keys, the key curves' panels, its findings (diagnose's), marks, the other runs of its "
            "project, its card (with the token only)",
            JSON_OK,
            RUN,
            (400, 404),
        ),
    ),
    Route(
        "GET",
        paths.EXPLORER_CURVES,
        handlers.get_curves,
        Access.ANYONE,
        Doc("a run's curves by step, aligned on its steps", JSON_OK, (*RUN, KEYS, STEPS), (400, 404)),
    ),
    Route(
        "GET",
        paths.EXPLORER_STEP,
        handlers.get_step,
        Access.ANYONE,
        Doc(
            "one step: its swimlane, the slowest replica, the long tail, its GPUs' faults, the findings over it",
            JSON_OK,
            (*RUN, STEP),
            (400, 404),
        ),
    ),
    Route(
        "GET",
        paths.EXPLORER_SAMPLES,
        handlers.get_samples,
        Access.RUN_CREDENTIAL,
        Doc(
            "a step's samples: prompts and responses (the token, or a run credential of that run)",
            JSON_OK,
            (*RUN, STEP),
            (400, 401, 403),
        ),
        run_in="query",
    ),
    Route("GET", "/", handlers.get_page, Access.ANYONE, PAGE),
    Route("GET", paths.PAGE_RUNS, handlers.get_page, Access.ANYONE, PAGE, prefix=True),
    Route("GET", paths.EXPLORER_STATIC, handlers.get_page, Access.ANYONE, PAGE, prefix=True),
)
