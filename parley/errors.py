"""The project's own exceptions, raised where Kafka and Cassandra errors are translated.

    ParleyError
     ├── ConfigError        a setting is wrong; the message names the variable
     ├── Unavailable        a backing service cannot be reached right now (retry later)
     │    ├── BrokerUnavailable
     │    └── StoreUnavailable
     ├── BadInput           this record breaks its event's rules: dead-letter it, retrying cannot help
     └── MigrationError     the CQL migrations and the database disagree
"""


class ParleyError(Exception):
    pass


class ConfigError(ParleyError):
    pass


class Unavailable(ParleyError):
    pass


class BrokerUnavailable(Unavailable):
    pass


class StoreUnavailable(Unavailable):
    pass


class BadInput(ParleyError, ValueError):
    """The record in hand is bad (an id no row can hold, a field out of range): a core raises it to have
    the record dead-lettered (streams/handling.py). Also a ``ValueError``, which cores raise for the same
    reason; the message names what is wrong, never the payload."""


class Fenced(ParleyError):
    """Another producer took this process's transactional id: this one is the zombie and must stop."""


class MigrationError(ParleyError):
    pass
