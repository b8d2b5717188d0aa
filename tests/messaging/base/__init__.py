"""The base suite every broker adapter's tests subclass (faststream's tests/brokers/base is
the model): each scenario written once, against a broker under test
(``tests.messaging.base.broker.Broker``) that the broker's package provides.

A broker's ``test_suite.py`` holds one class::

    class TestRabbitMQ(BrokerSuite):
        @pytest.fixture
        def broker(self, broker_names: BrokerNames) -> RabbitMQ:
            return RabbitMQ(broker_names)

and, where its broker does a scenario otherwise or cannot do it, the override that says so
(a skip whose reason names what the broker does, next to a test of that). What only one
broker has (a channel closed, a durable deleted, a partition revoked, a group lost) stays in
that broker's own test files.
"""

from __future__ import annotations

from tests.messaging.base.batch import BatchCases
from tests.messaging.base.cancel import CancelCases
from tests.messaging.base.consume import ConsumeCases
from tests.messaging.base.operations import OperationCases
from tests.messaging.base.outage import StoreOutageCases
from tests.messaging.base.reconnect import ReconnectCases
from tests.messaging.base.retry import RetryCases
from tests.messaging.base.storm import StormCases
from tests.messaging.base.transactional import TransactionalCases


class BrokerSuite(
    ConsumeCases,
    RetryCases,
    CancelCases,
    ReconnectCases,
    StoreOutageCases,
    TransactionalCases,
    BatchCases,
    StormCases,
    OperationCases,
):
    """Every scenario of the base suite; a subclass gives the ``broker`` fixture."""
