"""The I/O-free heart of mideng: records, claim decisions, keys, fingerprints and codecs.

Nothing in this package touches a network, a file or a clock of its own; stores and the Guard
drivers feed it the store's time and act on what it returns.
"""
