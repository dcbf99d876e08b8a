#!/bin/sh
# Run once by the postgres image on an empty data directory: Pulse's database is owned by
# `pulse`, a role that is no superuser (it may make the node and web roles: CREATEROLE).
set -eu
psql -v ON_ERROR_STOP=1 -q -U "$POSTGRES_USER" -d postgres -v owner_password="$OWNER_PASSWORD" <<'SQL'
CREATE ROLE pulse LOGIN NOSUPERUSER NOCREATEDB CREATEROLE PASSWORD :'owner_password';
CREATE DATABASE pulse OWNER pulse;
SQL
