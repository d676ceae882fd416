"""The project's own exceptions, raised where Kafka and Cassandra errors are translated.

    ParleyError
     ├── ConfigError        a setting is wrong; the message names the variable
     ├── Unavailable        a backing service cannot be reached right now (retry later)
     │    ├── BrokerUnavailable
     │    └── StoreUnavailable
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


class Fenced(ParleyError):
    """Another producer took this process's transactional id: this one is the zombie and must stop."""


class MigrationError(ParleyError):
    pass
