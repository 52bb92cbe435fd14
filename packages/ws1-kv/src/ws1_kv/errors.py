"""KV-cache errors: one line naming the sequence and the problem. All are ValueErrors (bad input)."""


class KVCacheError(ValueError):
    """Base class: a request the cache cannot serve. Raised before anything is written."""


class CacheFull(KVCacheError):
    """No free slot, block or position is left for the request."""


class UnknownSequence(KVCacheError):
    """A sequence id the cache does not hold (never begun, or already freed)."""


class SequenceFinished(KVCacheError):
    """Decode (or any write) on a sequence marked finished."""
