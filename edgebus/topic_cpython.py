"""CPython's topic.key, which remembers string topics' keys. Never imported on
MicroPython (edgebus/trie_cpython.py says why)."""

KEYS = 4096  # string topics' keys remembered, after which all are forgotten together


def string_keys(key):
    """``key`` (topic.key) remembering the keys of string topics: a string
    published again is not split and checked again."""
    keys = {}

    def cached(topic):
        if type(topic) is not str:
            return key(topic)
        k = keys.get(topic)
        if k is None:
            k = key(topic)
            if len(keys) >= KEYS:
                keys.clear()
            keys[topic] = k
        return k

    cached.__doc__ = key.__doc__
    return cached
