#!/bin/sh
# Run once by the postgres image when it creates the primary's data directory
# (/docker-entrypoint-initdb.d): the streaming replica (service postgres-replica) may connect
# for replication, with the same password as everything else here.
set -e
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
