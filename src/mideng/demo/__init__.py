"""The payment story ``mideng demo`` plays through every layer (``story``), on the shop of
``shop``, over any broker mideng has (``lanes``)."""
