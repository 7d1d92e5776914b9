"""What the provenance of a store costs: the weights and tokenizer fingerprints of MiniLM.

``python bench/bench_fingerprint.py`` prints the state dict's size, the best of five
timings of :func:`probe.models.fingerprint.weights_fingerprint` and
:func:`probe.models.fingerprint.tokenizer_fingerprint` (computed once per capture, when
the store's manifest is made), and the hashing rate.
"""

from __future__ import annotations

import time


def best_of(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    from probe.models import load_model
    from probe.models.fingerprint import tokenizer_fingerprint, weights_fingerprint

    adapter = load_model("minilm")
    size = sum(t.numel() * t.element_size() for t in adapter.model.state_dict().values())
    w = best_of(lambda: weights_fingerprint(adapter.model))
    k = best_of(lambda: tokenizer_fingerprint(adapter.tokenizer))
    print(
        f"minilm: state dict {size / 2**20:.1f} MiB; weights fingerprint {w * 1000:.0f} ms "
        f"({size / 2**30 / w:.2f} GiB/s); tokenizer fingerprint {k * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
