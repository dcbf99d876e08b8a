#!/bin/sh
# Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d): the
# schema's owner `pulse`, a login that owns the database `pulse` and may make roles
# (`pulse init --roles`), but is no superuser.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v pw="$OWNER_PASSWORD" <<'SQL'
CREATE ROLE pulse LOGIN CREATEROLE PASSWORD :'pw';
CREATE DATABASE pulse OWNER pulse;
SQL
