"""Grafana: dashboards as code (generated JSON under dashboards/) and provisioning files."""

from pathlib import Path

DASHBOARDS_DIR = Path(__file__).resolve().parent / "generated"
