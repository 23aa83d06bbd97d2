"""What the training-health detectors are judged on (real runs, realistic healthy shapes, injected
failures), for the tests: the tests import it from here, never from benchmarks/. The module itself
lives in benchmarks/health_shapes.py, where bench_health.py reads it too (it moves here whole when
no branch edits it: a re-export keeps both merges clean)."""

import benchmarks.health_shapes as _shapes

globals().update({name: value for name, value in vars(_shapes).items() if not name.startswith("__")})
