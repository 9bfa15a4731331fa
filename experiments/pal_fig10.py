"""002 Fig. 10: Figs. 3, 9 and 8 on a Gaussian mixture X = Y + 0.3·E (R⁴).

Same protocols as pal_fig3 / pal_fig9 / pal_fig8 with the mixture data
(train and test drawn from it). The paper does not give σ for this data;
we use the Laplacian kernel with σ = 0.5 (λ = 1e-3).

  .venv/bin/python experiments/pal_fig10.py --out runs/pal_fig10 [--trials 100]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _pal  # noqa: E402
import pal_fig3  # noqa: E402
import pal_fig8  # noqa: E402
import pal_fig9  # noqa: E402


def run(args) -> dict:
  return {"queries": pal_fig3.run(args, "mixture", "pal_fig10_queries"),
          "missing": pal_fig9.run(args, "mixture", "pal_fig10_missing"),
          "noise": pal_fig8.run(args, "mixture", "pal_fig10_noise")}


if __name__ == "__main__":
  res = run(_pal.parse_args(__doc__.splitlines()[0]))
  for k, v in res["queries"]["at"].items():
    print("queries", k, v)
  c = res["missing"]["curves"]
  print("missing p:", res["missing"]["missing_fraction"])
  print("  contrastive_oracle", [round(float(v), 3) for v in
                                 c["contrastive_oracle"]["mean"]])
  print("  components", [round(float(v), 1) for v in c["components"]["mean"]])
  c = res["noise"]["curves"]
  print("noise oracle", [round(float(v), 3) for v in c["oracle"]["mean"]])
