"""Development tooling, not runtime code: what `tickerwire up` runs on a laptop.

- :mod:`.embedded`: the embedded PostgreSQL server and Apache Kafka (the PostgreSQL wheel and the
  JDK come with the ``embedded`` extra; Kafka's jars are fetched and checked against
  ``apache/jars.lock``), the local ports and child processes they run as.
- :mod:`.demo`: the seeded demo dataset and the live trickle of new posts.

Installed as ``tickerwire.devstack``. No deployable process imports it; the CLI imports it
lazily, for ``tickerwire up`` only, and the tests and benchmarks use it to start their servers.
"""
