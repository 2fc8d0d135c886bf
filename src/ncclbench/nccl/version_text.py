"""NCCL's version code as people write it: the one decoding every reader uses (the
banner, the store's imports, explain, tune's rules, preflight's facts)."""

from __future__ import annotations


def version_text(code: int) -> str:
    """22809 -> "2.28.9" (NCCL_VERSION(X,Y,Z) = X*10000+Y*100+Z since 2.9); codes before 2.9
    were X*1000+Y*100+Z: 2804 -> "2.8.4"."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
