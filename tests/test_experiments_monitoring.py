"""experiments/theory_diagnostics.py reads the theory evaluator's lines of
each run and plots them; experiments/fine_tune.py is exercised by hand (its
numbers are in docs/results.md)."""

import json

from conftest import import_experiment


def test_theory_curves_are_read_once_per_step_and_plotted(tmp_path):
  module = import_experiment("theory_diagnostics")
  lines = [{"step": 2, "loss": 1.0},
           {"step": 3, "theory/gram_gap": 0.9, "theory/principal_angle_max":
            1.5, "theory/top_eigenspace_fraction": 0.2},
           {"step": 6, "theory/gram_gap": 0.5, "theory/principal_angle_max":
            1.0, "theory/top_eigenspace_fraction": 0.6},
           # A final evaluator line repeating step 6's values: kept once.
           {"step": 6, "theory/gram_gap": 0.5}]
  for name in module.RUNS:
    (tmp_path / name).mkdir()
    (tmp_path / name / "metrics.jsonl").write_text(
        "".join(json.dumps(l) + "\n" for l in lines))
  result = {name: module.curves(str(tmp_path / name)) for name in module.RUNS}
  curve = result["vicreg"]
  assert curve["theory/gram_gap"] == [[3, 0.9], [6, 0.5]]
  assert curve["theory/top_eigenspace_fraction"] == [[3, 0.2], [6, 0.6]]
  png = module.plot(result, str(tmp_path))
  assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
