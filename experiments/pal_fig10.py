"""Figs. 3, 9 and 8 on a Gaussian mixture (Cabannes et al. 2023, arXiv 2303.15256, Fig. 10).

Same protocols as pal_fig3 / pal_fig9 / pal_fig8 (and the same `--setup`
names for Figs. 9 and 8; Fig. 3 has only `paper_notebook`) with the
mixture data X = Y + 0.3·E in R⁴ (train and test drawn from it, App. C.2.6
of the paper). The paper does not give σ for this data; we use the
Laplacian kernel with σ = 0.5 (λ = 1e-3).

  .venv/bin/python experiments/pal_fig10.py --out runs/pal_fig10 [--trials 100]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _pal  # noqa: E402
import pal_fig3  # noqa: E402
import pal_fig8  # noqa: E402
import pal_fig9  # noqa: E402

PARTS = {"queries": pal_fig3, "missing": pal_fig9, "noise": pal_fig8}


def config(setup: str = "paper_notebook", fast: bool = False,
           trials: int = 100) -> dict:
  """{"queries", "missing", "noise"}: the mixture configs of Figs. 3, 9, 8."""
  return {"queries": pal_fig3.config("paper_notebook", fast, trials,
                                     "mixture"),
          "missing": pal_fig9.config(setup, fast, trials, "mixture"),
          "noise": pal_fig8.config(setup, fast, trials, "mixture")}


def run(cfg: dict) -> dict:
  """The three mixture runs, keyed as in `config`."""
  return {part: PARTS[part].run(c) for part, c in cfg.items()}


def plot(result: dict, out) -> None:
  """out/pal_fig10_{queries,missing,noise}.png."""
  for part, res in result.items():
    PARTS[part].plot(res, out, f"pal_fig10_{part}")


def main(argv=None) -> dict:
  args = _pal.parse_args(__doc__.splitlines()[0], argv,
                         setups=tuple(pal_fig9.SETUPS))
  result = run(config(args.setup, args.fast, args.trials))
  for part, res in result.items():
    _common.save_json(args.out, f"pal_fig10_{part}.json", res)
  plot(result, args.out)
  return result


if __name__ == "__main__":
  res = main()
  for part, r in res.items():
    print(part, r["table"])
