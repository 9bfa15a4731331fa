"""Embed a dataset with a run's encoder: python -m ssljax.embed.

    python -m ssljax.embed --workdir RUN --data DIR_OR_NAME --out feats.npz \
        [--split test] [--batch_size 256] [--data_dir TFDS_DIR]

``--data`` is an image folder or a dataset name of `ssljax.data.open_split`
("fashion_mnist_local", a tfds name). An image folder is read as
`ssljax.data.open_split` reads a run's: ``DIR/<split>`` when that
sub-folder exists (``--split`` may then be sliced, "test[:1000]"), else
``DIR`` itself; in both, ``<class>/<file>`` or files at the top level
(unlabeled).

Writes ``--out`` (NumPy .npz) with

* "features": float32 (N, D), the representation the evaluators probe
  (`ssljax.pretrained.Pretrained.embed`);
* "names": str (N,), the image files' paths relative to the folder, or for
  a named dataset the row indices within the (sliced) split (int64 (N,));
* "labels": int32 (N,), only when the data has labels.

Batches are streamed through the encoder with a progress bar; only the
(N, D) features are held, not the images. A user error (no run, no
checkpoint, no such data) is one line on stderr and exit status 2.
"""

import argparse
import os
import sys

import numpy as np

__all__ = ["main", "open_data", "USAGE_ERROR"]

USAGE_ERROR = 2  # exit status of a user error (bad flag, run or data)


def open_data(spec: str, split: str, *, channels: int = 3,
              data_dir: str | None = None):
  """The source to embed, and the names of its rows.

  Args:
    spec: an image folder, or a dataset name of `ssljax.data.open_split`.
    split: the split of a named dataset, or of an image folder holding
      ``<split>/`` (tfds slice syntax allowed: "test[:1000]").
    channels: image-folder images are converted to 1 or 3 channels.
    data_dir: a named dataset's data dir (None: its default).

  Returns:
    (source, names): names are str (N,) file paths relative to the folder,
    or int64 (N,) row indices within the (sliced) split of a named dataset.

  Raises:
    ssljax.data.DatasetUnavailableError: no such folder or dataset, or no
      image in it.
    ssljax.extras.MissingExtraError: a tfds dataset without
      tensorflow-datasets installed.
  """
  from ssljax import data  # pylint: disable=import-outside-toplevel
  if os.path.isdir(spec):
    folder, _ = data.folder_split(split)
    if os.path.isdir(os.path.join(spec, folder)):
      source = data.open_split("image_folder", split, data_dir=spec,
                               channels=channels)
    else:
      source = data.ImageFolderSource(spec, channels)
    return source, np.asarray(source.files, dtype=str)
  if os.sep in spec or spec.startswith("."):
    raise data.DatasetUnavailableError(f"image folder {spec!r} does not exist")
  source = data.open_split(spec, split, data_dir=data_dir)
  return source, np.arange(len(source), dtype=np.int64)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m ssljax.embed",
      description="Embed images with a run's encoder into an .npz file.")
  parser.add_argument("--workdir", required=True,
                      help="the run's folder (--workdir of ssljax.main)")
  parser.add_argument("--data", required=True,
                      help="an image folder or a dataset name")
  parser.add_argument("--out", required=True, help="the .npz file to write")
  parser.add_argument("--split", default="test",
                      help="split of a named dataset, or sub-folder of an "
                      "image folder (default: test)")
  parser.add_argument("--batch_size", type=int, default=256,
                      help="images per forward pass (default: 256)")
  parser.add_argument("--data_dir", default=None,
                      help="data dir of a named dataset (default: its own)")
  parser.add_argument("--step", type=int, default=None,
                      help="checkpoint step (default: the newest intact)")
  return parser


def main(argv=None) -> int:
  """Runs the command line ``argv`` (None: ``sys.argv[1:]``).

  Returns:
    0 on success; ``USAGE_ERROR`` (2) after printing one line "error: ..."
    on stderr for a folder that is not a run, a run without a readable
    checkpoint, data that cannot be opened or images the encoder cannot
    take.
  """
  args = _parser().parse_args(argv)
  from ssljax import data, extras, pretrained  # pylint: disable=import-outside-toplevel
  try:
    model = pretrained.load(args.workdir, step=args.step)
    source, names = open_data(args.data, args.split,
                              channels=model.channels or 3,
                              data_dir=args.data_dir)
    features, labels = model.embed_source(
        source, batch_size=args.batch_size,
        desc=f"embedding {args.data} (step {model.step})")
  except (pretrained.PretrainedLoadError, data.DatasetUnavailableError,
          extras.MissingExtraError, ValueError) as e:
    print(f"error: {e}".replace("\n", " "), file=sys.stderr, flush=True)
    return USAGE_ERROR
  arrays = {"features": features, "names": names}
  if (labels >= 0).any():
    arrays["labels"] = labels
  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  np.savez(args.out, **arrays)
  print(f"wrote {args.out}: features {features.shape} float32 from step "
        f"{model.step} of {args.workdir}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
