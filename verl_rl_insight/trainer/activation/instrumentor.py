"""OpenTelemetry instrumentor: ``opentelemetry-instrument python3 -m verl.trainer.main_ppo ...``
applies the same patches (entry point group ``opentelemetry_instrumentor``, name ``verl``)."""

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from verl_rl_insight.trainer.activation import bootstrap


class VerlInstrumentor(BaseInstrumentor):  # type: ignore[misc]  # opentelemetry is not followed
    def instrumentation_dependencies(self) -> tuple[str, ...]:
        return ("verl >= 0.6",)

    def _instrument(self, **kwargs: object) -> None:
        bootstrap.activate()

    def _uninstrument(self, **kwargs: object) -> None:
        bootstrap.deactivate()
