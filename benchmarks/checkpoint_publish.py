"""Publishing a checkpoint through a local blob store: the copies it used to make, against the
renames and hard links it makes now.

    uv run python benchmarks/checkpoint_publish.py [--gib 1] [--repeats 3] [--json] [--dir DIR]

Each repeat writes a checkpoint folder of `--gib` GiB of random weights (a `model.safetensors`
stand-in, a config and the trainer's state) in a scratch folder beside the store, as the
trainer's save does, then times what a training step does with it before a server can load it:
the trainer's upload (`upload_dir`), the bridge's conversion for the local backend
(`convert_checkpoint`) and a server's fetch into its weights cache (`get_dir`). Two ways, in
the same run and on the same files: `copy` (every step copies the files, what the store did
before: `move=False`, `link=False`, and the conversion run on a copy of the checkpoint) and
`now` (`move=True`, `link=True`: the save is renamed into the store, the conversion and the
fetch hard-link it). The page cache is flushed (`sync`) before each timing. The figure: the
median seconds of each way and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rollout.blobs import LocalBlobStore, upload_dir
from rollout.bridges.convert import TRAINER_STATE, convert_checkpoint


def _save(folder: Path, gib: float) -> None:
    """A checkpoint folder as the torch provider writes one (weights, config, trainer state)."""
    (folder / TRAINER_STATE).mkdir(parents=True)
    block = os.urandom(1 << 20)
    with open(folder / "model.safetensors", "wb") as handle:
        for _ in range(round(gib * 1024)):
            handle.write(block)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (folder / TRAINER_STATE / "state.pt").write_bytes(block)


def _copy_way(store: LocalBlobStore, save: Path, key: str, serve: Path) -> None:
    uri = upload_dir(store, save, key)
    shutil.rmtree(save)
    with tempfile.TemporaryDirectory(dir=store.scratch_dir()) as tmp:
        source = store.get_dir(uri, Path(tmp) / "checkpoint")
        out = Path(tmp) / "converted"
        out.mkdir()
        for file in source.iterdir():  # the conversion copied the files it kept
            if file.is_file():
                shutil.copy2(file, out / file.name)
        store.put_dir(out, f"{key}-local")
    store.get_dir(f"{key}-local", serve)


def _now_way(store: LocalBlobStore, save: Path, key: str, serve: Path) -> None:
    uri = upload_dir(store, save, key, move=True)
    shutil.rmtree(save, ignore_errors=True)
    converted = convert_checkpoint(store, uri, "local")
    store.get_dir(converted, serve, link=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--gib", type=float, default=1.0, help="checkpoint size in GiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the store goes (default: cwd)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.gib <= 0 or args.repeats < 1:
        sys.exit("--gib must be > 0 and --repeats >= 1")
    root = Path(tempfile.mkdtemp(prefix="rollout-publish-", dir=args.dir or os.getcwd()))
    times: dict[str, list[float]] = {"copy": [], "now": []}
    try:
        store = LocalBlobStore(str(root / "blobs"))
        work = root / "trainer"
        for repeat in range(args.repeats):
            for way, publish in (("copy", _copy_way), ("now", _now_way)):
                save = work / f"{way}-{repeat}"
                _save(save, args.gib)
                os.sync()
                began = time.perf_counter()
                publish(store, save, f"runs/r/{way}-{repeat}", root / "cache" / f"{way}-{repeat}")
                times[way].append(time.perf_counter() - began)
                served = root / "cache" / f"{way}-{repeat}" / "model.safetensors"
                assert served.stat().st_size == round(args.gib * 1024) << 20
                shutil.rmtree(root / "cache" / f"{way}-{repeat}")
                store.delete(f"runs/r/{way}-{repeat}")
                store.delete(f"runs/r/{way}-{repeat}-local")
                print(f"{way} {repeat + 1}/{args.repeats}: {times[way][-1]:.3f} s", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "gib": args.gib,
        "repeats": args.repeats,
        "seconds": times,
        "median_copy_s": statistics.median(times["copy"]),
        "median_now_s": statistics.median(times["now"]),
        "load_average": os.getloadavg(),
    }
    result["ratio"] = result["median_copy_s"] / max(result["median_now_s"], 1e-6)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"upload + conversion + fetch of a {args.gib:g} GiB checkpoint, median of "
        f"{args.repeats}: copies {result['median_copy_s']:.3f} s, renames and links "
        f"{result['median_now_s']:.4f} s ({result['ratio']:.0f}x)"
    )


if __name__ == "__main__":
    main()
