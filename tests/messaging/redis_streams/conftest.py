from tests.brokers import broker_names  # noqa: F401  (fixture)
