"""The trainer side's HTTP client is the package's one client (kept here for the 0.1 import path)."""

from verl_rl_insight.contract.http_client import HttpClient as ServerClient

__all__ = ["ServerClient"]
